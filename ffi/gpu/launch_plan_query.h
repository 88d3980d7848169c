// The launch plan (gpu/launch_plan.h) a call of given static sizes gets on the current device,
// for Python (module.cc: gpu_launch_plan, jax_muse_attn.launch_plan); not a handler. Plain C,
// so the host-compiled module can call into the GPU library.
#ifndef MUSE_ATTN_GPU_LAUNCH_PLAN_QUERY_H_
#define MUSE_ATTN_GPU_LAUNCH_PLAN_QUERY_H_

// The sizes of a call, in this order.
enum MuseLaunchPlanSize {
  kMuseHeadDim,      // D: 64 or 128
  kMuseTokens,       // NQ: 1..16
  kMuseQHeads,       // Hq: a multiple of Hkv
  kMuseKvHeads,      // Hkv
  kMuseRequests,     // R (R x Hkv <= 65535)
  kMusePages,        // block-table width P
  kMuseWindow,       // 0: full attention
  kMuseSplits,       // segments a (request, KV head) group
  kMuseNumSizes
};
// What plan[] holds, in this order.
enum MuseLaunchPlanField {
  kMuseSplitKernel,  // 0: per tile; 1: two-tile steps; 2: ping-pong; 3: ping-pong, two pairs a CTA
  kMuseMergeWarps,   // warps a row in the merge
  kMuseMergePdl,     // 1: the merge is a programmatic dependent launch
  kMuseMergeByLane,  // 1: the merge weighs a segment on one lane, 0: on every lane
  kMuseSplitFillRing,  // 1: per tile, a 4-tile segment's copies all issued in the prologue
  kMuseNumPlanFields
};

// Fills plan from sizes; returns 0, or -1 for sizes the GPU handler would refuse.
#if defined(MUSE_ATTN_WITH_CUDA)
extern "C" int MuseLaunchPlanCuda(const int sizes[kMuseNumSizes], int plan[kMuseNumPlanFields]);
#endif
#if defined(MUSE_ATTN_WITH_HIP)
extern "C" int MuseLaunchPlanRocm(const int sizes[kMuseNumSizes], int plan[kMuseNumPlanFields]);
#endif

#endif  // MUSE_ATTN_GPU_LAUNCH_PLAN_QUERY_H_
