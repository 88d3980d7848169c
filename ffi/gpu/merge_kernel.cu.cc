// The merge: for each output row of each (request, KV head) group, combine the group's
// segment partials (m, l, o) with the max trick, divide by l and write bf16. SegLanes threads
// (one warp's lanes, 1 to 32: more when there are more segments, chosen from the static split
// count) share one (row, 4 consecutive d): each folds every SegLanes-th segment into a running
// state (loads of several segments in flight), then the lanes combine by shuffles. Rows that
// saw no key (padding requests, qpos < 0, absent blocks) are written as exact zeros, so the
// whole output is defined whatever the split wrote. On NVIDIA sm_90+, where the split grid has
// at most 2 CTAs an SM (launch_plan.h; MUSE_ATTN_PDL=0 / 1 forces), it is launched as a
// programmatic dependent of the split kernel (vendor.h): it reads the request geometry while the
// split kernel finishes, then waits for it before reading the partials.
#include <cstdint>

#include "gpu/kernels.h"
#include "gpu/launch_plan.h"
#include "gpu/timeline.h"
#include "gpu/vendor.h"
#include "muse_attn/geometry.h"
#include "muse_attn/partials.h"
#include "muse_attn/softmax_state.h"

namespace muse_attn::gpu {
namespace {

constexpr int kMergeThreads = 256;

// Segments a lane loads at a time: all of their loads first, then the folds, so the loads are in
// flight together (a fold's -inf test between them made each segment a round trip).
constexpr int kBatch = 8;

// Lanes that split one row-quad's segments: the fewest (a power of 2) that fold the split count
// in one batch of loads each, so the lanes' prologue and the shuffles that combine them are paid
// as few times as the latency allows (8 lanes folding 1-2 segments each made the merge of SWA
// R = 16, 12 splits, take 7.5 us; 8 lanes folding ~21 segments each, one round trip at a time,
// made the merge of full 32k R = 1 take 10 us).
constexpr int seg_lanes_for(int num_splits) {
  int lanes = 1;
  while (lanes < 32 && lanes * kBatch < num_splits) lanes *= 2;
  return lanes;
}

// Running merge of partial states: (m, l, acc) with acc, l relative to exp2(m).
struct Fold {
  float m = neg_inf(), l = 0.0f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);

  __device__ void add(float m2, float l2, float4 o2) {
    if (m2 == neg_inf()) return;  // an empty partial weighs nothing (never -inf - -inf)
    const float m_new = fmaxf(m, m2);
    const float a = rescale_weight(m, m_new), b = fast_exp2(m2 - m_new);
    m = m_new;
    l = l * a + l2 * b;
    acc = make_float4(acc.x * a + o2.x * b, acc.y * a + o2.y * b, acc.z * a + o2.z * b,
                      acc.w * a + o2.w * b);
  }
};

template <int D, int SegLanes>
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(VerifyParams p) {
  static_assert(SegLanes <= kWarpSize && (SegLanes & (SegLanes - 1)) == 0,
                "the lanes of a row-quad are one warp's, a power of 2");
  constexpr int kQuads = D / 4;
  MUSE_TIMELINE(p, kTimelineMergeBase, 0);
  // Thread -> (row, quad, segment lane); consecutive threads: segment lanes, then quads.
  const int64_t index = int64_t{blockIdx.x} * kMergeThreads + threadIdx.x;
  const int row = static_cast<int>(index / (kQuads * SegLanes));
  const int dq = static_cast<int>(index / SegLanes % kQuads);
  const int sl = threadIdx.x % SegLanes;
  const int group = blockIdx.y;
  const bool row_ok = row < p.rows;  // no early return: the lanes shuffle below
  const int req = group / p.kv_heads_div;
  const int kvh = group - req * p.num_kv_heads;
  const int real = real_requests(p.num_reqs_static, p.num_reqs, p.num_requests);
  const int raw_len = req < real ? p.seq_lens[req] : 0;
  const RequestGeometry g =
      request_geometry(raw_len, p.pages * kPageSize, p.tokens, p.window, p.splits_div);
  const PartialsLayout lay{p.num_splits, p.rows, D};
  const int nseg = row_ok ? g.num_segments : 0;
  // Where the row goes: worked out before the wait.
  const QueryLayout ql{p.tokens, p.num_q_heads, p.qpk_div, D};
  uint16_t* dst = p.out + ql.row_offset(req, kvh, row_ok ? row : 0) + 4 * dq;
  grid_dependency_wait();  // everything above overlapped the split kernel's tail (PDL)
  MUSE_TIMELINE(p, kTimelineMergeBase, 1);  // the split kernel's partials visible

  // kBatch segments a lane at a time (every segment below num_segments wrote its partial).
  Fold f;
  for (int seg0 = sl; seg0 < nseg; seg0 += kBatch * SegLanes) {
    float2 ml[kBatch];
    float4 o[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int seg = seg0 + b * SegLanes;
      if (seg < nseg) {
        ml[b] = *reinterpret_cast<const float2*>(p.part_ml + lay.ml_offset(group, seg, row));
        o[b] = *reinterpret_cast<const float4*>(p.part_o + lay.o_offset(group, seg, row) + 4 * dq);
      } else {
        ml[b] = make_float2(neg_inf(), 0.0f);
        o[b] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) f.add(ml[b].x, ml[b].y, o[b]);
  }
#pragma unroll
  for (int mask = 1; mask < SegLanes; mask <<= 1) {
    const float m2 = shfl_xor(f.m, mask), l2 = shfl_xor(f.l, mask);
    const float4 o2 = make_float4(shfl_xor(f.acc.x, mask), shfl_xor(f.acc.y, mask),
                                  shfl_xor(f.acc.z, mask), shfl_xor(f.acc.w, mask));
    f.add(m2, l2, o2);
  }
  MUSE_TIMELINE(p, kTimelineMergeBase, 2);  // partials folded
  if (!row_ok || sl != 0) return;
  const float inv = safe_inverse(f.l);
  *reinterpret_cast<uint2*>(dst) = make_uint2(pack_bf16x2(f.acc.x * inv, f.acc.y * inv),
                                              pack_bf16x2(f.acc.z * inv, f.acc.w * inv));
  MUSE_TIMELINE(p, kTimelineMergeBase, 3);  // row written (issued)
}

template <int D, int SegLanes>
gpuError_t launch_merge_d(const VerifyParams& p, const LaunchPlan& plan, gpuStream_t stream) {
  const int64_t threads_per_group = int64_t{p.rows} * (D / 4) * SegLanes;
  const dim3 grid(static_cast<unsigned>((threads_per_group + kMergeThreads - 1) / kMergeThreads),
                  p.num_requests * p.num_kv_heads);
#if defined(MUSE_ATTN_CUDA)
  // As a programmatic dependent of the split kernel (launch_plan.h): its launch and prologue
  // overlap the split kernel instead of following it.
  if (plan.merge_pdl) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kMergeThreads);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, merge_kernel<D, SegLanes>, p);
  }
#else
  (void)plan;
#endif
  merge_kernel<D, SegLanes><<<grid, kMergeThreads, 0, stream>>>(p);
  return gpuGetLastError();
}

template <int D>
gpuError_t launch_merge_lanes(const VerifyParams& p, const LaunchPlan& plan, gpuStream_t stream) {
  switch (seg_lanes_for(p.num_splits)) {
    case 1: return launch_merge_d<D, 1>(p, plan, stream);
    case 2: return launch_merge_d<D, 2>(p, plan, stream);
    case 4: return launch_merge_d<D, 4>(p, plan, stream);
    case 8: return launch_merge_d<D, 8>(p, plan, stream);
    case 16: return launch_merge_d<D, 16>(p, plan, stream);
    default: return launch_merge_d<D, 32>(p, plan, stream);
  }
}

}  // namespace

bool merge_waits_for_split() {
#if defined(MUSE_ATTN_CUDA)
  // Every instantiation is built from the same PTX target; one stands for all.
  cudaFuncAttributes attr = {};
  if (cudaFuncGetAttributes(&attr, merge_kernel<64, 1>) != cudaSuccess) {
    (void)cudaGetLastError();  // not left for the next launch's error check
    return false;
  }
  return attr.ptxVersion >= 90;
#else
  return false;
#endif
}

gpuError_t launch_merge(const VerifyParams& p, const LaunchPlan& plan, gpuStream_t stream) {
  if (!divisors_match(p)) return gpuErrorInvalidValue;  // set_divisors() was not called
  return p.head_dim == 64 ? launch_merge_lanes<64>(p, plan, stream)
                          : launch_merge_lanes<128>(p, plan, stream);
}

}  // namespace muse_attn::gpu
