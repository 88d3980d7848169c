// The attention mask: which keys a query token sees. Causal (key <= qpos) and, for a sliding
// window, qpos - key < window (vLLM's window (window - 1, 0)). Keys of an absent block
// (block id -1 from the page table) and keys at or past seq_len are never visible; the latter
// follows from key <= qpos < seq_len.
#ifndef MUSE_ATTN_MASK_H_
#define MUSE_ATTN_MASK_H_

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

}  // namespace muse_attn

#endif  // MUSE_ATTN_MASK_H_
