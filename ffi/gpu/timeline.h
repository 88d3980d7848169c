// Timeline probes for kernel work (benchmarks/kernel_bench.cu built with -DMUSE_ATTN_TIMELINE):
// thread 0 of every CTA stamps the GPU's global nanosecond timer at named points of the split
// and merge kernels, so a run shows where a call's time goes (launch, seq_lens, block ids, first
// tile, tiles, partials, merge), and SM-cycle spans at a few (the split's tiles, the merge after
// its release: exact where the ~0.26 us timer ticks are not). With -DMUSE_ATTN_TIMELINE_LEAN too,
// only the start, tiles done and partials (and the SM) are stamped, no cycle spans: fewer live
// registers (the full build spills in split_kernel_pp2; benchmarks/NOTES.md version 49). Compiled
// out (no code, no VerifyParams field) otherwise.
#ifndef MUSE_ATTN_GPU_TIMELINE_H_
#define MUSE_ATTN_GPU_TIMELINE_H_

#include <cstdint>

#include "gpu/vendor.h"

namespace muse_attn::gpu {

inline constexpr int kTimelineEvents = 14;         // stamps a CTA (12, 13: the split's SM and its clock)
inline constexpr int kTimelineMergeBase = 1 << 16;  // split CTAs first, merge CTAs from here

// The CTA's index in its grid, x fastest (the order in which CTAs are handed to SMs); used by the
// probes here.
__device__ __forceinline__ int64_t linear_cta_index() {
  return blockIdx.x + int64_t{gridDim.x} * (blockIdx.y + int64_t{gridDim.y} * blockIdx.z);
}

#if defined(MUSE_ATTN_TIMELINE) && defined(MUSE_ATTN_CUDA)
// Each stamp is written by one thread (`stamper`: thread 0 of the CTA for the plain forms) into
// CTA `cta`'s slot for the event, &buf[(base + cta) * kTimelineEvents + event]; the _AS forms take
// both explicitly (the ping-pong kernel's pairs, each stamping as the one-pair kernel's CTA of its
// segment: its thread 0, while its segment exists).
__device__ __forceinline__ uint64_t* timeline_slot(uint64_t* buf, int base, int event, int64_t cta) {
  return buf + (base + cta) * kTimelineEvents + event;
}
// The slot = %globaltimer (ns).
__device__ __forceinline__ void timeline_stamp(uint64_t* buf, int base, int event, int64_t cta,
                                               bool stamper) {
#if defined(MUSE_ATTN_TIMELINE_LEAN)  // start, tiles done and partials only (fewer live registers)
  if (event != 0 && event != 4 && event != 5) return;
#endif
  if (!stamper) return;
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  *timeline_slot(buf, base, event, cta) = t;
}
// The slot = SM cycles since `since` (a clock64() value): the SM clock, against the ns.
__device__ __forceinline__ void timeline_cycles(uint64_t* buf, int base, int event, uint64_t since,
                                                int64_t cta, bool stamper) {
#if !defined(MUSE_ATTN_TIMELINE_LEAN)  // the lean build stamps no cycle spans
  if (stamper) *timeline_slot(buf, base, event, cta) = clock64() - since;
#endif
}
// The CTA's SM (%smid) into slot 12 and `clock0` (its clock64() at the start) into slot 13, so that
// the cycle stamps of two CTAs on one SM (one SM clock) can be compared with each other.
__device__ __forceinline__ void timeline_sm(uint64_t* buf, int base, uint64_t clock0, int64_t cta,
                                            bool stamper) {
  if (!stamper) return;
  unsigned sm_id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_id));
  *timeline_slot(buf, base, 12, cta) = sm_id;
  *timeline_slot(buf, base, 13, cta) = clock0;
}
#define MUSE_TIMELINE_AS(params, base, event, cta, stamper) \
  ::muse_attn::gpu::timeline_stamp((params).timeline, base, event, cta, stamper)
#define MUSE_TIMELINE_CYCLES_AS(params, base, event, since, cta, stamper) \
  ::muse_attn::gpu::timeline_cycles((params).timeline, base, event, since, cta, stamper)
#define MUSE_TIMELINE_SM_AS(params, base, clock0, cta, stamper) \
  ::muse_attn::gpu::timeline_sm((params).timeline, base, clock0, cta, stamper)
// The plain forms: this CTA's slot, by its thread 0.
#define MUSE_TIMELINE(params, base, event) \
  MUSE_TIMELINE_AS(params, base, event, ::muse_attn::gpu::linear_cta_index(), threadIdx.x == 0)
#define MUSE_TIMELINE_CYCLES(params, base, event, since) \
  MUSE_TIMELINE_CYCLES_AS(params, base, event, since, ::muse_attn::gpu::linear_cta_index(), threadIdx.x == 0)
#define MUSE_TIMELINE_SM(params, base, clock0) \
  MUSE_TIMELINE_SM_AS(params, base, clock0, ::muse_attn::gpu::linear_cta_index(), threadIdx.x == 0)
// Declares `cta` and `stamper` for the _AS stamps (nothing outside the timeline build).
#define MUSE_TIMELINE_AS_WHO(cta, stamper, cta_expr, stamper_expr) \
  const int64_t cta = (cta_expr);                                   \
  const bool stamper = (stamper_expr)
#if defined(MUSE_ATTN_TIMELINE_LEAN)
#define MUSE_TIMELINE_CLOCK(var) const uint64_t var = 0
#else
#define MUSE_TIMELINE_CLOCK(var) const uint64_t var = clock64()
#endif
#else
#define MUSE_TIMELINE(params, base, event) ((void)0)
#define MUSE_TIMELINE_CLOCK(var) static_assert(true)
#define MUSE_TIMELINE_CYCLES(params, base, event, since) ((void)0)
#define MUSE_TIMELINE_SM(params, base, clock0) ((void)0)
#define MUSE_TIMELINE_AS_WHO(cta, stamper, cta_expr, stamper_expr) static_assert(true)
#define MUSE_TIMELINE_AS(params, base, event, cta, stamper) ((void)0)
#define MUSE_TIMELINE_CYCLES_AS(params, base, event, since, cta, stamper) ((void)0)
#define MUSE_TIMELINE_SM_AS(params, base, clock0, cta, stamper) ((void)0)
#endif

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_TIMELINE_H_
