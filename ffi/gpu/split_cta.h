// One split CTA's work, the body of the split kernels' entry points (split_kernel.cu.cc for a
// bf16 cache, split_kernel_fp8.cu.cc for an FP8 one): the CTA of (segment, request, KV head[,
// block of 64 rows]) stages its 64 query rows (first, in a copy group of their own) and the
// segment's 64-key tiles through shared memory (kv_tile.h; Stages<D> tiles in flight, each
// tile's block ids loaded a tile earlier), computes S = Q K^T on the matrix units (warp_mma.h),
// masks only boundary tiles (mask.h whole_tiles), runs the online softmax in fp32 in the exp2
// domain (softmax_state.h), accumulates O += P V and writes the segment's partial (m, l, o) for
// the merge (partials.h). Also the launch helpers both files share. Everything here is internal
// to the file that includes it.
#ifndef MUSE_ATTN_GPU_SPLIT_CTA_H_
#define MUSE_ATTN_GPU_SPLIT_CTA_H_

#include <atomic>
#include <cstdint>

#include "gpu/kernels.h"
#include "gpu/kv_tile.h"
#include "gpu/launch_plan.h"
#include "gpu/partial_o_order.h"
#include "gpu/segment_pool.h"
#include "gpu/vendor.h"
#include "gpu/warp_mma.h"
#include "muse_attn/geometry.h"
#include "muse_attn/mask.h"
#include "muse_attn/partials.h"
#include "muse_attn/softmax_state.h"

namespace muse_attn::gpu {
namespace {


constexpr int kWarps = 4;  // 4 x 16 rows = kMaxRows
constexpr int kThreads = kWarps * kWarpSize;
// op over x[0..n) as a tree (log2 n dependent steps instead of n).
template <int n, typename Op>
__device__ __forceinline__ float tree_reduce(const float* x, Op op) {
  static_assert((n & (n - 1)) == 0, "a power of two");
  if constexpr (n == 1) {
    return x[0];
  } else {
    return op(tree_reduce<n / 2>(x, op), tree_reduce<n / 2>(x + n / 2, op));
  }
}

// NVIDIA: 1 KiB more, to start the stages at a 1024-byte boundary (the 128-byte swizzle atom of
// the warpgroup MMA's shared-memory operands; warp_mma.h).
constexpr int kSmemAlign = 1024;
// The stages, then the query tile; a staged FP8 cache (kv_tile.h): the one bf16 tile the math
// reads, the FP8 stages, then the query tile.
template <int D, bool kFp8 = false>
__host__ __device__ constexpr int split_stages_bytes() {
  return kFp8 && kFp8Staged ? KvTile<D>::kBytes + Stages<D>::value * Fp8Stage<D>::kBytes
                            : Stages<D>::value * KvTile<D>::kBytes;
}
template <int D, bool kFp8 = false>
constexpr int split_smem_bytes() {
#if defined(MUSE_ATTN_CUDA)
  constexpr int pad = kSmemAlign;
#else
  constexpr int pad = 0;
#endif
  return split_stages_bytes<D, kFp8>() + QTile<D, kMaxRows>::kBytes + pad;
}
#if defined(MUSE_ATTN_HIP)
// The AMD plan's table reasons with these bytes (launch_plan.h amd_split_lds_bytes); the FP8
// staged form is NVIDIA's, built for AMD only by the emulator's tests.
static_assert(split_smem_bytes<64>() == amd_split_lds_bytes(64) &&
                  split_smem_bytes<128>() == amd_split_lds_bytes(128) &&
                  (kFp8Staged || (split_smem_bytes<64, true>() == amd_split_lds_bytes(64) &&
                                  split_smem_bytes<128, true>() == amd_split_lds_bytes(128))),
              "the AMD table's split LDS bytes");
#endif

// The split grid's CTA (launchers below): slot x = kPairs blockIdx.x + pair of group blockIdx.y
// = (request r, KV head), and its block of kMaxRows query rows blockIdx.z. The group's own cut:
// segment x of request r. kBalanced, the balanced cut (segment_pool.h; kernels of its own):
// the KV head's pool slot r S + x, and whichever request and segment the batch's cut puts there;
// every thread of the CTA calls it then (it meets at barriers), scratch: shared memory no copy
// has been issued to yet.
struct SplitCta {
  int seg, group, req, kvh, block_row0;
  int pool_len;  // the balanced cut's segment length; 0: the group's own cut
};
template <int kPairs = 1, bool kBalanced = false>
__device__ __forceinline__ SplitCta split_cta(const VerifyParams& p, bool counted = false,
                                              char* scratch = nullptr, int pair = 0) {
  SplitCta c;
  c.seg = kPairs * static_cast<int>(blockIdx.x) + pair;
  c.group = blockIdx.y;
  c.req = c.group / p.num_kv_heads;
  c.kvh = c.group - c.req * p.num_kv_heads.divisor();
  c.block_row0 = kMaxRows * blockIdx.z;
  c.pool_len = 0;
  if constexpr (kBalanced) {
    const int splits = p.num_splits.divisor();
    const int64_t slot0 = int64_t{c.req} * splits + kPairs * static_cast<int>(blockIdx.x);
    const PoolSlot s = pool_slot<kPairs>(p, counted, slot0, pair, reinterpret_cast<int*>(scratch));
    c.req = c.seg < splits ? s.req : p.num_requests;  // a second pair's slot past the group's: none
    c.seg = s.seg;
    c.pool_len = s.len;
  }
  return c;
}
// Where the partial of a CTA's segment goes (partials.h): the group's own slot, or (kBalanced)
// the CTA's pool slot, worked out from the grid at the end rather than held across the loop.
template <bool kBalanced, int kPairs = 1>
__device__ __forceinline__ int64_t partial_slot(const VerifyParams& p, const SplitCta& c,
                                                int pair = 0) {
  if constexpr (!kBalanced) {
    return int64_t{c.group} * p.num_splits.divisor() + c.seg;
  } else {
    const int x = kPairs * static_cast<int>(blockIdx.x) + pair;
    return (int64_t{c.kvh} * p.num_requests + blockIdx.y / p.num_kv_heads) *
               p.num_splits.divisor() + x;
  }
}

// The CTA's query rows into q_tile by kStageThreads threads (tid: the thread's index among
// them), in a copy group of their own; rows at or past live_rows (the group's rows, or a ragged
// request's drafts' rows) are zero-filled, unread. On NVIDIA the copies fly while seq_lens and
// the block ids are read (Q does not depend on them).
template <int D, int kStageThreads>
__device__ __forceinline__ void stage_query_rows(const VerifyParams& p, const SplitCta& c,
                                                 const QTile<D, kMaxRows>& q_tile, int tid,
                                                 int live_rows) {
  const QueryLayout ql{p.tokens, p.num_q_heads, p.qpk, D};
  stage_q_tile<D, kMaxRows, kStageThreads>(
      q_tile, p.q, min_i(live_rows - c.block_row0, kMaxRows),
      [&](int r) { return ql.row_offset(c.req, c.kvh, c.block_row0 + r); }, tid);
  copy_commit();
}

// What the mask (mask.h) needs of a lane's R rows: the keys row rr sees, [key_min[rr],
// qpos[rr]] (key_is_visible), and the tiles [whole_lo, whole_hi) that every token sees whole
// (whole_tiles), where the mask is skipped when all 4 pages are present.
template <int R>
struct LaneMask {
  int qpos[R], key_min[R];
  int whole_lo, whole_hi;
  // Tile t, its present pages pages_ok (4 bits): a boundary tile, the mask needed.
  __device__ __forceinline__ bool boundary(int t, unsigned pages_ok) const {
    return pages_ok != 0xFu || t < whole_lo || t >= whole_hi;
  }
};

// The token of the lane's row rr (rows past the group's clamped: their scores are never written).
template <int D>
__device__ __forceinline__ int lane_row_token(const VerifyParams& p, const WarpAttention<D>& w, int row0,
                                              int rr) {
  return min_i(row0 + w.row_of(rr), p.rows - 1) / p.qpk;
}

// The warp's rows start at row0 of the group. tokens: the request's where it is not
// p.tokens (a ragged chain's count; rows past it see what they may: the merge skips them).
template <int D>
__device__ __forceinline__ LaneMask<WarpAttention<D>::kRowsPerLane> lane_mask(
    const VerifyParams& p, const RequestGeometry& g, const WarpAttention<D>& w, int row0,
    int tokens = -1) {
  constexpr int R = WarpAttention<D>::kRowsPerLane;
  LaneMask<R> m;
#pragma unroll
  for (int rr = 0; rr < R; ++rr) {
    m.qpos[rr] = token_position(g, lane_row_token(p, w, row0, rr));
    m.key_min[rr] = first_visible_key(m.qpos[rr], p.window);
  }
  whole_tiles(g.ctx, tokens < 0 ? p.tokens : tokens, p.window, &m.whole_lo, &m.whole_hi);
  return m;
}

// Masks a boundary tile's scores of the lane's row rr (mask.h key_is_visible, absent pages):
// branch-free (a branch a score makes a masked tile slower than the selects do).
template <int D, int R>
__device__ __forceinline__ void mask_scores(const WarpAttention<D>& w, float (&s)[WarpAttention<D>::kScoresPerRow],
                                            int rr, int t, unsigned pages_ok, const LaneMask<R>& mask) {
#pragma unroll
  for (int i = 0; i < WarpAttention<D>::kScoresPerRow; ++i) {
    const int k = w.key_of(i), key = t * kTileKeys + k;
    const bool vis = (((pages_ok >> (k / kPageSize)) & 1u) != 0) & (key >= mask.key_min[rr]) &
                     (key <= mask.qpos[rr]);
    s[i] = vis ? s[i] : neg_inf();
  }
}

// A tree's mask of a lane's R rows (mask.h DraftRow): row rr sees context keys
// [key_lo[rr], ctx) and the drafts of bits[rr] (draft j: key ctx + j). A row past the request's
// count is masked as it may be: the merge never reads its partials, so whole tiles need no mask
// for it.
// The whole tiles are those of the deepest a depth can be (NQ - 1), worked out a tile at a time
// from the geometry and the parameters: held in registers across the loop they spill the FP8
// kernels.
template <int R>
struct DraftLaneMask {
  const VerifyParams& p;
  const RequestGeometry& g;
  int key_lo[R];
  uint32_t bits[R];
  __device__ __forceinline__ int ctx() const { return g.ctx; }
  __device__ __forceinline__ bool boundary(int t, unsigned pages_ok) const {
    int whole_lo, whole_hi;
    tree_whole_tiles(g.ctx, p.tokens - 1, p.window, &whole_lo, &whole_hi);
    return pages_ok != 0xFu || t < whole_lo || t >= whole_hi;
  }
};

// A tree's row t as found in memory. Loaded before the request's geometry is known (the loads
// need only the request), so that a row's mask costs one load latency beside seq_lens instead of
// one after it; lanes at or past p.tokens hold none.
struct TreeRowFound {
  uint32_t bits = 0u;  // tree_mask[req, t]
  int depth = 0;       // draft_depths[req, t], unclamped
  __device__ static TreeRowFound load(const VerifyParams& p, int req, int t) {
    TreeRowFound r;
    if (t < p.tokens) {
      const int64_t at = int64_t{req} * p.tokens + t;
      r.bits = tree_row_bits(p.tree_mask, at, t);
      r.depth = tree_row_depth(p.draft_depths, at, t);
    }
    return r;
  }
};

// The request's clamped depths as tree_draft_row reads them where a depth reaches the window.
struct DraftDepths {
  const int32_t* depths;  // draft_depths, or null (depth = row)
  int64_t row;            // req * tokens
  int tokens;
  __device__ int operator[](int j) const {
    return clamp_draft_depth(tree_row_depth(depths, row + j, j), tokens);
  }
};

// Row t's DraftRow in a tree, from the row as found in memory.
__device__ __forceinline__ DraftRow draft_row(const VerifyParams& p, int req, int ctx, int count, int t,
                                              TreeRowFound found) {
  return tree_draft_row(ctx, count, t, found.bits, clamp_draft_depth(found.depth, p.tokens),
                        DraftDepths{p.draft_depths, int64_t{req} * p.tokens, p.tokens}, p.window);
}

#if defined(MUSE_ATTN_HIP)
// The drafts [0, count) of a tree that no row sees, row by row (every lane alike, in scalar
// registers).
__device__ __forceinline__ uint32_t unread_tree_drafts(const VerifyParams& p, int req, int ctx, int count) {
  uint32_t read = 0u;
  for (int t = 0; t < count; ++t)
    read |= draft_row(p, req, ctx, count, t, TreeRowFound::load(p, req, t)).draft_bits;
  return low_bits(count) & ~read;
}

#else
// The drafts [0, count) of a tree that no row sees, by a warp whose lane t found row t (one load
// latency, not one a row); every lane gets it.
__device__ __forceinline__ uint32_t unread_tree_drafts_by_warp(const VerifyParams& p, int req, int ctx,
                                                                int count, int lane, TreeRowFound found) {
  const uint32_t seen = draft_row(p, req, ctx, count, lane, found).draft_bits;
  return low_bits(count) & ~xor_reduce<1, kLaneBits>(seen, [](uint32_t a, uint32_t b) { return a | b; });
}
#endif

// The lane's rows of a tree as found in memory (draft_lane_mask's input), loaded with seq_lens.
template <int D>
struct LaneTreeRows {
  TreeRowFound row[WarpAttention<D>::kRowsPerLane];
  __device__ static LaneTreeRows load(const VerifyParams& p, int req, const WarpAttention<D>& w, int row0) {
    LaneTreeRows r;
#pragma unroll
    for (int rr = 0; rr < WarpAttention<D>::kRowsPerLane; ++rr)
      r.row[rr] = TreeRowFound::load(p, req, lane_row_token(p, w, row0, rr));
    return r;
  }
};

template <int D>
__device__ __forceinline__ DraftLaneMask<WarpAttention<D>::kRowsPerLane> draft_lane_mask(
    const VerifyParams& p, int req, const RequestGeometry& g, int count, const WarpAttention<D>& w,
    int row0, const LaneTreeRows<D>& found) {
  constexpr int R = WarpAttention<D>::kRowsPerLane;
  DraftLaneMask<R> m{p, g, {}, {}};
#pragma unroll
  for (int rr = 0; rr < R; ++rr) {
    const DraftRow d = draft_row(p, req, g.ctx, count, lane_row_token(p, w, row0, rr), found.row[rr]);
    m.key_lo[rr] = d.key_lo;
    m.bits[rr] = d.draft_bits;
  }
  return m;
}

// The keys of tile t that a tree row sees (mask.h draft_key_is_visible) on present pages, as a
// word: bit k for key t * 64 + k.
__device__ __forceinline__ uint64_t tree_tile_visible_word(int key_lo, int ctx, uint32_t draft_bits, int t,
                                                           unsigned pages_ok) {
  const auto below = [](int n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; };  // n >= 0
  const int base = t * kTileKeys;
  const int lo = min_i(max_i(key_lo - base, 0), kTileKeys), hi = min_i(max_i(ctx - base, 0), kTileKeys);
  const uint64_t context = below(hi) & ~below(lo);  // keys [key_lo, ctx)
  const int d = ctx - base;                         // draft j is bit d + j
  const uint64_t drafts = d >= kTileKeys || d <= -32 ? 0u
                          : d >= 0                  ? uint64_t{draft_bits} << d
                                                    : uint64_t{draft_bits} >> -d;
  uint64_t present = 0;
#pragma unroll
  for (int page = 0; page < kPagesPerTile; ++page)
    present |= (pages_ok >> page) & 1u ? uint64_t{0xFFFF} << (kPageSize * page) : 0u;
  return (context | drafts) & present;
}

// Masks a boundary tile's scores of the lane's row rr by its DraftRow (mask.h
// draft_key_is_visible, absent pages), branch-free: the row's word of the tile, shifted once by
// the lane's first key, a constant bit a score (the per-score key tests cost about twice the
// instructions).
template <int D, int R>
__device__ __forceinline__ void mask_scores(const WarpAttention<D>& w, float (&s)[WarpAttention<D>::kScoresPerRow],
                                            int rr, int t, unsigned pages_ok, const DraftLaneMask<R>& mask) {
  const int k0 = w.key_of(0);
  const uint64_t from_k0 =
      tree_tile_visible_word(mask.key_lo[rr], mask.ctx(), mask.bits[rr], t, pages_ok) >> k0;
#pragma unroll
  for (int i = 0; i < WarpAttention<D>::kScoresPerRow; ++i)
    s[i] = ((from_k0 >> (w.key_of(i) - k0)) & 1u) != 0 ? s[i] : neg_inf();
}

// The max to subtract for a row's running max m (scaled): 0 for an all-masked row (m = -inf),
// so no -inf - -inf makes a NaN.
__device__ __forceinline__ float finite_max(float m) { return m == neg_inf() ? 0.0f : m; }

// p = exp2(s * c - m_use) in place over a lane's scores of a row (softmax_state.h).
template <int N>
__device__ __forceinline__ void exp2_scaled_in_place(float (&s)[N], float scale_log2, float m_use) {
#pragma unroll
  for (int i = 0; i < N; ++i) s[i] = fast_exp2(fmaf(s[i], scale_log2, -m_use));
}

// How far (exp2 domain) a tile's max may exceed a row's running max before the running max
// moves: within the slack every factor is 1 and O is not rescaled. Exact: l and O are sums over
// the same max, which the partial's m carries to the merge (softmax_state.h: any m at most the
// largest score does); p <= 2^slack stays well inside bf16 and fp32.
inline constexpr float kRescaleSlack = 8;

// One tile after its scores (w.scores): masks a boundary tile, runs the online softmax on the
// raw scores in the exp2 domain (m kept scaled, p = exp2(s * c - m); softmax_state.h rules) and
// accumulates P V.
// kMasksFirst: the masks of all the lane's rows under one branch before the rows' softmax, so
// the unmasked path jumps over them once, not once a row (the ping-pong kernel's choice; the
// others take more registers with it and are no faster).
template <bool kMasksFirst, int D, int R, typename Mask>
__device__ __forceinline__ void softmax_and_accumulate(WarpAttention<D>& w, SoftmaxState (&st)[R],
                                                       const KvTile<D>& tile, int t, unsigned pages_ok,
                                                       bool boundary, const Mask& mask,
                                                       float scale_log2) {
  using Warp = WarpAttention<D>;
  constexpr int N = Warp::kScoresPerRow;
  float factor[R];
  if (kMasksFirst && boundary) {
#pragma unroll
    for (int rr = 0; rr < R; ++rr) mask_scores(w, w.s[rr], rr, t, pages_ok, mask);
  }
#pragma unroll
  for (int rr = 0; rr < R; ++rr) {
    if (!kMasksFirst && boundary) mask_scores(w, w.s[rr], rr, t, pages_ok, mask);
    // scale > 0: the max commutes with it; -inf stays -inf.
    const float mx = Warp::row_max(tree_reduce<N>(w.s[rr], max_op)) * scale_log2;
    // -inf + slack stays -inf: a row's first visible key always sets its max.
    const float m_new = mx > st[rr].m + kRescaleSlack ? mx : st[rr].m;
    const float m_use = finite_max(m_new);
    factor[rr] = fast_exp2(st[rr].m - m_use);  // 0 when m was -inf
    exp2_scaled_in_place(w.s[rr], scale_log2, m_use);
    // lane-partial l; reduced over the row at the end
    st[rr].l = st[rr].l * factor[rr] + tree_reduce<N>(w.s[rr], add_op);
    st[rr].m = m_new;
  }
  bool rescale = false;  // once the max settles every factor is 1: skip the multiplies
#pragma unroll
  for (int rr = 0; rr < R; ++rr) rescale |= factor[rr] != 1.0f;
  if (warp_any(rescale)) {
#pragma unroll
    for (int rr = 0; rr < R; ++rr) w.rescale(rr, factor[rr]);
  }
  w.accumulate(tile);
}

// A segment of exactly two tiles t, t + 1 (both staged by the prologue), as one 128-key step
// (the warpgroup MMA only): both tiles' score MMAs in one round trip, one softmax over their 128
// keys from the empty state (no rescale: O is still zero), both P V in one round trip.
// b_ready() runs between the two tiles' score MMAs and waits for b's copies: every thread of the
// CTA must reach it (it holds a barrier).
template <int D, int R, typename Mask, typename BReady>
__device__ __forceinline__ void softmax_and_accumulate_pair(WarpAttention<D>& w, SoftmaxState (&st)[R],
                                                            const KvTile<D>& a, const KvTile<D>& b,
                                                            int t, unsigned ok_a, unsigned ok_b,
                                                            const Mask& mask, float scale_log2,
                                                            BReady b_ready) {
  using Warp = WarpAttention<D>;
  constexpr int N = Warp::kScoresPerRow;
  float s_b[R][N];
  w.scores_pair(a, b, s_b, b_ready);
  const bool bound_a = mask.boundary(t, ok_a), bound_b = mask.boundary(t + 1, ok_b);
#pragma unroll
  for (int rr = 0; rr < R; ++rr) {
    if (bound_a) mask_scores(w, w.s[rr], rr, t, ok_a, mask);
    if (bound_b) mask_scores(w, s_b[rr], rr, t + 1, ok_b, mask);
    const float mx =
        Warp::row_max(fmaxf(tree_reduce<N>(w.s[rr], max_op), tree_reduce<N>(s_b[rr], max_op))) * scale_log2;
    const float m_use = finite_max(mx);
    exp2_scaled_in_place(w.s[rr], scale_log2, m_use);
    exp2_scaled_in_place(s_b[rr], scale_log2, m_use);
    st[rr].l = tree_reduce<N>(w.s[rr], add_op) + tree_reduce<N>(s_b[rr], add_op);
    st[rr].m = mx;
  }
  w.accumulate_pair(a, b, s_b);
}

// The segment's partial state of the warp's rows (partials.h): m and the row's l (the lanes'
// st[rr].l summed over the row) by each row's leader lane, o as bf16 by every lane, in the order
// of partial_o_order.h (NVIDIA: 16-byte stores, whole sectors a quad); rows past p.rows are not
// written. The addresses once, the stores predicated (no branch a store).
template <int D, int R>
__device__ __forceinline__ void write_partials(const VerifyParams& p, const WarpAttention<D>& w,
                                               const SoftmaxState (&st)[R], int64_t slot,
                                               int row0) {
  const PartialsLayout lay{p.num_splits.divisor(), p.rows, D};
  bool row_ok[R];
  uint16_t* o_row[R];
#pragma unroll
  for (int rr = 0; rr < R; ++rr) {
    const int row = row0 + w.row_of(rr);
    row_ok[rr] = row < p.rows;
    o_row[rr] = p.part_o + lay.o_offset(slot, row_ok[rr] ? row : 0);
  }
  float l_row[R];
#pragma unroll
  for (int rr = 0; rr < R; ++rr) l_row[rr] = WarpAttention<D>::row_sum(st[rr].l);
  if (w.is_row_leader()) {
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
      if (!row_ok[rr]) continue;
      float* ml = p.part_ml + lay.ml_offset(slot, row0 + w.row_of(rr));
      ml[0] = st[rr].m;
      ml[1] = l_row[rr];
    }
  }
  if constexpr (kPartialOTransposed) {
    // The pair of columns d + 8j sits at partial_o_swap(d) + 2j: one 16-byte store.
    w.for_each_out_block([&](int rr, int d, const float (&x)[8]) {
      if (row_ok[rr])
        *reinterpret_cast<uint4*>(o_row[rr] + partial_o_swap(d)) =
            make_uint4(pack_bf16x2(x[0], x[1]), pack_bf16x2(x[2], x[3]), pack_bf16x2(x[4], x[5]),
                       pack_bf16x2(x[6], x[7]));
    });
  } else {
    w.for_each_out2([&](int rr, int d, float a, float b) {
      if (row_ok[rr])
        *reinterpret_cast<uint32_t*>(o_row[rr] + d) = pack_bf16x2(a, b);
    });
  }
}

// The output rows of the warp's state where the group's keys are one segment (kernels.h
// split_writes_output): o / l as bf16, as the merge writes them (a row that saw no key: zeros).
template <int D, int R>
__device__ __forceinline__ void write_output_rows(const VerifyParams& p, const WarpAttention<D>& w,
                                                  const SoftmaxState (&st)[R], const SplitCta& c,
                                                  int row0) {
  const QueryLayout ql{p.tokens, p.num_q_heads, p.qpk, D};
  bool row_ok[R], seen[R];
  uint16_t* dst[R];
  float inv[R];
#pragma unroll
  for (int rr = 0; rr < R; ++rr) {
    const int row = row0 + w.row_of(rr);
    row_ok[rr] = row < p.rows;
    dst[rr] = p.out + ql.row_offset(c.req, c.kvh, row_ok[rr] ? row : 0);
    const float l = WarpAttention<D>::row_sum(st[rr].l);
    seen[rr] = l > 0.0f;  // else zeros, whatever o holds (a NaN another row's key brought in)
    inv[rr] = seen[rr] ? 1.0f / l : 0.0f;
  }
  auto pair = [&](int rr, float a, float b) {
    return seen[rr] ? pack_bf16x2(a * inv[rr], b * inv[rr]) : 0u;
  };
#if defined(MUSE_ATTN_CUDA)
  w.for_each_out_block([&](int rr, int d, const float (&x)[8]) {
    if (!row_ok[rr]) return;
#pragma unroll
    for (int j = 0; j < 4; ++j)  // the pair of columns d + 8j
      *reinterpret_cast<uint32_t*>(dst[rr] + d + 8 * j) = pair(rr, x[2 * j], x[2 * j + 1]);
  });
#else
  w.for_each_out2([&](int rr, int d, float a, float b) {
    if (row_ok[rr]) *reinterpret_cast<uint32_t*>(dst[rr] + d) = pair(rr, a, b);
  });
#endif
}

// The CTA's output rows as zeros (split_writes_output, a group with no key to read), by
// kThreadsHere threads (tid from 0), 16 bytes a store.
template <int D, int kThreadsHere>
__device__ __forceinline__ void write_zero_rows(const VerifyParams& p, const SplitCta& c, int tid) {
  const QueryLayout ql{p.tokens, p.num_q_heads, p.qpk, D};
  constexpr int kPerRow = D / 8;  // 16-byte stores a row
  const int rows = min_i(p.rows - c.block_row0, kMaxRows);
  for (int i = tid; i < rows * kPerRow; i += kThreadsHere) {
    const int row = c.block_row0 + i / kPerRow;
    *reinterpret_cast<uint4*>(p.out + ql.row_offset(c.req, c.kvh, row) + 8 * (i % kPerRow)) =
        make_uint4(0u, 0u, 0u, 0u);
  }
}

// NVIDIA D = 64: 3 CTAs an SM (the stages' shared memory allows 3), so at most 168 registers.
// (HIP reads the second bound as waves an execution unit: left at 1 there.)
#if defined(MUSE_ATTN_CUDA)
template <int D>
inline constexpr int kMinCtasPerSm = D == 64 ? 3 : 1;
#else
template <int D>
inline constexpr int kMinCtasPerSm = 1;
#endif
// The drafts target's FP8 kernels' bound: at D = 64 on the mma.sync path (no warpgroup MMA) the
// FP8 stage, the drafts' mask and the math need more than the 3-an-SM bound's 168 registers: 2
// CTAs an SM.
#if defined(MUSE_ATTN_CUDA) && !defined(MUSE_ATTN_WGMMA)
template <int D>
inline constexpr int kDraftsFp8MinCtasPerSm = D == 64 ? 2 : kMinCtasPerSm<D>;
#else
template <int D>
inline constexpr int kDraftsFp8MinCtasPerSm = kMinCtasPerSm<D>;
#endif

// kTwoTile: a segment of exactly two tiles is taken as one 128-key step (the warpgroup MMA only;
// elsewhere tile by tile). An entry point of its own because the step costs registers, and so
// time, where segments are longer. On sm_90a it is capped at kTwoTileMaxRegs (__maxnreg__, which
// nvcc refuses beside __launch_bounds__ on one kernel) rather than the 3-an-SM bound's 168, so
// that a dependent merge CTA fits beside two split CTAs an SM; elsewhere the bound's 168 is
// written out (sm_90's mma.sync build would spill under 152).
#if defined(MUSE_ATTN_WGMMA)
inline constexpr int kTwoTileMaxRegs = 152;
#else
inline constexpr int kTwoTileMaxRegs = 65536 / (kThreads * kMinCtasPerSm<64>) / 8 * 8;  // the bound's
#endif
#if defined(MUSE_ATTN_CUDA)
#define MUSE_ATTN_TWO_TILE_BOUNDS __maxnreg__(kTwoTileMaxRegs)
#else
#define MUSE_ATTN_TWO_TILE_BOUNDS __launch_bounds__(kThreads, kMinCtasPerSm<64>)
#endif
// One split CTA's work (the entry points below): an inlined body so that each entry point carries
// its own register bound. kFillRing: a segment of exactly kStages tiles issues its last tile's
// copies in the prologue too, so every copy is issued before the first wait.
// kFp8: the cache is FP8 (kv_tile.h: each tile dequantized into bf16, then as for bf16).
// kBalanced: the balanced cut (split_cta above; split_kernel_balanced.cu.cc's entry points).
// kDrafts: the drafts target's kind (mask.h; p.draft_kind is the same): the request's count of
// drafts sets its geometry; Q rows past it are not read, and their partials not by the merge. A
// ragged chain is a chain of `count` tokens and takes the chain's mask; a tree's rows are masked
// by their DraftRow.
// kCachedKv (AMD): the K/V loads keep their lines in the caches (the plan's per_tile_cached, for a
// window); else they are nontemporal.
template <int D, bool kTwoTile, bool kFillRing, bool kFp8 = false,
          DraftKind kDrafts = DraftKind::kChain, bool kBalanced = false, bool kCachedKv = false>
__device__ __forceinline__ void run_split_cta(const VerifyParams& p) {
  constexpr bool kCounted = kDrafts != DraftKind::kChain, kTree = kDrafts == DraftKind::kTree;
  static_assert(!(kFp8 && (kTwoTile || kFillRing)), "FP8 tiles one at a time");
  static_assert(!(kCounted && kFillRing), "no fill ring for the drafts target");
  static_assert(!(kBalanced && (kTwoTile || kFillRing)), "the balanced cut's segments vary");
  static_assert(!kCachedKv || kVendor == Vendor::kAmd, "a cache policy of AMD's loads");
  MUSE_DYNAMIC_SHARED(smem_raw);
#if defined(MUSE_ATTN_CUDA)
  char* const smem = smem_raw + ((kSmemAlign - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) %
                                  kSmemAlign) % kSmemAlign);
#else
  char* const smem = smem_raw;
#endif
  using Warp = WarpAttention<D>;
  constexpr int kStages = Stages<D>::value;
  constexpr int R = Warp::kRowsPerLane;
  constexpr bool kFill = kFillRing && kStages >= 2;  // needs a prologue stage
  constexpr bool kStagedFp8 = kFp8 && kFp8Staged;

  // The output instead of the partial at one split (kernels.h split_writes_output): the chain's
  // kernels of the group's own cut that have the epilogue.
  constexpr SplitKernel kKernel = kTwoTile    ? SplitKernel::kTwoTile
                                  : kFillRing ? SplitKernel::kFillRing
                                  : kCachedKv ? SplitKernel::kPerTileCached
                                              : SplitKernel::kPerTile;
  constexpr bool kMayWriteOutput = has_output_epilogue(kKernel, kFp8) && !kCounted && !kBalanced;

  MUSE_ATTN_MARK(TimelineMark::kStart);
  grid_launch_dependents();  // the merge may launch now; it waits for this grid's writes
  const SplitCta c = split_cta<1, kBalanced>(p, kCounted, smem);
  const int real = real_requests(p.num_reqs_static, p.num_reqs, p.num_requests);
  if (c.req >= real) {  // padding: nothing read, zero rows (by the merge, or here)
    if (kMayWriteOutput && p.split_writes_output) write_zero_rows<D, kThreads>(p, c, threadIdx.x);
    return;
  }
  // Drafts: the request's count (its rows past it are not read; no keys without one), loaded
  // beside seq_lens, not before it. Both in flight while Q's copies are issued.
  const int count = kCounted ? request_draft_count(p.draft_lens, c.req, p.tokens) : p.tokens;
#if defined(MUSE_ATTN_HIP)
  // A scalar load, as an input's (amd_ops.h): with the output stores beside it the compiler no
  // longer proves it one, and a vector load waits before Q's loads are issued.
  const int seq_len_found = amd::load_invariant(p.seq_lens + c.req);
#else
  const int seq_len_found = p.seq_lens[c.req];
#endif
  const int raw_len = keyed_length(seq_len_found, count, kCounted);
  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize;
  const int row0 = c.block_row0 + 16 * warp;  // the warp's first row of the group
  const int lane = tid % kWarpSize;
  // Q first (the request is real).
  const QTile<D, kMaxRows> q_tile{smem + split_stages_bytes<D, kFp8>()};
  stage_query_rows<D, kThreads>(p, c, q_tile, tid, kCounted ? count * p.qpk.divisor() : p.rows);
  Warp w(lane);
  // A tree's rows: the lane's own (its mask) and, on NVIDIA, warp 0's lane t row t (the drafts no
  // row sees), in flight with seq_lens.
  const LaneTreeRows<D> lane_tree_rows = kTree ? LaneTreeRows<D>::load(p, c.req, w, row0) : LaneTreeRows<D>{};
#if !defined(MUSE_ATTN_HIP)
  const TreeRowFound tree_row = kTree && warp == 0 ? TreeRowFound::load(p, c.req, lane) : TreeRowFound{};
#endif
  RequestGeometry g = request_geometry(raw_len, p.pages * kPageSize, count, p.window,
                                       p.num_splits);
  if constexpr (kBalanced) cut_from_pool(&g, c.pool_len, 0);
  int t0, t1;
  segment_tiles(g, c.seg, &t0, &t1);
  if (t0 >= t1) {  // a segment past num_segments: no work (Q's copies land before the CTA ends)
    copy_wait<0>();
    if (kMayWriteOutput && p.split_writes_output) write_zero_rows<D, kThreads>(p, c, tid);
    return;
  }
  using Source = KvSource<D, kFp8 ? 1 : 2>;
  const Source src(static_cast<const typename Source::Elem*>(p.kv), p.num_kv_heads.divisor(), c.kvh,
                   p.table + c.req * p.table_stride, g, p.num_blocks);
  auto tile_at = [&](int stage) { return KvTile<D>{smem + stage * KvTile<D>::kBytes}; };
  auto fp8_at = [&](int stage) {
    return Fp8Stage<D>{smem + KvTile<D>::kBytes + stage * Fp8Stage<D>::kBytes};
  };
  // FP8: the scales' view, made where it is used from the parameters (kept in registers across
  // the loop it would cost the math registers).
  auto scales = [&] {
    return Fp8Scales{p.k_scale, p.v_scale, p.scale_kind == static_cast<int>(ScaleKind::kToken),
                     p.kv_format == static_cast<int>(KvFormat::kFp8E4m3fnuz),
                     p.num_kv_heads.divisor(), c.kvh};
  };

  // present: 4 bits a stage, the present_mask() of the tile staged there (absent pages' keys
  // are masked). Kept in a register: every thread stages with the same block ids.
  static_assert(kStages <= 8, "4 bits a stage in one 32-bit register");
  unsigned present = 0;
  // A tree's draft slots that no row sees are never read (mask.h tree_read_bits). NVIDIA: worked
  // out once by warp 0 (a row a lane) into shared memory, read back for the (at most two) tiles
  // holding draft slots, so that nothing of it stays in registers across the loop; worked out
  // once the first block ids' loads are issued (tree_word_ready), before any copy reads it. AMD:
  // every lane works out the same word, which stays in scalar registers (a static shared word
  // would put the D = 64 kernel one LDS granule past the chain's 40 KiB: three workgroups a CU
  // on gfx950, not four).
#if defined(MUSE_ATTN_HIP)
  const uint32_t unread_drafts = kTree ? unread_tree_drafts(p, c.req, g.ctx, count) : 0u;
  auto unread_word = [&] { return unread_drafts; };
  auto tree_word_ready = [] {};
#else
  uint32_t* unread_drafts = nullptr;
  if constexpr (kTree) {
    __shared__ uint32_t unread_word;
    unread_drafts = &unread_word;
  }
  auto unread_word = [&] { return lds_value(*unread_drafts); };
  auto tree_word_ready = [&] {
    if constexpr (kTree) {
      if (warp == 0) {
        const uint32_t word = unread_tree_drafts_by_warp(p, c.req, g.ctx, count, lane, tree_row);
        if (lane == 0) lds_write(unread_drafts, word);
      }
      __syncthreads();
    }
  };
#endif
  auto unread_keys = [&](int tile) -> uint64_t {
    if constexpr (kTree) {
      if ((tile + 1) * kTileKeys <= g.ctx) return 0u;
      return tile_unread_keys(unread_word(), tile, g.ctx);
    } else {
      return 0u;
    }
  };
  // AMD: the loop's refills go through registers, loaded a tile ahead (kv_tile.h TileRegs, and
  // Fp8TileRegs for the direct FP8 form): tile t + kStages - 1 lands in registers during tile t's
  // math. `regs_present`: its pages' present_mask(), moved into `present` with the tile.
#if defined(MUSE_ATTN_HIP)
  constexpr bool kRegPrefetch = !kStagedFp8;
  using Regs = std::conditional_t<kFp8, Fp8TileRegs<D, kThreads>, TileRegs<D, kThreads>>;
  Regs regs;
  unsigned regs_present = 0;
#else
  constexpr bool kRegPrefetch = false;
#endif
  // A tile's loads into r (r_present: its pages' present_mask()), and r written into a slot.
  auto load_regs_into = [&](auto& r, unsigned& r_present, int tile, const TileEntries& entries) {
#if defined(MUSE_ATTN_HIP)
    if constexpr (kRegPrefetch) {
      const TilePages pages = resolve(src, entries);
      constexpr auto kPolicy = kCachedKv ? amd::CachePolicy::kCached : amd::CachePolicy::kNonTemporal;
      if constexpr (kFp8)
        load_fp8_tile_regs<D, kThreads, kPolicy>(r, src, scales(), g, tile, pages, tid, unread_keys(tile));
      else
        load_tile_regs<D, kThreads, !kTwoTile, kPolicy>(r, src, g, tile, pages, tid, unread_keys(tile));
      r_present = pages.present_mask();
    }
#endif
  };
  auto store_regs_from = [&](const auto& r, unsigned r_present, int slot) {
#if defined(MUSE_ATTN_HIP)
    if constexpr (kRegPrefetch) {
      if constexpr (kFp8)
        store_fp8_tile_regs<D, kThreads>(tile_at(slot), r, scales().fnuz, tid);
      else
        store_tile_regs<D, kThreads>(tile_at(slot), r, src, g, tid);
      present = (present & ~(0xFu << (4 * slot))) | (r_present << (4 * slot));
    }
#endif
  };
#if defined(MUSE_ATTN_HIP)
  auto load_regs = [&](int tile, const TileEntries& entries) { load_regs_into(regs, regs_present, tile, entries); };
  auto store_regs = [&](int slot) { store_regs_from(regs, regs_present, slot); };
#else
  auto load_regs = [](int, const TileEntries&) {};
  auto store_regs = [](int) {};
#endif
  auto stage = [&](int slot, int tile, const TileEntries& entries) {
    const TilePages pages = resolve(src, entries);  // the entries' loads are waited for here
    const uint64_t unread = unread_keys(tile);
    if constexpr (!kFp8)
      stage_tile<D, kThreads, !kTwoTile>(tile_at(slot), src, g, tile, pages, tid, unread);
    else if constexpr (kStagedFp8)
      stage_fp8_tile<D, kThreads>(fp8_at(slot), src, scales(), g, tile, pages, tid, unread);
#if defined(MUSE_ATTN_HIP)  // the direct form (kv_tile.h); NVIDIA stages FP8
    else
      stage_fp8_tile_direct<D, kThreads>(tile_at(slot), src, scales(), g, tile, pages, tid, unread);
#endif
    present = (present & ~(0xFu << (4 * slot))) | (pages.present_mask() << (4 * slot));
  };

  // Start the copies first; the masks' bounds are set up while they fly. At D = 64 the block
  // ids of a tile are loaded one tile before its copies are issued (`next`), so no refill waits
  // on a block-table read, and each id load is issued ahead of the K/V copies before its use
  // (behind them, the refill waited as if for those copies too).
  constexpr bool kPrefetchIds = D == 64;
  TileEntries next{};
  if constexpr (D == 64) {  // all first block ids in flight together
    TileEntries first[kStages > 1 ? kStages - 1 : 1];
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s)
      if (t0 + s < t1) first[s] = load_tile_entries(src, t0 + s);
    // The loop's first refill's ids too, ahead of every K/V copy.
    if (t0 + kStages - 1 < t1) next = load_tile_entries(src, t0 + kStages - 1);
    tree_word_ready();
#if defined(MUSE_ATTN_HIP)
    if constexpr (kRegPrefetch) {
      // AMD: the prologue's tiles through registers too, every tile's loads in flight before the
      // first is written (staged one by one, each of a tile's loads waited for before the next).
      Regs first_regs[kStages > 1 ? kStages - 1 : 1];
      unsigned first_present[kStages > 1 ? kStages - 1 : 1] = {};
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s)
        if (t0 + s < t1) load_regs_into(first_regs[s], first_present[s], t0 + s, first[s]);
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s)
        if (t0 + s < t1) store_regs_from(first_regs[s], first_present[s], s);
    }
#endif
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (!kRegPrefetch && t0 + s < t1) stage(s, t0 + s, first[s]);
      if constexpr (kFill) {
        if (s == kStages - 2 && t1 - t0 == kStages) stage(kStages - 1, t0 + kStages - 1, next);
      }
      copy_commit();
    }
    if constexpr (kRegPrefetch) {  // the first refill into registers; next: the second's ids
      if (t0 + kStages - 1 < t1) load_regs(t0 + kStages - 1, next);
      next = t0 + kStages < t1 ? load_tile_entries(src, t0 + kStages) : TileEntries{};
    }
  } else {  // D = 128: one tile's ids at a time (registers are short there)
    tree_word_ready();
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (t0 + s < t1) stage(s, t0 + s, load_tile_entries(src, t0 + s));
      copy_commit();
    }
    if constexpr (kRegPrefetch) {
      if (t0 + kStages - 1 < t1) load_regs(t0 + kStages - 1, load_tile_entries(src, t0 + kStages - 1));
    }
  }

  MUSE_ATTN_MARK(TimelineMark::kIssued);
  const auto mask = [&] {
    if constexpr (kTree)
      return draft_lane_mask(p, c.req, g, count, w, row0, lane_tree_rows);
    else
      return lane_mask(p, g, w, row0, kCounted ? count : -1);
  }();
  SoftmaxState st[R];
#pragma unroll
  for (int rr = 0; rr < R; ++rr) st[rr] = SoftmaxState::empty();

  bool paired = false;  // a two-tile segment taken as one step
  if constexpr (kTwoTile && Warp::kWarpgroupMma && kStages >= 3) {
    if (t1 - t0 == 2) {  // both tiles' copies were issued above (slots 0 and 1)
      // The prologue committed kStages - 1 groups after Q's (stage_query_rows): tile t0's, t0 +
      // 1's, then empty ones. Waiting for all but the last kStages - 2 lands Q and tile t0, so
      // the first tile's scores start; the second's wait runs under them (second_tile_landed).
      copy_wait<kStages - 2>();
      fence_proxy_async_shared();
      __syncthreads();
      MUSE_ATTN_MARK(TimelineMark::kFirstTile);
      w.load_q(q_tile, 16 * warp);
      auto second_tile_landed = [] {
        copy_wait<kStages - 3>();
        fence_proxy_async_shared();
        __syncthreads();
      };
      softmax_and_accumulate_pair(w, st, tile_at(0), tile_at(1), t0, present & 0xFu, (present >> 4) & 0xFu,
                                  mask, p.scale_log2, second_tile_landed);
      paired = true;
    }
  }
  for (int t = paired ? t1 : t0; t < t1; ++t) {
    const int it = t - t0;
    if constexpr (kRegPrefetch) {
      // The registers' tile into the slot tile t - 1 left (free since the last barrier), then
      // the next refill's loads, in flight during this tile's math.
      if (t + kStages - 1 < t1) store_regs((it + kStages - 1) % kStages);
      if constexpr (kPrefetchIds) {
        TileEntries after{};
        if (t + kStages + 1 < t1) after = load_tile_entries(src, t + kStages + 1);
        if (t + kStages < t1) load_regs(t + kStages, next);
        next = after;
      } else if (t + kStages < t1) {
        load_regs(t + kStages, load_tile_entries(src, t + kStages));
      }
    } else if constexpr (kPrefetchIds) {
      TileEntries after{};  // issued ahead of this refill's copies
      if (t + kStages < t1) after = load_tile_entries(src, t + kStages);  // lands during this tile
      // (kFill: a kStages-tile segment's one refill was made in the prologue)
      if (t + kStages - 1 < t1 && !(kFill && t1 - t0 == kStages))
        stage((it + kStages - 1) % kStages, t + kStages - 1, next);
      next = after;
    } else if (t + kStages - 1 < t1) {
      stage((it + kStages - 1) % kStages, t + kStages - 1, load_tile_entries(src, t + kStages - 1));
    }
    copy_commit();
    copy_wait<kStages - 1>();  // tile t landed
    if constexpr (Warp::kWarpgroupMma) fence_proxy_async_shared();  // the copies, for its reads
    __syncthreads();
    const int slot = it % kStages;
    if constexpr (kStagedFp8) {
      const unsigned pages_ok = (present >> (4 * slot)) & 0xFu;  // the landed FP8 tile into the bf16 tile
      convert_fp8_tile<D, kThreads>(KvTile<D>{smem}, fp8_at(slot), scales(), g, t, pages_ok, tid);
      if constexpr (Warp::kWarpgroupMma) fence_proxy_async_shared();
      __syncthreads();
    }
    const KvTile<D> tile = kStagedFp8 ? KvTile<D>{smem} : tile_at(slot);
    if (it == 0) {
      MUSE_ATTN_MARK(TimelineMark::kFirstTile);
      w.load_q(q_tile, 16 * warp);
    }
    w.scores(tile);
    const unsigned pages_ok = (present >> (4 * slot)) & 0xFu;
    softmax_and_accumulate<false>(w, st, tile, t, pages_ok, mask.boundary(t, pages_ok), mask, p.scale_log2);
    __syncthreads();  // the stage is refilled next iteration
  }
  copy_wait<0>();
  MUSE_ATTN_MARK(TimelineMark::kLoopEnd);

  if (kMayWriteOutput && p.split_writes_output)
    write_output_rows(p, w, st, c, row0);
  else
    write_partials(p, w, st, partial_slot<kBalanced>(p, c), row0);
  MUSE_ATTN_MARK(TimelineMark::kEnd);
}

// Raises a kernel's dynamic shared-memory limit once a device (the attribute is per device;
// bit i of `done`: device i done).
template <typename Kernel>
gpuError_t allow_smem_once(Kernel kernel, int bytes, std::atomic<uint64_t>& done) {
  int dev = 0;
  if (gpuError_t e = current_device(&dev); e != gpuSuccess) return e;
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  if (!bit || !(done.load(std::memory_order_acquire) & bit)) {
    if (gpuError_t e = set_max_dynamic_shared(kernel, bytes); e != gpuSuccess) return e;
    done.fetch_or(bit, std::memory_order_acq_rel);
  }
  return gpuSuccess;
}

// Launches a split kernel on grid with threads threads and smem bytes of dynamic shared memory;
// `done` is the kernel's own (allow_smem_once).
template <typename Kernel>
gpuError_t launch_with_smem(Kernel kernel, std::atomic<uint64_t>& done, dim3 grid, int threads,
                            int smem, const VerifyParams& p, gpuStream_t stream) {
  if (gpuError_t e = allow_smem_once(kernel, smem, done); e != gpuSuccess) return e;
  MUSE_GPU_LAUNCH(kernel, grid, threads, smem, stream, p);
  return gpuGetLastError();
}

}  // namespace
}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_SPLIT_CTA_H_
