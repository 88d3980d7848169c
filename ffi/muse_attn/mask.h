// The attention mask: which keys a query token sees. Causal (key <= qpos) and, for a sliding
// window, qpos - key < window (vLLM's window (window - 1, 0)). Keys of an absent block
// (block id -1 from the page table) and keys at or past seq_len are never visible; the latter
// follows from key <= qpos < seq_len.
#ifndef MUSE_ATTN_MASK_H_
#define MUSE_ATTN_MASK_H_

#include "muse_attn/host_device.h"

namespace muse_attn {

// window: 0 for full attention.
MUSE_HD bool key_is_visible(int key, int qpos, int window) {
  return key >= 0 && key <= qpos && (window <= 0 || qpos - key < window);
}

// First key token position qpos sees (only meaningful for qpos >= 0).
MUSE_HD int first_visible_key(int qpos, int window) {
  return window > 0 ? (qpos - window + 1 > 0 ? qpos - window + 1 : 0) : 0;
}

}  // namespace muse_attn

#endif  // MUSE_ATTN_MASK_H_
