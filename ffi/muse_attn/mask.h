// The attention mask: which keys a query token sees. Causal (key <= qpos) and, for a sliding
// window, qpos - key < window (vLLM's window (window - 1, 0)). Keys of an absent block
// (block id -1 from the page table) and keys at or past seq_len are never visible; the latter
// follows from key <= qpos < seq_len.
#ifndef MUSE_ATTN_MASK_H_
#define MUSE_ATTN_MASK_H_

#include <cstdint>

#include "muse_attn/geometry.h"
#include "muse_attn/host_device.h"

namespace muse_attn {

// window: 0 for full attention.
MUSE_HD bool key_is_visible(int key, int qpos, int window) {
  return key >= 0 && key <= qpos && (window <= 0 || qpos - key < window);
}

// First key token position qpos sees: qpos sees exactly the keys of [first_visible_key, qpos],
// the same set as key_is_visible (empty when qpos < 0, since the result is >= 0).
MUSE_HD int first_visible_key(int qpos, int window) {
  return window > 0 ? (qpos - window + 1 > 0 ? qpos - window + 1 : 0) : 0;
}

// Tiles [*lo, *hi) of 64 keys that every one of the num_tokens tokens sees whole (no key masked
// by causality or the window), for a request with ctx keys before its first new token. Token 0
// sees the fewest keys at the end (up to ctx), the last token loses the most at the start
// (window). Empty when ctx < 0.
MUSE_HD void whole_tiles(int ctx, int num_tokens, int window, int* lo, int* hi) {
  const int last_lo = first_visible_key(ctx + num_tokens - 1, window);
  *lo = ceil_div(last_lo, kTileKeys);
  *hi = ctx >= 0 ? (ctx + 1) / kTileKeys : 0;
}

// ------------------------------------------------------------------------ drafts and trees
// A request may verify n <= NQ drafts (draft_lens) whose K/V are its last n key slots: the
// context is ctx = seq_len - n keys, draft j sits in slot ctx + j. In a chain, draft t is at
// position ctx + t and sees the keys at or before it. In a tree (tree_mask, draft_depths), draft
// t is at position ctx + depth_t and sees every context key and the drafts j whose bit j is set
// in its mask row (its own bit included only when set). A window applies by position to both:
// qpos - kpos < window. A draft whose own slot is negative (seq_len < n: its K/V are not in the
// cache) sees nothing, as a chain token with qpos < 0. Run-time values are clamped here, so a
// kernel may pass what it finds in memory.

// What the drafts target's draft operands say (its attribute draft_kind).
enum class DraftKind : int32_t {
  kChain = 0,   // every request verifies NQ tokens in a chain; no draft operand is read
  kRagged = 1,  // a chain of draft_lens[r] tokens; draft_lens is read
  kTree = 2,    // draft_lens, tree_mask and draft_depths are read where given (else defaults)
};

// The draft count of a request: draft_lens[r] clamped to [0, tokens].
MUSE_HD int clamp_draft_count(int raw, int tokens) { return raw < 0 ? 0 : raw > tokens ? tokens : raw; }

// A tree's operands may be absent (null: an empty operand in the call). Their defaults are made
// where they are read: filled in by the caller, each would be an op of its own before the call.
// draft_lens[r] clamped, or every token.
MUSE_HD int request_draft_count(const int32_t* draft_lens, int r, int tokens) {
  return draft_lens != nullptr ? clamp_draft_count(draft_lens[r], tokens) : tokens;
}

// The length a request's CTAs work over: none for a request whose draft count (counted) is 0, as
// it verifies nothing and reads no keys.
MUSE_HD int keyed_length(int seq_len, int count, bool counted) {
  return !counted || count > 0 ? seq_len : 0;
}

// A draft's depth: draft_depths[r, t] clamped to [0, tokens - 1].
MUSE_HD int clamp_draft_depth(int raw, int tokens) {
  return raw < 0 ? 0 : raw > tokens - 1 ? tokens - 1 : raw;
}

// Bits [0, n) of a mask word (n in [0, 32]).
MUSE_HD uint32_t low_bits(int n) { return n >= 32 ? ~0u : n <= 0 ? 0u : (1u << n) - 1u; }

// Row t of request r as found: tree_mask[r, t], or the causal row (bits j <= t); draft_depths[r,
// t] unclamped, or t. at = r * tokens + t.
MUSE_HD uint32_t tree_row_bits(const uint32_t* tree_mask, int64_t at, int t) {
  return tree_mask != nullptr ? tree_mask[at] : low_bits(t + 1);
}
MUSE_HD int tree_row_depth(const int32_t* draft_depths, int64_t at, int t) {
  return draft_depths != nullptr ? draft_depths[at] : t;
}

// What one draft row sees, computed once a row; draft_key_is_visible() then tests a key.
struct DraftRow {
  int key_lo;           // first context key it sees (window by position), >= 0
  int key_hi;           // one past the last context key it sees: ctx, or 0 for a dead row
  uint32_t draft_bits;  // bit j: it sees draft j (slot ctx + j)
};

// A row that sees nothing (past the request's count, or a draft whose own slot is negative).
MUSE_HD DraftRow dead_draft_row() { return DraftRow{0, 0, 0u}; }

// Row t of a tree: tree_bits = tree_mask[r, t] as found in memory; depths[j] the request's
// clamped depths (an array, or anything indexable that clamps as it reads; only j < count is
// read). ctx may be negative.
// depth: depths[t], given apart where the caller holds it already.
template <typename Depths>
MUSE_HD DraftRow tree_draft_row(int ctx, int count, int t, uint32_t tree_bits, int depth,
                                const Depths& depths, int window) {
  if (t >= count || ctx + t < 0) return dead_draft_row();
  const int qpos = ctx + depth;
  DraftRow row;
  row.key_lo = first_visible_key(qpos, window);
  row.key_hi = ctx;
  // Drafts that exist (j < count, slot ctx + j >= 0) and, with a window, lie inside it.
  uint32_t bits = tree_bits & low_bits(count) & ~low_bits(-ctx);
  if (window > 0 && depth >= window)  // else every draft is within it (depths are >= 0)
    for (int j = 0; j < count; ++j)
      if (depth - depths[j] >= window) bits &= ~(1u << j);
  row.draft_bits = bits;
  return row;
}
template <typename Depths>
MUSE_HD DraftRow tree_draft_row(int ctx, int count, int t, uint32_t tree_bits, const Depths& depths,
                                int window) {
  if (t >= count || ctx + t < 0) return dead_draft_row();
  return tree_draft_row(ctx, count, t, tree_bits, depths[t], depths, window);
}

// Whether the row sees key slot `key` (>= 0) of a request with ctx context keys. Keys at or past
// ctx + count are never visible (their bits are clear), so neither are slots past seq_len.
MUSE_HD bool draft_key_is_visible(const DraftRow& row, int ctx, int key) {
  if (key < ctx) return key >= row.key_lo && key < row.key_hi;
  const unsigned j = static_cast<unsigned>(key - ctx);
  return j < 32u && ((row.draft_bits >> j) & 1u) != 0u;
}

// Bits of the 64 keys of tile `tile` that are draft slots outside read_bits (unread_drafts =
// bits of the drafts [0, count) not read): the copies zero-fill them instead of reading.
MUSE_HD uint64_t tile_unread_keys(uint32_t unread_drafts, int tile, int ctx) {
  const int base = tile * kTileKeys - ctx;  // the draft index of the tile's first key
  if (unread_drafts == 0u || base >= 32 || base <= -kTileKeys) return 0u;
  return base >= 0 ? uint64_t{unread_drafts} >> base : uint64_t{unread_drafts} << -base;
}

// The drafts a tree reads: those some row sees (bits OR-ed over the request's rows). A draft
// slot no row sees is never read, so garbage there cannot reach the output. A slot one row sees
// is read for the whole request, as every key of a chain is: there a NaN reaches every row.
MUSE_HD uint32_t tree_read_bits(const DraftRow* rows, int num_rows) {
  uint32_t bits = 0u;
  for (int t = 0; t < num_rows; ++t) bits |= rows[t].draft_bits;
  return bits;
}

// Whether key slot `key` of [key_lo, seq_len) is read: a context key, or a draft in read_bits
// (a chain reads every draft: ~0u).
MUSE_HD bool draft_slot_is_read(int key, int ctx, uint32_t read_bits) {
  if (key < ctx) return true;
  const unsigned j = static_cast<unsigned>(key - ctx);
  return j >= 32u || ((read_bits >> j) & 1u) != 0u;
}

// Tiles [*lo, *hi) of 64 keys that every live row of a tree sees whole: context keys only (a
// draft key depends on the row's mask) and inside the window of the row at the greatest depth.
// max_depth: the largest clamped depth among the live rows. Empty when ctx < 64.
MUSE_HD void tree_whole_tiles(int ctx, int max_depth, int window, int* lo, int* hi) {
  *lo = ceil_div(first_visible_key(ctx + max_depth, window), kTileKeys);
  *hi = ctx > 0 ? ctx / kTileKeys : 0;
}

}  // namespace muse_attn

#endif  // MUSE_ATTN_MASK_H_
