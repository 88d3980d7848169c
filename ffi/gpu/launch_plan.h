// How one call is launched, decided on the host from the device's kind, the merge's compiled
// architecture and an environment override only (static shapes may join them), never from
// device data, so the same launches are made every call and a command buffer (CUDA/HIP graph)
// can capture them.
//
// The merge follows the split kernel as a programmatic dependent launch (PDL, NVIDIA sm_90+;
// its launch and prologue overlap the split kernel's tail) when the split grid has at most 2 CTAs
// an SM, on sm_90+ GPUs where the loaded merge code was compiled for sm_90+ (it then has the
// dependency wait). Measured on an H200 through JAX (benchmarks/NOTES.md version 8, command
// buffers on, PDL against plain, two rounds): where the split grid fills 3 CTAs an SM PDL cost
// (128k R=4 80.2 / 82.5 vs 77.9 / 78.9 us; SWA R=16 12.9 vs 12.1 in version 7), at 2 or fewer
// it paid or was even (SWA R=1 6.9 vs 7.8, 8k R=4 10.9 vs 11.7, 8k R=8 14.9 vs 17.2, 32k R=4
// even). The kernels alone (kernel_bench) had shown PDL ahead everywhere (version 7): only the
// JAX figures decide. MUSE_ATTN_PDL=1 / 0 forces it on / off (benchmarks, compute-sanitizer in
// JAX processes, tests); read once a process.
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
  // One kind of GPU a process, as XLA assumes; the merge's code must have the wait in it.
  static const bool sm90 = device_supports_pdl() && merge_waits_for_split();
  if (!sm90 || forced == 0) return plan;
  int dev = 0, sms = 0;
  const bool small = current_device(&dev) == gpuSuccess &&
                     cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
                     split_ctas(p) <= int64_t{2} * sms;
  plan.merge_pdl = forced == 1 || small;
#else
  (void)p;  // AMD: plain launches
#endif
  return plan;
}

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_LAUNCH_PLAN_H_
