// The static shape of one verify-attention call, read off the FFI buffers and attributes, and
// checked once more on the C++ side (the Python wrapper already refuses bad shapes at trace
// time; these checks guard direct users of the custom call). Host only.
#ifndef MUSE_ATTN_PROBLEM_H_
#define MUSE_ATTN_PROBLEM_H_

#include <cstdint>
#include <string>
#include <utility>

#include "muse_attn/fp8.h"
#include "muse_attn/geometry.h"
#include "muse_attn/mask.h"
#include "muse_attn/partials.h"
#include "muse_attn/softmax_state.h"
#include "xla/ffi/api/ffi.h"

namespace muse_attn {

namespace ffi = ::xla::ffi;


struct Problem {
  int num_requests;     // R: requests of the compiled bucket (q rows / tokens)
  int tokens;           // NQ: new tokens a request
  int num_q_heads;      // Hq
  int num_kv_heads;     // Hkv
  int qpk;              // Hq / Hkv
  int head_dim;         // D
  int64_t num_blocks;   // blocks in the KV cache
  int pages;            // P: block-table width
  int64_t table_row_stride;  // elements between block-table rows (= P)
  int window;           // 0: full attention
  int num_splits;       // segments a group at most
  int num_reqs_static;  // real requests when known at trace time (the operand is not read), or -1
  bool balance_segments;  // the balanced cut (geometry.h): segments sized by the batch's lengths
  float scale_log2;     // scale * log2(e)
  KvFormat kv_format;   // bf16 or an FP8 (muse_attn/fp8.h)
  ScaleKind scale_kind;  // FP8: the K / V scales per tensor or per (block, head, slot)
  DraftKind draft_kind;  // which draft operands are read (drafts target only)
  // A tree's operands that are given (an empty one takes its default, mask.h); a ragged chain's
  // draft_lens always is.
  bool draft_lens_given, tree_mask_given, draft_depths_given;
  bool return_lse;       // the lse result is written (drafts target only)

  int rows() const { return tokens * qpk; }  // output rows of a group
  int groups() const { return num_requests * num_kv_heads; }
  int capacity() const { return pages * kPageSize; }
  PartialsLayout partials() const { return PartialsLayout{num_splits, rows(), head_dim}; }
};

inline std::string dims_str(ffi::Span<const int64_t> d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// q [NQ*R, Hq, D]; kv_cache [num_blocks, Hkv, 16, 2D]; block_table [>=R, P]; seq_lens [>=R];
// partial_o [R*Hkv, S, NQ*qpk, D]; partial_ml [R*Hkv, S, NQ*qpk, 2].
inline ffi::Error make_problem(ffi::Span<const int64_t> q,
                               ffi::Span<const int64_t> kv,
                               ffi::Span<const int64_t> table,
                               ffi::Span<const int64_t> lens,
                               ffi::Span<const int64_t> part_o,
                               ffi::Span<const int64_t> part_ml, float scale,
                               int32_t window, int32_t tokens, int32_t num_splits,
                               int32_t num_reqs_static, Problem* out) {
  auto bad = [](std::string what) {
    return ffi::Error::InvalidArgument("jax_muse_attn verify_attention: " + what);
  };
  if (tokens < 1) return bad("tokens_per_request must be >= 1, got " + std::to_string(tokens));
  if (num_splits < 1) return bad("num_splits must be >= 1, got " + std::to_string(num_splits));
  if (window < 0) return bad("window must be >= 0 (0: full), got " + std::to_string(window));
  if (!(scale > 0.0f) || scale == __builtin_huge_valf())  // the kernels rely on scale > 0
    return bad("scale must be finite and > 0, got " + std::to_string(scale));
  if (q.size() != 3 || kv.size() != 4 || table.size() != 2 || lens.size() != 1)
    return bad("bad ranks: q " + dims_str(q) + ", kv_cache " + dims_str(kv) +
               ", block_table " + dims_str(table) + ", seq_lens " + dims_str(lens));
  Problem& p = *out;
  p.tokens = tokens;
  if (q[0] % tokens != 0)
    return bad("q rows " + std::to_string(q[0]) + " are not a multiple of " +
               std::to_string(tokens) + " tokens a request");
  p.num_requests = static_cast<int>(q[0] / tokens);
  p.num_q_heads = static_cast<int>(q[1]);
  p.head_dim = static_cast<int>(q[2]);
  p.num_blocks = kv[0];
  p.num_kv_heads = static_cast<int>(kv[1]);
  if (p.num_kv_heads < 1 || p.num_q_heads < 1 || p.num_q_heads % p.num_kv_heads != 0)
    return bad("q heads " + std::to_string(p.num_q_heads) + " must be a positive multiple of KV heads " +
               std::to_string(p.num_kv_heads));
  p.qpk = p.num_q_heads / p.num_kv_heads;
  if (kv[2] != kPageSize || kv[3] != 2 * q[2])
    return bad("kv_cache must be [blocks, Hkv, 16, 2*D], got " + dims_str(kv) + " for D " +
               std::to_string(q[2]));
  if (table[0] < p.num_requests || lens[0] < p.num_requests)
    return bad("block_table " + dims_str(table) + " and seq_lens " + dims_str(lens) +
               " need >= " + std::to_string(p.num_requests) + " rows");
  p.pages = static_cast<int>(table[1]);
  p.table_row_stride = table[1];
  p.window = window;
  p.num_splits = num_splits;
  if (num_reqs_static < -1 || num_reqs_static > p.num_requests)
    return bad("num_reqs_static must be -1 or in [0, " + std::to_string(p.num_requests) + "], got " +
               std::to_string(num_reqs_static));
  p.num_reqs_static = num_reqs_static;
  p.scale_log2 = scale * kLog2e;
  const int64_t want_o[4] = {p.groups(), num_splits, p.rows(), p.head_dim};
  const int64_t want_ml[4] = {p.groups(), num_splits, p.rows(), 2};
  if (part_o.size() != 4 || part_ml.size() != 4) return bad("partials must be rank 4");
  for (int i = 0; i < 4; ++i)
    if (part_o[i] != want_o[i] || part_ml[i] != want_ml[i])
      return bad("partials " + dims_str(part_o) + " / " + dims_str(part_ml) +
                 " do not match the problem");
  return ffi::Error::Success();
}

// The cache's format and its scales: kv_format / scale_kind as the attributes say, checked against
// the cache's dtype and the scales' shapes ([] per tensor, [num_blocks, Hkv, 16] per token; a
// bf16 cache takes two unused scalars).
inline ffi::Error check_kv_format(ffi::DataType kv_dtype, ffi::Span<const int64_t> k_scale,
                                  ffi::Span<const int64_t> v_scale, int32_t kv_format,
                                  int32_t scale_kind, Problem* p) {
  auto bad = [](std::string what) {
    return ffi::Error::InvalidArgument("jax_muse_attn verify_attention: " + what);
  };
  const ffi::DataType want = kv_format == 0   ? ffi::DataType::BF16
                             : kv_format == 1 ? ffi::DataType::F8E4M3FN
                             : kv_format == 2 ? ffi::DataType::F8E4M3FNUZ
                                              : ffi::DataType::INVALID;
  if (want == ffi::DataType::INVALID || kv_dtype != want)
    return bad("kv_cache's dtype does not match kv_format " + std::to_string(kv_format));
  if (scale_kind < 0 || scale_kind > 2 || (kv_format == 0) != (scale_kind == 0))
    return bad("scale_kind " + std::to_string(scale_kind) + " with kv_format " +
               std::to_string(kv_format));
  for (ffi::Span<const int64_t> s : {k_scale, v_scale}) {
    const bool ok = scale_kind == 2
                        ? s.size() == 3 && s[0] == p->num_blocks && s[1] == p->num_kv_heads &&
                              s[2] == kPageSize
                        : s.size() == 0;
    if (!ok)
      return bad("scales " + dims_str(s) + " for scale_kind " + std::to_string(scale_kind) +
                 " (per tensor: [], per token: [num_blocks, Hkv, 16])");
  }
  p->kv_format = static_cast<KvFormat>(kv_format);
  p->scale_kind = static_cast<ScaleKind>(scale_kind);
  return ffi::Error::Success();
}

// The drafts target's extra operands against the problem: draft_lens [R] (kRagged, kTree),
// tree_mask and draft_depths [R, NQ] (kTree), unread and of any shape otherwise; a tree's may
// each be empty ([0], [0, NQ]: its default). The lse result [NQ*R, Hq] when return_lse, else
// unwritten and of any shape.
inline ffi::Error check_drafts(ffi::Span<const int64_t> draft_lens,
                               ffi::Span<const int64_t> tree_mask,
                               ffi::Span<const int64_t> draft_depths,
                               ffi::Span<const int64_t> lse, int32_t draft_kind,
                               int32_t return_lse, Problem* p) {
  auto bad = [](std::string what) {
    return ffi::Error::InvalidArgument("jax_muse_attn verify_attention: " + what);
  };
  if (draft_kind < 0 || draft_kind > 2)
    return bad("draft_kind must be 0, 1 or 2, got " + std::to_string(draft_kind));
  if (return_lse != 0 && return_lse != 1)
    return bad("return_lse must be 0 or 1, got " + std::to_string(return_lse));
  if (p->tokens > 32) return bad("tree masks hold at most 32 tokens a request");
  const bool tree = draft_kind == 2;
  auto empty = [](ffi::Span<const int64_t> d) { return d.size() >= 1 && d[0] == 0; };
  p->draft_lens_given = draft_kind >= 1 && !(tree && empty(draft_lens));
  p->tree_mask_given = tree && !empty(tree_mask);
  p->draft_depths_given = tree && !empty(draft_depths);
  if (p->draft_lens_given && (draft_lens.size() != 1 || draft_lens[0] != p->num_requests))
    return bad("draft_lens must be [" + std::to_string(p->num_requests) + "]" +
               (tree ? " or [0]" : "") + ", got " + dims_str(draft_lens));
  if (tree)
    for (ffi::Span<const int64_t> d : {tree_mask, draft_depths})
      if (d.size() != 2 || (d[0] != p->num_requests && d[0] != 0) || d[1] != p->tokens)
        return bad("tree_mask and draft_depths must be [" + std::to_string(p->num_requests) +
                   " or 0, " + std::to_string(p->tokens) + "], got " + dims_str(tree_mask) +
                   " and " + dims_str(draft_depths));
  if (return_lse == 1 && (lse.size() != 2 || lse[0] != int64_t{p->num_requests} * p->tokens ||
                          lse[1] != p->num_q_heads))
    return bad("lse must be [NQ*R, Hq] = [" + std::to_string(p->num_requests * p->tokens) +
               ", " + std::to_string(p->num_q_heads) + "], got " + dims_str(lse));
  p->draft_kind = static_cast<DraftKind>(draft_kind);
  p->return_lse = return_lse == 1;
  return ffi::Error::Success();
}

// The operands, results and attributes every platform's handler binds, in order, after any
// platform context (e.g. the GPU stream) already on `binding`.
template <typename Binding>
auto bind_verify_attention(Binding binding) {
  return std::move(binding).template Arg<ffi::BufferR3<ffi::BF16>>()  // q [NQ*R, Hq, D]
      .template Arg<ffi::AnyBuffer>()                      // kv_cache [blocks, Hkv, 16, 2D]: bf16 or fp8
      .template Arg<ffi::BufferR2<ffi::S32>>()             // block_table [>=R, P]
      .template Arg<ffi::BufferR1<ffi::S32>>()             // seq_lens [>=R]
      .template Arg<ffi::BufferR0<ffi::S32>>()             // num_reqs: real requests
      .template Arg<ffi::Buffer<ffi::F32>>()               // k_scale: [] or [blocks, Hkv, 16]
      .template Arg<ffi::Buffer<ffi::F32>>()               // v_scale: likewise
      .template Ret<ffi::BufferR3<ffi::BF16>>()            // out, like q
      .template Ret<ffi::BufferR4<ffi::BF16>>()            // partial o [R*Hkv, S, rows, D] bf16
      .template Ret<ffi::BufferR4<ffi::F32>>()             // partial (m, l) [R*Hkv, S, rows, 2]
      .template Attr<float>("scale")                       // softmax scale (not yet x log2 e)
      .template Attr<int32_t>("window")                    // 0: full attention
      .template Attr<int32_t>("tokens_per_request")        // NQ
      .template Attr<int32_t>("num_splits")                // segments a group at most
      .template Attr<int32_t>("num_reqs_static")           // num_reqs if static, else -1
      // The rest of the launch plan (gpu/launch_plan.h; the CPU handler has one scheme):
      .template Attr<int32_t>("split_kernel")              // gpu::SplitKernel
      .template Attr<int32_t>("merge_warps")               // warps a merge row: 1, 2, 4 or 8
      .template Attr<int32_t>("merge_pdl")                 // 1: merge as a dependent launch
      .template Attr<int32_t>("merge_by_lane")             // 1: a segment weighed on one lane
      .template Attr<int32_t>("balance_segments")          // 1: the balanced cut (geometry.h)
      .template Attr<int32_t>("kv_format")                 // muse_attn::KvFormat
      .template Attr<int32_t>("scale_kind");               // muse_attn::ScaleKind
}

// The drafts target (ragged drafts, trees, lse): bind_verify_attention's operands with three
// more after v_scale, an lse result after out, and two more attributes. The chain call keeps
// the target above, so the fast default passes nothing it does not read.
template <typename Binding>
auto bind_verify_attention_drafts(Binding binding) {
  return std::move(binding).template Arg<ffi::BufferR3<ffi::BF16>>()  // q [NQ*R, Hq, D]
      .template Arg<ffi::AnyBuffer>()                      // kv_cache [blocks, Hkv, 16, 2D]: bf16 or fp8
      .template Arg<ffi::BufferR2<ffi::S32>>()             // block_table [>=R, P]
      .template Arg<ffi::BufferR1<ffi::S32>>()             // seq_lens [>=R]
      .template Arg<ffi::BufferR0<ffi::S32>>()             // num_reqs: real requests
      .template Arg<ffi::Buffer<ffi::F32>>()               // k_scale: [] or [blocks, Hkv, 16]
      .template Arg<ffi::Buffer<ffi::F32>>()               // v_scale: likewise
      .template Arg<ffi::BufferR1<ffi::S32>>()             // draft_lens [R] (draft_kind >= 1)
      .template Arg<ffi::BufferR2<ffi::U32>>()             // tree_mask [R, NQ] (draft_kind 2)
      .template Arg<ffi::BufferR2<ffi::S32>>()             // draft_depths [R, NQ] (draft_kind 2)
      .template Ret<ffi::BufferR3<ffi::BF16>>()            // out, like q
      .template Ret<ffi::BufferR2<ffi::F32>>()             // lse [NQ*R, Hq] (return_lse)
      .template Ret<ffi::BufferR4<ffi::BF16>>()            // partial o [R*Hkv, S, rows, D] bf16
      .template Ret<ffi::BufferR4<ffi::F32>>()             // partial (m, l) [R*Hkv, S, rows, 2]
      .template Attr<float>("scale")
      .template Attr<int32_t>("window")
      .template Attr<int32_t>("tokens_per_request")
      .template Attr<int32_t>("num_splits")
      .template Attr<int32_t>("num_reqs_static")
      .template Attr<int32_t>("split_kernel")
      .template Attr<int32_t>("merge_warps")
      .template Attr<int32_t>("merge_pdl")
      .template Attr<int32_t>("merge_by_lane")
      .template Attr<int32_t>("balance_segments")
      .template Attr<int32_t>("kv_format")
      .template Attr<int32_t>("scale_kind")
      .template Attr<int32_t>("draft_kind")                // muse_attn::DraftKind
      .template Attr<int32_t>("return_lse");               // 1: lse is written
}

}  // namespace muse_attn

#endif  // MUSE_ATTN_PROBLEM_H_
