// The page table (vLLM's block table): key k of request r lives in block
// block_table[r, k / 16] at slot k % 16. Only the entries of pages that hold a key of
// [key_lo, seq_len) are live; the others are stale (freed blocks before a sliding window,
// blocks past the end) and may hold any int32. A live entry outside [0, num_blocks) names no
// block: its keys count as absent (masked), and the cache is not touched.
#ifndef MUSE_ATTN_PAGE_TABLE_H_
#define MUSE_ATTN_PAGE_TABLE_H_

#include <cstdint>

#include "muse_attn/geometry.h"
#include "muse_attn/host_device.h"

namespace muse_attn {

// Whether page p of the request holds a key of [key_lo, seq_len), i.e. whether its
// block-table entry may be read at all.
MUSE_HD bool page_is_live(const RequestGeometry& g, int page) {
  return page >= 0 && (page + 1) * kPageSize > g.key_lo && page * kPageSize < g.seq_len;
}

// Whether a block id read from a live entry names a block of the cache.
MUSE_HD bool block_id_is_valid(int32_t block_id, int64_t num_blocks) {
  return block_id >= 0 && static_cast<int64_t>(block_id) < num_blocks;
}

// The block of page p, or -1 when the entry is stale (not read) or names no block.
MUSE_HD int32_t lookup_block(const int32_t* block_table_row, const RequestGeometry& g, int page,
                             int64_t num_blocks) {
  if (!page_is_live(g, page)) return -1;
  const int32_t id = block_table_row[page];
  return block_id_is_valid(id, num_blocks) ? id : -1;
}

}  // namespace muse_attn

#endif  // MUSE_ATTN_PAGE_TABLE_H_
