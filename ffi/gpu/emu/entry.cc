// The emulator's C entry points for the tests (tests/amd_emulator.py loads the library with
// ctypes): one verify-attention call through the real launchers (split, then merge), one MFMA of
// given lane registers, and what the build targets.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "gpu/emu/emulator.h"
#include "gpu/emu/entry.h"
#include "gpu/kernels.h"
#include "gpu/launch_plan.h"
#include "gpu/vendor.h"
#include "gpu/warp_mma.h"

namespace {

#if defined(__gfx950__)
constexpr int kLdsBytes = 163840;  // a gfx950 (CDNA4) workgroup's LDS
constexpr const char* kTarget = "gfx950";
#else
constexpr int kLdsBytes = 65536;  // gfx942 (CDNA3)
constexpr const char* kTarget = "gfx942";
#endif

void copy_error(char* error, int error_len, const char* msg) {
  if (error != nullptr && error_len > 0) std::snprintf(error, error_len, "%s", msg);
}

// One wave: each lane hands its registers to the MFMA the kernels use (warp_mma.h mfma_bf16).
struct MfmaProbe {
  const uint32_t* a;  // [64][kMfmaK / 8]
  const uint32_t* b;
  const float* c;     // [64][4]
  float* d;
};
__global__ void mfma_probe(MfmaProbe p) {
  using namespace muse_attn::gpu;
  constexpr int kWords = kMfmaK / 8;
  const int lane = threadIdx.x;
  mfma_words_t a, b;
  for (int w = 0; w < kWords; ++w) a[w] = p.a[lane * kWords + w], b[w] = p.b[lane * kWords + w];
  const mfma_c_t c = {p.c[4 * lane], p.c[4 * lane + 1], p.c[4 * lane + 2], p.c[4 * lane + 3]};
  const mfma_c_t d = mfma_bf16(a, b, c);
  for (int i = 0; i < 4; ++i) p.d[4 * lane + i] = d[i];
}

}  // namespace

extern "C" {

const char* muse_emu_target() { return kTarget; }
int muse_emu_lds_bytes() { return kLdsBytes; }

// 0, or 1 with the error in error[0 .. error_len).
int muse_emu_verify_attention(const MuseEmuCall* call, char* error, int error_len) {
  using namespace muse_attn::gpu;
  const MuseEmuCall& c = *call;
  muse_emu::configure(static_cast<muse_emu::Schedule>(c.schedule), c.seed, kLdsBytes);
  VerifyParams p = sized_params(c.num_requests, c.tokens, c.num_q_heads, c.num_kv_heads,
                                c.head_dim, c.pages, c.window, c.num_splits, c.num_reqs_static);
  p.q = c.q;
  p.kv = c.kv;
  p.table = c.table;
  p.seq_lens = c.seq_lens;
  p.num_reqs = c.num_reqs;
  p.out = c.out;
  p.part_o = c.part_o;
  p.part_ml = c.part_ml;
  p.num_blocks = c.num_blocks;
  p.table_stride = c.table_stride;
  p.scale_log2 = c.scale * 1.4426950408889634f;
  p.k_scale = c.k_scale;
  p.v_scale = c.v_scale;
  p.kv_format = c.kv_format;
  p.scale_kind = c.scale_kind;
  p.draft_lens = c.draft_lens;
  p.tree_mask = c.tree_mask;
  p.draft_depths = c.draft_depths;
  p.lse = c.lse;
  p.draft_kind = c.draft_kind;
  Plan plan;
  plan.num_splits = c.num_splits;
  plan.split_kernel = static_cast<SplitKernel>(c.split_kernel);
  plan.merge_warps = c.merge_warps;
  plan.merge_by_lane = c.merge_by_lane != 0;
  plan.balance_segments = c.balance_segments != 0;
  if (launch_call(p, plan, nullptr) != gpuSuccess) {
    copy_error(error, error_len, muse_emu::last_error());
    return 1;
  }
  return 0;
}

// d = the MFMA of lanes' registers a, b (kMfmaK / 8 words each) and c (4 floats each).
int muse_emu_mfma(const uint32_t* a, const uint32_t* b, const float* c, float* d, char* error,
                  int error_len) {
  muse_emu::configure(muse_emu::Schedule::kLockstep, 1, kLdsBytes);
  const MfmaProbe probe{a, b, c, d};
  const int rc = muse_emu::launch(
      "mfma_probe", reinterpret_cast<const void*>(&mfma_probe),
      [](const void* x) { mfma_probe(*static_cast<const MfmaProbe*>(x)); }, &probe,
      muse_emu::Dim3{1, 1, 1}, muse_emu::Dim3{64, 1, 1}, 0, 0);
  if (rc != 0) copy_error(error, error_len, muse_emu::last_error());
  return rc;
}

int muse_emu_mfma_k() { return muse_attn::gpu::kMfmaK; }

}  // extern "C"
