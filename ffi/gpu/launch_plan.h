// How one call is launched, decided on the host from the device's kind, the merge's compiled
// architecture and an environment override only (static shapes may join them), never from
// device data, so the same launches are made every call and a command buffer (CUDA/HIP graph)
// can capture them.
//
// The merge follows the split kernel as a programmatic dependent launch (PDL, NVIDIA sm_90+;
// its launch and prologue overlap the split kernel's tail) on every sm_90+ GPU, where the loaded
// merge code was compiled for sm_90+ (it then has the dependency wait). Measured on an
// H200 (benchmarks/NOTES.md version 7, kernels alone, graph): PDL always against PDL for small
// split grids only (at most one CTA an SM, the earlier rule): 8k R=4 10.08 vs 10.96 us, 32k R=4
// 27.87 vs 28.28, 128k R=4 75.45 vs 76.48, 128k R=16 262 vs 268, SWA R=16 10.99 vs 11.16; the
// same where it already applied. (Before the merge folded 8 segments a lane, PDL cost 5-6 us on
// full grids in version 3 and between -1.1 and +2.5 us in version 5.)
// MUSE_ATTN_PDL=0 turns it off (compute-sanitizer in JAX processes, tests; =1 is the default
// where supported); read once a process.
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

inline LaunchPlan plan_launch(const VerifyParams& p) {
  LaunchPlan plan;
#if defined(MUSE_ATTN_CUDA)
  static const bool off = env_is("MUSE_ATTN_PDL", "0");
  // One kind of GPU a process, as XLA assumes; the merge's code must have the wait in it.
  static const bool sm90 = device_supports_pdl() && merge_waits_for_split();
  plan.merge_pdl = sm90 && !off;
#endif
  (void)p;  // the shapes do not matter today; AMD: plain launches
  return plan;
}

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_LAUNCH_PLAN_H_
