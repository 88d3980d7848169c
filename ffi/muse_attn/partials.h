// Layout of the split partials: one state per (slot, row), a slot per split CTA's segment
// (PartialsLayout::first_slot), row = token * qpk + head-in-group. The buffers are results of
// the custom call, sized at trace time from static shapes (groups x num_splits x rows), so no
// handler allocates.
//   partial_o  [groups, num_splits, rows, head_dim]  unnormalized o, bf16 (rounded to nearest
//                                                    even; on NVIDIA each row's pairs in the
//                                                    order of gpu/partial_o_order.h)
//   partial_ml [groups, num_splits, rows, 2]          (m, l), fp32
// o as bf16 halves the bytes the split writes and the merge reads, which shortens the
// latency-bound calls. Its rounding error is at most 2^-8 of |o / l|, itself a convex
// combination of the segment's V rows: the same bound as the rounding of V to bf16 in the KV
// cache, added once a segment.
// A slot with no segment is neither written nor read. QueryLayout: where a
// group's rows sit in q and the output.
#ifndef MUSE_ATTN_PARTIALS_H_
#define MUSE_ATTN_PARTIALS_H_

#include <cstdint>

#include "muse_attn/fast_div.h"
#include "muse_attn/host_device.h"

namespace muse_attn {

struct PartialsLayout {
  int num_splits;
  int rows;      // tokens_per_request * qpk
  int head_dim;

  // The slot of segment 0 of group (req, kv_head); segment j is j slots further. The group's own
  // cut (geometry.h): its num_splits slots. The balanced cut (pool_first >= 0): the KV head's
  // R * num_splits slots are one pool, and the request's segments start at its slot pool_first.
  MUSE_HD int64_t first_slot(int req, int kv_head, int num_kv_heads, int num_requests,
                             int pool_first) const {
    return pool_first >= 0
               ? static_cast<int64_t>(kv_head) * num_requests * num_splits + pool_first
               : (static_cast<int64_t>(req) * num_kv_heads + kv_head) * num_splits;
  }
  MUSE_HD int64_t state_index(int64_t slot, int row) const { return slot * rows + row; }
  MUSE_HD int64_t o_offset(int64_t slot, int row) const { return state_index(slot, row) * head_dim; }
  MUSE_HD int64_t ml_offset(int64_t slot, int row) const { return state_index(slot, row) * 2; }
};

// Where a group's row lives in q and in the output (both [NQ*R, Hq, D]): row = token * qpk +
// head-in-group, and token t of request r is row NQ * r + t of q.
struct QueryLayout {
  int tokens;  // NQ
  int num_q_heads;
  FastDiv qpk;  // q heads a KV head (a multiply-shift: row / qpk on every row)
  int head_dim;

  // Element offset of (request req, KV head kv_head, group row row >= 0), d = 0.
  MUSE_HD int64_t row_offset(int req, int kv_head, int row) const {
    const int tok = row / qpk, head = kv_head * qpk.divisor() + (row - tok * qpk.divisor());
    return ((static_cast<int64_t>(tokens) * req + tok) * num_q_heads + head) * head_dim;
  }
};

}  // namespace muse_attn

#endif  // MUSE_ATTN_PARTIALS_H_
