// How one call is launched, decided on the host from static shapes, the device's SM count and
// an environment override only, never from device data, so the same launches are made every
// call and a command buffer (CUDA/HIP graph) can capture them.
//
// The merge follows the split kernel as a programmatic dependent launch (PDL, NVIDIA sm_90+;
// its launch and prologue overlap the split kernel) when the split grid is "small": at most one
// CTA an SM, a latency-bound call. There PDL saved 0.5-0.7 us on an H200 (SWA R=1, full 2k R=1;
// benchmarks/NOTES.md version 4); on full grids (8k R=4 to 128k) it cost 5-6 us in version 3 and
// between -1.1 and +2.5 us in version 5's split sweep.
// MUSE_ATTN_PDL=1 / 0 forces it on / off (benchmarks, tests); read once a process.
//
// Tried and measured slower (NOTES.md version 6): 8 warps a CTA splitting every tile's keys in
// two halves for small grids, and a PDL trigger after the split kernel's stores.
#ifndef MUSE_ATTN_GPU_LAUNCH_PLAN_H_
#define MUSE_ATTN_GPU_LAUNCH_PLAN_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "gpu/kernels.h"
#include "gpu/vendor.h"

namespace muse_attn::gpu {

struct LaunchPlan {
  bool merge_pdl = false;  // the merge is a programmatic dependent launch of the split kernel
};

inline bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

// Split CTAs of the call (split_grid, as launch_split launches it).
inline int64_t split_ctas(const VerifyParams& p) {
  const dim3 g = split_grid(p);
  return int64_t{g.x} * g.y * g.z;
}

inline LaunchPlan plan_launch(const VerifyParams& p) {
  LaunchPlan plan;
#if defined(MUSE_ATTN_CUDA)
  static const int forced = env_is("MUSE_ATTN_PDL", "1") ? 1 : env_is("MUSE_ATTN_PDL", "0") ? 0 : -1;
  static const bool sm90 = device_supports_pdl();  // one kind of GPU a process, as XLA assumes
  if (!sm90 || forced == 0) return plan;
  int dev = 0, sms = 0;
  const bool small = current_device(&dev) == gpuSuccess &&
                     cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
                     split_ctas(p) <= sms;
  plan.merge_pdl = forced == 1 || small;
#else
  (void)p;  // AMD: plain launches
#endif
  return plan;
}

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_LAUNCH_PLAN_H_
