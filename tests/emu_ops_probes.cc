// Probe kernels for the AMD device helpers of gpu/amd_ops.h (tests/test_amd_ops.py): each runs
// one helper over a block of two waves in the emulator, from the test's inputs to its outputs,
// which the test compares with a numpy model of the documented semantics. Compiled into the
// emulator's test library for gfx942 (the fallbacks) and gfx950 (the instructions).
#include <cstdint>
#include <cstdio>

#include "gpu/amd_ops.h"
#include "gpu/emu/emulator.h"
#include "gpu/vendor.h"

namespace {

using namespace muse_attn::gpu;

struct OpsProbe {
  const uint32_t* in;  // the probe's inputs, words
  uint32_t* out;       // its outputs, words
  int lds_words;       // LDS the block fills from in[0 .. lds_words) first
  int variant;         // which DPP control / cache policy
};

__device__ void fill_lds(const OpsProbe& p, char* smem) {
  for (int i = threadIdx.x; i < p.lds_words; i += blockDim.x) lds_write(smem + 4 * i, p.in[i]);
  __syncthreads();
}

// in: LDS words, then one byte offset a thread; out: 2 words a thread.
__global__ void probe_lds_read_tr_b16(OpsProbe p) {
  MUSE_DYNAMIC_SHARED(smem);
  fill_lds(p, smem);
  const int t = threadIdx.x;
  const uint2 r = amd::lds_read_tr_b16(smem, p.in[p.lds_words + t]);
  p.out[2 * t] = r.x;
  p.out[2 * t + 1] = r.y;
}

// in: first[n], second[n]; out: first'[n], second'[n] (n threads).
template <int kRows>
__global__ void probe_permlane_swap(OpsProbe p) {
  const int t = threadIdx.x, n = blockDim.x;
  const amd::SwapPair r = amd::permlane_swap<kRows>(p.in[t], p.in[n + t]);
  p.out[t] = r.first;
  p.out[n + t] = r.second;
}

// in: a[n], b[n] (float bits); out: the packed pair.
__global__ void probe_cvt_pk_bf16_f32(OpsProbe p) {
  const int t = threadIdx.x, n = blockDim.x;
  p.out[t] = amd::cvt_pk_bf16_f32(__uint_as_float(p.in[t]), __uint_as_float(p.in[n + t]));
}

// in: old[n], src[n]; out: the DPP result of variant (DppCase below).
__global__ void probe_dpp(OpsProbe p) {
  const int t = threadIdx.x, n = blockDim.x;
  const uint32_t old = p.in[t], src = p.in[n + t];
  uint32_t r = 0;
  switch (p.variant) {
    case 0: r = amd::dpp<amd::dpp_quad_perm(3, 2, 1, 0)>(old, src); break;
    case 1: r = amd::dpp<amd::dpp_quad_perm(1, 0, 3, 2)>(old, src); break;
    case 2: r = amd::dpp<amd::dpp_row_shr(1)>(old, src); break;
    case 3: r = amd::dpp<amd::dpp_row_shr(3), 0xf, true>(old, src); break;
    case 4: r = amd::dpp<amd::dpp_row_shl(2), 0x5>(old, src); break;
    case 5: r = amd::dpp<amd::dpp_row_ror(5)>(old, src); break;
    case 6: r = amd::dpp<amd::kDppRowMirror>(old, src); break;
    case 7: r = amd::dpp<amd::kDppRowHalfMirror, 0xa>(old, src); break;
    default: break;
  }
  p.out[t] = r;
}

// in: x[n] (float bits); out: the max over the lane's row of 16 (variant 0) / the sum over lane
// and lane ^ 16 (1) / lane ^ 32 (2).
__global__ void probe_reduce(OpsProbe p) {
  const int t = threadIdx.x;
  const float x = __uint_as_float(p.in[t]);
  auto mx = [](float a, float b) { return fmaxf(a, b); };
  auto add = [](float a, float b) { return a + b; };
  float r = 0.0f;
  if (p.variant == 0) r = amd::row_reduce16(x, mx);
  else if (p.variant == 1) r = amd::xor_step<16>(x, add);
  else r = amd::xor_step<32>(x, add);
  p.out[t] = __float_as_uint(r);
}

// in: 4 words a thread; out: them, loaded with the policy of variant (0 cached, 1 nontemporal).
__global__ void probe_global_load16(OpsProbe p) {
  const int t = threadIdx.x;
  const amd::u32x4 v = p.variant == 0 ? amd::global_load16<amd::CachePolicy::kCached>(p.in + 4 * t)
                                      : amd::global_load16<amd::CachePolicy::kNonTemporal>(p.in + 4 * t);
  for (int i = 0; i < 4; ++i) p.out[4 * t + i] = v[i];
}

// in: 4 words a thread, the buffer, then a thread's byte offset (variant 2: the buffer's
// range ends 8 bytes into the last thread's chunk); out: the 4 words buffer_load16 gives.
__global__ void probe_buffer_load16(OpsProbe p) {
  const int t = threadIdx.x, n = blockDim.x;
  const uint32_t range = 16u * n - (p.variant == 2 ? 8u : 0u);
  const amd::u32x4 v = amd::buffer_load16<amd::CachePolicy::kNonTemporal>(p.in, range, p.in[4 * n + t]);
  for (int i = 0; i < 4; ++i) p.out[4 * t + i] = v[i];
}

// in: words; out[t] = in[in[n + t]] read by load_invariant.
__global__ void probe_load_invariant(OpsProbe p) {
  const int t = threadIdx.x, n = blockDim.x;
  p.out[t] = amd::load_invariant(p.in + p.in[n + t]);
}

// in: words; out: 4 floats a word (its bytes as the target's FP8, by two conversions).
__global__ void probe_cvt_pk_f32_fp8(OpsProbe p) {
  const int t = threadIdx.x;
  const amd::F32Pair lo = amd::cvt_pk_f32_fp8<false>(p.in[t]), hi = amd::cvt_pk_f32_fp8<true>(p.in[t]);
  p.out[4 * t] = __float_as_uint(lo.lo);
  p.out[4 * t + 1] = __float_as_uint(lo.hi);
  p.out[4 * t + 2] = __float_as_uint(hi.lo);
  p.out[4 * t + 3] = __float_as_uint(hi.hi);
}

using Kernel = void (*)(OpsProbe);
constexpr Kernel kKernels[] = {probe_lds_read_tr_b16, probe_permlane_swap<16>,
                               probe_permlane_swap<32>, probe_cvt_pk_bf16_f32,
                               probe_dpp, probe_reduce, probe_global_load16, probe_buffer_load16,
                               probe_load_invariant, probe_cvt_pk_f32_fp8};
constexpr const char* kNames[] = {"probe_lds_read_tr_b16", "probe_permlane_swap<16>",
                                  "probe_permlane_swap<32>", "probe_cvt_pk_bf16_f32",
                                  "probe_dpp", "probe_reduce", "probe_global_load16",
                                  "probe_buffer_load16", "probe_load_invariant", "probe_cvt_pk_f32_fp8"};

}  // namespace

// Runs probe `which` (kKernels) on one block of `threads` under the schedule, with lds_words of
// LDS filled from in[] and 64 bytes past them never written; 0, or 1 with the emulator's message
// in error.
extern "C" int muse_emu_ops_probe(int which, int variant, int threads, const uint32_t* in,
                                  int lds_words, uint32_t* out, int schedule, uint64_t seed,
                                  char* error, int error_len) {
  if (which < 0 || which >= static_cast<int>(sizeof kKernels / sizeof kKernels[0])) return -1;
#if defined(__gfx950__)
  muse_emu::configure(static_cast<muse_emu::Schedule>(schedule), seed, 163840);
#else
  muse_emu::configure(static_cast<muse_emu::Schedule>(schedule), seed, 65536);
#endif
  struct Call {
    Kernel kernel;
    OpsProbe p;
  };
  const Call call{kKernels[which], OpsProbe{in, out, lds_words, variant}};
  const size_t smem = 4 * static_cast<size_t>(lds_words) + 64;  // a tail never written
  const int rc = muse_emu::launch(
      kNames[which], reinterpret_cast<const void*>(kKernels[which]),
      [](const void* c) { static_cast<const Call*>(c)->kernel(static_cast<const Call*>(c)->p); },
      &call, muse_emu::Dim3{1, 1, 1}, muse_emu::Dim3{static_cast<unsigned>(threads), 1, 1}, smem,
      smem);
  if (rc != 0 && error != nullptr) std::snprintf(error, error_len, "%s", muse_emu::last_error());
  return rc;
}
