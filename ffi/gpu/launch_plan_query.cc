// The launch plan (gpu/launch_plan.h) a call of given static sizes gets on the current device,
// asked from Python (module.cc: gpu_launch_plan; jax_muse_attn.launch_plan) by tests and users:
// which split kernel runs, the merge's warps a row, whether the merge is a programmatic
// dependent launch. The same plan_launch() the handler calls, on VerifyParams filled by the same
// sized_params() (kernels.h; plan_launch reads no pointer); nothing is launched.
#include <cstdint>

#include "gpu/kernels.h"
#include "gpu/launch_plan.h"
#include "gpu/launch_plan_query.h"
#include "gpu/vendor.h"
#include "muse_attn/fast_div.h"

extern "C" int MUSE_GPU_HANDLER_SYMBOL(MuseLaunchPlan)(const int sizes[kMuseNumSizes],
                                                       int plan[kMuseNumPlanFields]) {
  using namespace muse_attn;
  using namespace muse_attn::gpu;
  const int head_dim = sizes[kMuseHeadDim], tokens = sizes[kMuseTokens],
            num_q_heads = sizes[kMuseQHeads], num_kv_heads = sizes[kMuseKvHeads],
            num_requests = sizes[kMuseRequests], pages = sizes[kMusePages],
            window = sizes[kMuseWindow], num_splits = sizes[kMuseSplits];
  // What jax_muse_attn's trace-time checks and the handler's (muse_attn/problem.h,
  // verify_attention_gpu.cc) let through; 64-bit where a product could pass INT32_MAX.
  if ((head_dim != 64 && head_dim != 128) || tokens < 1 || tokens > 16 || num_kv_heads < 1 ||
      num_q_heads < num_kv_heads || num_q_heads % num_kv_heads != 0 || num_requests < 1 ||
      int64_t{num_requests} * num_kv_heads > kMaxGroups || pages < 1 || window < 0 ||
      num_splits < 1)
    return -1;
  const VerifyParams p = sized_params(num_requests, tokens, num_q_heads, num_kv_heads, head_dim,
                                      pages, window, num_splits, /*num_reqs_static=*/-1);
  const LaunchPlan lp = plan_launch(p);
  plan[kMuseSplitKernel] = lp.split_pingpong ? (lp.split_pp_two_pairs ? 3 : 2) : lp.split_pairs ? 1 : 0;
  plan[kMuseMergeWarps] = lp.merge_warps;
  plan[kMuseMergePdl] = lp.merge_pdl ? 1 : 0;
  plan[kMuseMergeByLane] = lp.merge_by_lane ? 1 : 0;
  plan[kMuseSplitFillRing] = lp.split_fill_ring ? 1 : 0;
  return 0;
}
