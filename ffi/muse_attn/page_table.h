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

// The live pages of one request, [first, end): those holding a key of [key_lo, seq_len). Only
// their block-table entries may be read; computed once per request (or CTA).
struct LivePages {
  int first, end;
  uint32_t id_limit;  // min(num_blocks, 2^31): valid ids are [0, id_limit), as unsigned

  MUSE_HD static LivePages of(const RequestGeometry& g, int64_t num_blocks) {
    LivePages lp;
    lp.first = g.key_lo / kPageSize;
    lp.end = g.seq_len > g.key_lo ? ceil_div(g.seq_len, kPageSize) : lp.first;
    lp.id_limit = num_blocks < (int64_t{1} << 31) ? static_cast<uint32_t>(num_blocks > 0 ? num_blocks : 0)
                                                  : (uint32_t{1} << 31);
    return lp;
  }
  // Whether page p's block-table entry may be read at all.
  MUSE_HD bool is_live(int page) const {
    return static_cast<uint32_t>(page - first) < static_cast<uint32_t>(end - first);
  }
  // Whether a block id read from a live entry names a block of the cache (negative ids wrap to
  // >= 2^31 and fail too).
  MUSE_HD bool is_valid(int32_t block_id) const {
    return static_cast<uint32_t>(block_id) < id_limit;
  }
  // Page p's block-table entry as stored (any int32), or -1 when it is stale (then not read).
  MUSE_HD int32_t entry(const int32_t* block_table_row, int page) const {
    return is_live(page) ? block_table_row[page] : -1;
  }
  // The block an entry names, or -1 when it names none. Kept apart from entry() so that a GPU
  // kernel can load entries early and check them only where it uses them (no wait on the load).
  MUSE_HD int32_t block_of(int32_t entry_value) const {
    return is_valid(entry_value) ? entry_value : -1;
  }
  // The block of page p, or -1 when the entry is stale (not read) or names no block.
  MUSE_HD int32_t lookup(const int32_t* block_table_row, int page) const {
    return block_of(entry(block_table_row, page));
  }
};

}  // namespace muse_attn

#endif  // MUSE_ATTN_PAGE_TABLE_H_
