// The merge: for each output row of each (request, KV head) group, combine the group's segment
// partials (m, l, o) with the max trick, divide by l and write bf16.
//
// A row is W warps (1 to 8, a power of 2, from the launch plan). Warp w folds segments w, w + W,
// ...: its lanes hold consecutive positions of the row (D / warp-size bf16 each; which columns
// they are: partial_o_order.h), so every segment's o row is one coalesced read. A segment's
// (m, l) is read and weighed either by one lane, the weight reaching the other lanes by a shuffle
// (fold_by_lane), or by every lane (fold_every_lane), as the plan says. A batch of segments'
// loads is issued before any of them is folded, and a batch is folded with one rescale (the
// batch's max first). The W warps' states then meet in shared memory and the row's first warp
// writes it. Rows that saw no key (padding requests, qpos < 0, absent blocks) are written as
// exact zeros: their segments weigh 0, and the split stores an empty segment's o as its zero
// accumulator.
//
// As a programmatic dependent launch of the split kernel (NVIDIA sm_90+, where the plan says), it
// reads the request geometry while the split kernel finishes, then waits for it before reading
// the partials.
#include <cstdint>

#include "gpu/kernels.h"
#include "gpu/launch_plan.h"
#include "gpu/partial_o_order.h"
#include "gpu/segment_pool.h"
#include "gpu/vendor.h"
#include "muse_attn/geometry.h"
#include "muse_attn/mask.h"
#include "muse_attn/partials.h"
#include "muse_attn/softmax_state.h"

namespace muse_attn::gpu {
namespace {

// Warps a row: at most 8 (kMergeMaxWarps), so that on NVIDIA a CTA is 256 threads and, launched
// early as a programmatic dependent, fits an SM beside two split CTAs. On AMD (64-lane waves) 8
// warps are 512 threads. Segments a warp loads at a time: kMergeBatch (its share of each o row: 1
// register a segment at D = 64 on NVIDIA, 2 at D = 128; one (m, l) a lane). Where a warp has at
// most that many (fold_by_lane's one batch) the slots past its segments are predicated off; in
// the loops past it (and in fold_every_lane) they are chunks of kChunk skipped whole.
// By one lane a segment takes fewer instructions; by every lane keeps shuffles off the path from
// the loads to the fold: the plan weighs one lane up to merge_by_lane_segments a warp (tuning.h).
inline constexpr int kChunk = 4;

// A lane's share of a segment's partial o row: E = D / warp-size consecutive bf16 (positions
// E * lane .., partial_o_order.h), loaded as one vector and kept packed until folded, so that no
// chunk's loads wait for an earlier chunk's data (widened right after each load, they would).
template <int E>
struct Lane {
  uint32_t bits[(E + 1) / 2];  // bf16 pairs, low half first
  __device__ float at(int e) const {
    return e % 2 == 0 ? bf16_lo(bits[e / 2]) : bf16_hi(bits[e / 2]);
  }
  __device__ static Lane load(const uint16_t* src) {
    Lane x;
    if constexpr (E == 4) {
      const uint2 t = *reinterpret_cast<const uint2*>(src);
      x.bits[0] = t.x, x.bits[1] = t.y;
    } else if constexpr (E == 2) {
      x.bits[0] = *reinterpret_cast<const uint32_t*>(src);
    } else {
      static_assert(E == 1, "D / warp-size bf16 a lane: 1, 2 or 4");
      x.bits[0] = src[0];
    }
    return x;
  }
};

// A lane's share of a warp's folded o (fp32), as the W warps of a row meet in shared memory.
template <int E>
struct LaneF {
  float v[E];
  __device__ float at(int e) const { return v[e]; }
};

// One warp's running state of a row: (m, l) and its lanes' share of o, relative to exp2(m).
template <int E>
struct RowFold {
  float m = neg_inf(), l = 0.0f;
  float acc[E] = {};

  // Folds n partials in at once: their max first, then one rescale of the running state and
  // a weighted sum (empty partials, m = -inf, weigh 0; never -inf - -inf).
  template <int n, typename L>  // L: Lane<E> or LaneF<E>
  __device__ void add(const float2 (&ml)[n], const L (&o)[n]) {
    float mb = m;
#pragma unroll
    for (int b = 0; b < n; ++b) mb = fmaxf(mb, ml[b].x);
    if (mb == neg_inf()) return;  // nothing seen yet (uniform over the warp: one row)
    const float a = rescale_weight(m, mb);
    l *= a;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] *= a;
#pragma unroll
    for (int b = 0; b < n; ++b) {
      const float w = rescale_weight(ml[b].x, mb);
      l = fmaf(w, ml[b].y, l);
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = fmaf(w, o[b].at(e), acc[e]);
    }
    m = mb;
  }
};

// Where a warp's segments of a row are: its first segment's o (at the lane's positions) and (m, l),
// one segment further on each, the row's segments and the warp's share (segments wr, wr + W, ...).
struct WarpSegments {
  const uint16_t* o;
  const float* ml;
  int64_t o_seg, ml_seg;
  int nseg, wr;
};

// The warp's segments folded, B at a time, every lane loading each segment's (m, l) (a broadcast
// load) and weighing it: no shuffle between the loads and the fold.
template <int E, int W>
__device__ RowFold<E> fold_every_lane(const WarpSegments& s) {
  constexpr int B = kMergeBatch;
  RowFold<E> f;
#pragma unroll 1  // one batch of loads in flight at a time
  for (int seg0 = s.wr; seg0 < s.nseg; seg0 += B * W) {  // every segment below nseg was written
    float2 ml[B];
    Lane<E> o[B];
#pragma unroll
    for (int c = 0; c < B; c += kChunk) {
      if (seg0 + c * W < s.nseg) {  // the same on every lane (one row a warp): no divergence
#pragma unroll
        for (int b = c; b < c + kChunk; ++b) {  // past nseg: the last segment again, weighed 0
          const int seg = min_i(seg0 + b * W, s.nseg - 1);
          ml[b] = *reinterpret_cast<const float2*>(s.ml + seg * s.ml_seg);
          o[b] = Lane<E>::load(s.o + seg * s.o_seg);
        }
      } else {
#pragma unroll
        for (int b = c; b < c + kChunk; ++b) ml[b] = make_float2(neg_inf(), 0.0f), o[b] = Lane<E>{};
      }
    }
#pragma unroll
    for (int b = 0; b < B; ++b)
      if (seg0 + b * W >= s.nseg) ml[b].x = neg_inf();
    f.add(ml, o);
  }
  return f;
}

// A warp's n <= NB segments in one batch, straight-line: lane j < n loads the (m, l) of segment
// j and computes its weight; every lane loads its share of all n o rows at once (the slots past n
// predicated off, left zero: no branch, so the l sum's butterfly runs beside the o fold), and the
// fold keeps two accumulators a lane position (even / odd segments) to halve its chain of
// dependent FMAs. A batch whose segments are all empty (or n = 0) is folded too: every weight is
// 0 and the split stores an empty segment's o as its zero accumulator, so the result is the
// empty state. ml_ptr: the lane's segment's (m, l); o_ptr: the first segment's o at the lane's
// positions, o_step one segment of the warp further.
template <int E, int NB>
__device__ __forceinline__ RowFold<E> fold_one_batch(const float* ml_ptr, const uint16_t* o_ptr,
                                                      int64_t o_step, int lane, int n) {
  static_assert(NB <= kWarpSize && NB % 2 == 0, "a lane a segment; segments in pairs");
  const float2 ml = lane < n ? *reinterpret_cast<const float2*>(ml_ptr) : make_float2(neg_inf(), 0.0f);
  Lane<E> o[NB];
#pragma unroll
  for (int b = 0; b < NB; ++b) o[b] = b < n ? Lane<E>::load(o_ptr + b * o_step) : Lane<E>{};
  const float mb = warp_max(ml.x);            // -inf when no segment saw a key
  const float wj = rescale_weight(ml.x, mb);  // 0 on lanes past n and for empty segments
  RowFold<E> f;
  float odd[E] = {};
#pragma unroll
  for (int b = 0; b < NB; b += 2) {
    const float w0 = shfl_from(wj, b), w1 = shfl_from(wj, b + 1);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      f.acc[e] = fmaf(w0, o[b].at(e), f.acc[e]);
      odd[e] = fmaf(w1, o[b + 1].at(e), odd[e]);
    }
  }
#pragma unroll
  for (int e = 0; e < E; ++e) f.acc[e] += odd[e];
  f.m = mb;
  f.l = xor_reduce<1, kLaneBits>(wj * ml.y, add_op);
  return f;
}

// The warp's segments (n_mine of them) folded: lane j loads the (m, l) of the batch's j-th
// segment (one load a lane, not one a segment on every lane) and computes its weight; every lane
// loads its share of each segment's o row, and a segment's weight reaches the lanes by a shuffle.
// Up to kMergeBatch segments a warp they are one batch (fold_one_batch; half its slots when
// n_mine fits them). Past it (where a plan forces this fold) batches of B, their chunks of loads
// past the batch's segments skipped whole; l is kept a lane's share at a time (its own segments')
// and summed over the warp once, after the loop.
template <int E, int W>
__device__ RowFold<E> fold_by_lane(const WarpSegments& s, int lane) {
  constexpr int B = kMergeBatch;
  static_assert(B <= kWarpSize, "a lane a segment of the batch");
  const int n_mine = s.nseg > s.wr ? (s.nseg - s.wr + W - 1) / W : 0;  // the same on every lane
  const int64_t o_step = W * s.o_seg;                                   // a segment of the warp further
  const uint16_t* o_next = s.o + s.wr * s.o_seg;
  const float* ml_next = s.ml + (s.wr + int64_t{lane} * W) * s.ml_seg;
  if (n_mine <= B / 2) return fold_one_batch<E, B / 2>(ml_next, o_next, o_step, lane, n_mine);
  if (n_mine <= B) return fold_one_batch<E, B>(ml_next, o_next, o_step, lane, n_mine);
  RowFold<E> f;
  float l_lane = 0.0f;
#pragma unroll 1  // one batch of loads in flight at a time
  for (int b0 = 0; b0 < n_mine; b0 += B) {
    const int n = min_i(B, n_mine - b0);  // the batch's segments
    const float2 ml = lane < n ? *reinterpret_cast<const float2*>(ml_next) : make_float2(neg_inf(), 0.0f);
    Lane<E> o[B];
#pragma unroll
    for (int c = 0; c < B; c += kChunk) {
      if (c < n) {  // the same on every lane: chunks past the batch's segments are skipped whole
#pragma unroll
        for (int b = c; b < c + kChunk; ++b) o[b] = b < n ? Lane<E>::load(o_next + b * o_step) : Lane<E>{};
      }
    }
    ml_next += int64_t{B} * W * s.ml_seg;
    o_next += B * o_step;
    const float mb = fmaxf(f.m, warp_max(ml.x));
    if (mb == neg_inf()) continue;  // nothing seen yet (the same on every lane)
    const float a = rescale_weight(f.m, mb);
    l_lane *= a;
#pragma unroll
    for (int e = 0; e < E; ++e) f.acc[e] *= a;
    const float wj = rescale_weight(ml.x, mb);  // 0 on lanes past the batch and for empty segments
    l_lane = fmaf(wj, ml.y, l_lane);
#pragma unroll
    for (int c = 0; c < B; c += kChunk) {
      if (c < n) {  // chunks past the batch: neither loaded nor folded
#pragma unroll
        for (int b = c; b < c + kChunk; ++b) {  // past the batch: weight 0 and o 0
          const float w = shfl_from(wj, b);
#pragma unroll
          for (int e = 0; e < E; ++e) f.acc[e] = fmaf(w, o[b].at(e), f.acc[e]);
        }
      }
    }
    f.m = mb;
  }
  f.l = xor_reduce<1, kLaneBits>(l_lane, add_op);
  return f;
}

// The lane's E floats times inv, as bf16, to dst: the output row's column of the lane's first
// position E * lane of a partial o row (partial_o_order.h). Where the partials are transposed
// (NVIDIA, E = 2 or 4), one store a pair: positions E * lane + e (e = 0, 2) sit 4e columns
// further; else (AMD, E = 1 or 2) the lane's columns are contiguous.
template <int E>
__device__ __forceinline__ void store_bf16(uint16_t* dst, const float (&x)[E], float inv) {
  if constexpr (kPartialOTransposed) {
    static_assert(E % 2 == 0 && E <= 4, "transposed partials: one or two pairs a lane");
#pragma unroll
    for (int e = 0; e < E; e += 2)
      *reinterpret_cast<uint32_t*>(dst + 4 * e) = pack_bf16x2(x[e] * inv, x[e + 1] * inv);
  } else if constexpr (E == 2) {  // AMD, D = 128
    *reinterpret_cast<uint32_t*>(dst) = pack_bf16x2(x[0] * inv, x[1] * inv);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) dst[e] = static_cast<uint16_t>(pack_bf16x2(x[e] * inv, 0.0f) & 0xFFFFu);
  }
}

// kDependent: launched as a programmatic dependent of the split kernel (its prologue runs while
// the split kernel ends); the plain launch's code has nothing of that path (below).
// kByLane: a segment's (m, l) loaded and weighed by one lane (fold_by_lane), else by every lane
// (fold_every_lane); the launch plan's merge_by_lane.
// kDrafts: the drafts target: the request's geometry from its draft count (as its split CTAs
// have it), and each row's lse written where p.lse is set.
// kBalanced: the plan's balanced cut (segment_pool.h): the request's segments and first slot from
// the batch's lengths (merge_kernel_balanced only).
template <int D, int W, bool kDependent, bool kByLane, bool kDrafts, bool kBalanced>
__device__ __forceinline__ void run_merge(const VerifyParams& p) {
  static_assert(W >= 1 && W <= kMergeMaxWarps && (W & (W - 1)) == 0, "a power of 2");
  static_assert(D % kWarpSize == 0, "a lane holds whole elements of the row");
  constexpr int E = D / kWarpSize;   // elements of the row a lane holds (bf16 in, fp32 folded)
  constexpr int kRows = merge_rows_per_cta(W, kWarpSize);  // rows a CTA
  MUSE_ATTN_MARK(TimelineMark::kMergeStart);
  // The balanced cut (segment_pool.h), as the split CTAs work it out; first, while nothing else
  // is live.
  if constexpr (kBalanced)
    pool_first_slot(p, kDrafts && p.draft_kind != static_cast<int>(DraftKind::kChain),
                    blockIdx.y / p.num_kv_heads);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int wr = warp % W;            // the warp's share of the row's segments
  const int slot = warp / W;          // the row's slot in the CTA
  const int row = blockIdx.x * kRows + slot;
  const int group = blockIdx.y;
  const bool row_ok = row < p.rows;  // no early return: the CTA meets at a barrier below
  const int req = group / p.num_kv_heads;
  const int kvh = group - req * p.num_kv_heads.divisor();
  const int real = real_requests(p.num_reqs_static, p.num_reqs, p.num_requests);
  // The count and seq_lens loaded side by side (a request with no drafts reads no keys).
  int count = p.tokens;
  if constexpr (kDrafts) {
    if (req < real && p.draft_kind != static_cast<int>(DraftKind::kChain))
      count = request_draft_count(p.draft_lens, req, p.tokens);
  }
  const int seq_len_found = req < real ? p.seq_lens[req] : 0;
  const int raw_len = keyed_length(seq_len_found, count, kDrafts);
  RequestGeometry g = request_geometry(raw_len, p.pages * kPageSize, count, p.window, p.num_splits);
  if constexpr (kBalanced) cut_from_pool(&g, lds_value(pool_word()[0]), lds_value(pool_word()[1]));
  const PartialsLayout lay{p.num_splits.divisor(), p.rows, D};
  const int64_t slot0 =
      kBalanced ? lay.first_slot(req, kvh, p.num_kv_heads.divisor(), p.num_requests, g.pool_first)
                : int64_t{group} * lay.num_splits;
  // Rows of tokens past the count: no segment read (their partials are whatever the split CTAs
  // computed for rows no draft owns), so a zero row and lse -inf.
  const int nseg = row_ok && (!kDrafts || row < count * p.qpk.divisor()) ? g.num_segments : 0;
  const int r = row_ok ? row : 0;
  // Where the row's partials are and where it goes: worked out before the wait.
  const uint16_t* const o_src = p.part_o + lay.o_offset(slot0, r) + E * lane;
  const float* const ml_src = p.part_ml + lay.ml_offset(slot0, r);
  const int64_t o_seg = int64_t{p.rows} * D, ml_seg = int64_t{p.rows} * 2;  // a segment further
  const QueryLayout ql{p.tokens, p.num_q_heads, p.qpk, D};
  uint16_t* const dst = p.out + ql.row_offset(req, kvh, r) + partial_o_swap(E * lane);
  // The first segment this warp reads, prefetched to L2 while the split kernel ends (prefetching
  // the first four gains less than the first alone). Compiled out of the plain launch's merge,
  // where it costs time even when a kernel argument skips it.
  if constexpr (kDependent) {
    if (wr < nseg) {
      prefetch_l2(o_src + wr * o_seg);
      if (lane == 0) prefetch_l2(ml_src + wr * ml_seg);
    }
  }
  grid_dependency_wait();  // everything above overlapped the split kernel's tail (PDL)
  MUSE_ATTN_MARK(TimelineMark::kMergeReleased);

  const WarpSegments segs{o_src, ml_src, o_seg, ml_seg, nseg, wr};
  RowFold<E> f;
  if constexpr (kByLane) {
    f = fold_by_lane<E, W>(segs, lane);
  } else {
    f = fold_every_lane<E, W>(segs);
  }
  if constexpr (W > 1) {  // the row's W states meet in shared memory; its first warp folds them
    __shared__ float2 sh_ml[kRows][W];
    __shared__ LaneF<E> sh_o[kRows][W][kWarpSize];
    if (lane == 0) lds_write(&sh_ml[slot][wr], make_float2(f.m, f.l));
#pragma unroll
    for (int e = 0; e < E; ++e) lds_write(&sh_o[slot][wr][lane].v[e], f.acc[e]);
    __syncthreads();
    if (wr != 0) return;
    float2 ml[W];
    LaneF<E> o[W];
#pragma unroll
    for (int w = 0; w < W; ++w) ml[w] = lds_value(sh_ml[slot][w]), o[w] = lds_value(sh_o[slot][w][lane]);
    f = RowFold<E>{};
    f.add(ml, o);
  }
  if (!row_ok) return;
  store_bf16<E>(dst, f.acc, safe_inverse(f.l));
  MUSE_ATTN_MARK(TimelineMark::kMergeEnd);
  if constexpr (kDrafts) {
    if (p.lse != nullptr && lane == 0) p.lse[ql.row_offset(req, kvh, r) / D] = row_lse(f.m, f.l);
  }
}

// The entry points: the group's own cut (the merge every plan but the balanced cut's runs), and
// the balanced cut's, whose pass over seq_lens takes registers the bound of the first would
// spill (ptxas aims it at 64 a thread).
template <int D, int W, bool kDependent, bool kByLane, bool kDrafts = false>
__global__ void __launch_bounds__(merge_threads(W, kWarpSize)) merge_kernel(VerifyParams p) {
  run_merge<D, W, kDependent, kByLane, kDrafts, false>(p);
}
template <int D, int W, bool kDependent, bool kByLane, bool kDrafts>
__global__ void __launch_bounds__(merge_threads(W, kWarpSize), 1) merge_kernel_balanced(VerifyParams p) {
  run_merge<D, W, kDependent, kByLane, kDrafts, true>(p);
}

// The merge kernel of a plan's weighing (one lane or every lane a segment) and cut (balanced or
// the group's own), as a programmatic dependent of the split kernel or not, of the chain or the
// drafts target.
template <int D, int W, bool kDependent, bool kBalanced>
auto merge_kernel_for(bool by_lane, bool drafts) {
  if constexpr (kBalanced) {
    if (drafts)
      return by_lane ? merge_kernel_balanced<D, W, kDependent, true, true>
                     : merge_kernel_balanced<D, W, kDependent, false, true>;
    return by_lane ? merge_kernel_balanced<D, W, kDependent, true, false>
                   : merge_kernel_balanced<D, W, kDependent, false, false>;
  } else {
    if (drafts)
      return by_lane ? merge_kernel<D, W, kDependent, true, true>
                     : merge_kernel<D, W, kDependent, false, true>;
    return by_lane ? merge_kernel<D, W, kDependent, true> : merge_kernel<D, W, kDependent, false>;
  }
}
template <int D, int W, bool kDependent>
auto merge_kernel_for(const Plan& plan, bool drafts) {
  if (plan.balance_segments) return merge_kernel_for<D, W, kDependent, true>(plan.merge_by_lane, drafts);
  return merge_kernel_for<D, W, kDependent, false>(plan.merge_by_lane, drafts);
}

// A drafts-target call (its draft operands or its lse): p.draft_kind or p.lse set.
bool is_drafts_call(const VerifyParams& p) { return p.draft_kind != 0 || p.lse != nullptr; }

template <int D, int W>
gpuError_t launch_merge_d(const VerifyParams& p, const Plan& plan, gpuStream_t stream) {
  constexpr int kThreads = merge_threads(W, kWarpSize);
  constexpr int kRows = merge_rows_per_cta(W, kWarpSize);
  const dim3 grid((p.rows + kRows - 1) / kRows, p.num_requests * p.num_kv_heads.divisor());
#if defined(MUSE_ATTN_CUDA)
  // As a programmatic dependent of the split kernel: its launch and prologue
  // overlap the split kernel instead of following it.
  if (plan.merge_pdl) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, merge_kernel_for<D, W, true>(plan, is_drafts_call(p)), p);
  }
#endif
  const auto kernel = merge_kernel_for<D, W, false>(plan, is_drafts_call(p));
  MUSE_GPU_LAUNCH(kernel, grid, kThreads, 0, stream, p);
  return gpuGetLastError();
}

template <int D>
gpuError_t launch_merge_warps(const VerifyParams& p, const Plan& plan, gpuStream_t stream) {
  switch (plan.merge_warps) {
    case 1: return launch_merge_d<D, 1>(p, plan, stream);
    case 2: return launch_merge_d<D, 2>(p, plan, stream);
    case 4: return launch_merge_d<D, 4>(p, plan, stream);
    default: return launch_merge_d<D, 8>(p, plan, stream);
  }
}

}  // namespace

bool merge_waits_for_split() {
#if defined(MUSE_ATTN_CUDA)
  // Every instantiation is built from the same PTX target; one stands for all.
  cudaFuncAttributes attr = {};
  if (cudaFuncGetAttributes(&attr, merge_kernel<64, 1, true, true>) != cudaSuccess) {
    (void)cudaGetLastError();  // not left for the next launch's error check
    return false;
  }
  return attr.ptxVersion >= 90;
#else
  return false;
#endif
}

gpuError_t launch_merge(const VerifyParams& p, const Plan& plan, gpuStream_t stream) {
  return p.head_dim == 64 ? launch_merge_warps<64>(p, plan, stream)
                          : launch_merge_warps<128>(p, plan, stream);
}

}  // namespace muse_attn::gpu
