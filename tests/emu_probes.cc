// Kernels with one planted bug each, for the AMD emulator's own checks
// (tests/test_amd_emulator.py): compiled into the test build of the emulator beside the real
// kernels, through the same stand-in HIP header.
#include <cstdint>
#include <cstdio>

#include "gpu/emu/emulator.h"
#include "gpu/vendor.h"

namespace {

using muse_attn::gpu::lds_read;
using muse_attn::gpu::lds_write;

struct Probe {
  float* out;
};

// A shuffle that only half of the wave reaches.
__global__ void shuffle_on_half_a_wave(Probe p) {
  float x = static_cast<float>(threadIdx.x);
  if (threadIdx.x % 64 < 32) x = __shfl_xor(x, 1);
  p.out[threadIdx.x] = x;
}

// Lanes 32..63 exit, then the rest read lane 40.
__global__ void read_of_an_exited_lane(Probe p) {
  if (threadIdx.x % 64 >= 32) return;
  p.out[threadIdx.x] = __shfl(1.0f, 40);
}

// Wave 1 reads what wave 0 writes, with no barrier between.
__global__ void lds_read_before_write(Probe p) {
  MUSE_DYNAMIC_SHARED(smem);
  const int t = threadIdx.x;
  if (t < 64) lds_write(smem + 4 * t, 1.0f);
  if (t >= 64) p.out[t] = lds_read<float>(smem + 4 * (t - 64));
}

// The same with the barrier: fine.
__global__ void lds_read_after_barrier(Probe p) {
  MUSE_DYNAMIC_SHARED(smem);
  const int t = threadIdx.x;
  if (t < 64) lds_write(smem + 4 * t, 1.0f + t);
  __syncthreads();
  if (t >= 64) p.out[t] = lds_read<float>(smem + 4 * (t - 64));
}

// The two waves wait at two different barriers.
__global__ void waves_at_different_barriers(Probe p) {
  if (threadIdx.x < 64) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  p.out[threadIdx.x] = 0.0f;
}

// An LDS read past the dynamic LDS.
__global__ void lds_out_of_bounds(Probe p) {
  MUSE_DYNAMIC_SHARED(smem);
  p.out[threadIdx.x] = lds_read<float>(smem + 1024 + 4 * threadIdx.x);
}

template <typename K>
int launch(const char* name, K kernel, unsigned threads, size_t smem, size_t limit, float* out) {
  const Probe probe{out};
  struct Call {
    K kernel;
    Probe p;
  };
  const Call call{kernel, probe};
  return muse_emu::launch(
      name, reinterpret_cast<const void*>(kernel),
      [](const void* c) { static_cast<const Call*>(c)->kernel(static_cast<const Call*>(c)->p); },
      &call, muse_emu::Dim3{1, 1, 1}, muse_emu::Dim3{threads, 1, 1}, smem, limit);
}

}  // namespace

// Runs probe `which` under the schedule and seed; 0, or 1 with the emulator's message in error.
extern "C" int muse_emu_probe(int which, int schedule, uint64_t seed, char* error, int error_len) {
  static float out[1024];
  muse_emu::configure(static_cast<muse_emu::Schedule>(schedule), seed, 65536);
  int rc = 0;
  switch (which) {
    case 0: rc = launch("shuffle_on_half_a_wave", shuffle_on_half_a_wave, 128, 0, 0, out); break;
    case 1: rc = launch("read_of_an_exited_lane", read_of_an_exited_lane, 64, 0, 0, out); break;
    case 2: rc = launch("lds_read_before_write", lds_read_before_write, 128, 256, 65536, out); break;
    case 3: rc = launch("lds_read_after_barrier", lds_read_after_barrier, 128, 256, 65536, out); break;
    case 4: rc = launch("waves_at_different_barriers", waves_at_different_barriers, 128, 0, 0, out); break;
    case 5: rc = launch("lds_out_of_bounds", lds_out_of_bounds, 64, 256, 65536, out); break;
    case 6:  // over budget: 72 KiB of dynamic LDS on a 64 KiB target
      rc = launch("lds_read_after_barrier", lds_read_after_barrier, 128, 73728, 73728, out);
      break;
    case 7:  // more than the kernel's limit (the attribute not raised)
      rc = launch("lds_read_after_barrier", lds_read_after_barrier, 128, 32768, 16384, out);
      break;
    default: return -1;
  }
  if (rc != 0 && error != nullptr) std::snprintf(error, error_len, "%s", muse_emu::last_error());
  if (rc == 0 && which == 3 && out[64] != 1.0f) {  // the read sees the write
    std::snprintf(error, error_len, "lds_read_after_barrier read %g", out[64]);
    return 2;
  }
  return rc;
}
