// The launch plan (gpu/launch_plan.h) a call of given static sizes gets on the current device,
// asked from Python (module.cc: gpu_launch_plan) by tests and the benchmark: which split kernel
// runs, the merge's warps a row, whether the merge is a programmatic dependent launch. The same
// plan_launch() the handler calls, on the same VerifyParams sizes; nothing is launched.
#include "gpu/kernels.h"
#include "gpu/launch_plan.h"
#include "gpu/vendor.h"
#include "handlers.h"
#include "muse_attn/fast_div.h"

extern "C" int MUSE_GPU_HANDLER_SYMBOL(MuseLaunchPlan)(const int sizes[8], int plan[3]) {
  using namespace muse_attn;
  using namespace muse_attn::gpu;
  const int head_dim = sizes[0], tokens = sizes[1], num_q_heads = sizes[2],
            num_kv_heads = sizes[3], num_requests = sizes[4], pages = sizes[5], window = sizes[6],
            num_splits = sizes[7];
  // As the handler accepts them (muse_attn/problem.h, verify_attention_gpu.cc).
  if ((head_dim != 64 && head_dim != 128) || tokens < 1 || num_kv_heads < 1 ||
      num_kv_heads > kMaxGroups || num_q_heads < num_kv_heads || num_q_heads % num_kv_heads != 0 ||
      num_requests < 1 || int64_t{num_requests} * num_kv_heads > kMaxGroups || pages < 1 ||
      window < 0 || num_splits < 1)
    return -1;
  VerifyParams p{};
  p.num_requests = num_requests;
  p.tokens = tokens;
  p.num_q_heads = num_q_heads;
  p.num_kv_heads = FastDiv(num_kv_heads);
  p.qpk = FastDiv(num_q_heads / num_kv_heads);
  p.head_dim = head_dim;
  p.rows = tokens * (num_q_heads / num_kv_heads);
  p.pages = pages;
  p.window = window;
  p.num_splits = FastDiv(num_splits);
  p.num_reqs_static = -1;
  const LaunchPlan lp = plan_launch(p);
  plan[0] = lp.split_pingpong ? 2 : lp.split_pairs ? 1 : 0;
  plan[1] = lp.merge_warps;
  plan[2] = lp.merge_pdl ? 1 : 0;
  return 0;
}
