// How one call is launched: which split kernel, how the merge follows it. Decided on the host
// from static shapes, the device's SM count and environment overrides only, never from device
// data, so the same launches are made every call and a command buffer (CUDA/HIP graph) can
// capture them.
//
// A "small" grid has at most one split CTA an SM: the call is latency-bound (every CTA runs in
// the first wave and its few tiles are one dependent chain). There, on NVIDIA sm_90:
//   - key_parts = 2: the split kernel runs 8 warps, two a 16-row block, each on one half of
//     every tile's keys, and combines the halves at the end (half the chain a tile);
//   - the merge is a programmatic dependent launch (PDL): its launch and prologue overlap the
//     split kernel.
// Larger grids keep 4 warps (3 CTAs an SM) and a plain merge launch: PDL cost ~5 us there
// (benchmarks/NOTES.md versions 4-5).
//
// Overrides (benchmarks and tests): MUSE_ATTN_PDL=0 / 1 (never / always PDL), MUSE_ATTN_PDL=late
// (always PDL, and the split kernel lets the merge launch after its stores rather than at its
// start), MUSE_ATTN_KEY_PARTS=1 / 2. Read once a process.
#ifndef MUSE_ATTN_GPU_LAUNCH_PLAN_H_
#define MUSE_ATTN_GPU_LAUNCH_PLAN_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "gpu/kernels.h"
#include "gpu/vendor.h"

namespace muse_attn::gpu {

struct LaunchPlan {
  int key_parts = 1;          // warps sharing a 16-row block of the split kernel, each a key part
  bool merge_pdl = false;     // the merge is a programmatic dependent launch of the split kernel
  bool trigger_late = false;  // ... triggered after the split kernel's partial stores
};

inline bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

// Split CTAs of the call: (segments, groups, row blocks), as launch_split makes them.
inline int64_t split_ctas(const VerifyParams& p) {
  return int64_t{p.num_splits} * p.num_requests * p.num_kv_heads *
         ((p.rows + kMaxRows - 1) / kMaxRows);
}

inline LaunchPlan plan_launch(const VerifyParams& p) {
  LaunchPlan plan;
#if defined(MUSE_ATTN_CUDA)
  // -1: automatic; else forced.
  static const int pdl = env_is("MUSE_ATTN_PDL", "1") || env_is("MUSE_ATTN_PDL", "late") ? 1
                         : env_is("MUSE_ATTN_PDL", "0")                                  ? 0
                                                                                         : -1;
  static const bool late = env_is("MUSE_ATTN_PDL", "late");
  static const int parts = env_is("MUSE_ATTN_KEY_PARTS", "1")   ? 1
                           : env_is("MUSE_ATTN_KEY_PARTS", "2") ? 2
                                                                : -1;
  static const bool sm90 = device_supports_pdl();  // one kind of GPU a process, as XLA assumes
  int dev = 0, sms = 0;
  const bool small = current_device(&dev) == gpuSuccess &&
                     cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
                     split_ctas(p) <= sms;
  plan.key_parts = parts > 0 ? parts : (small && sm90 ? 2 : 1);
  plan.merge_pdl = sm90 && (pdl == 1 || (pdl < 0 && small));
  plan.trigger_late = plan.merge_pdl && late;
#else
  (void)p;  // AMD: one wavefront a 16-row block, plain launches
#endif
  return plan;
}

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_LAUNCH_PLAN_H_
