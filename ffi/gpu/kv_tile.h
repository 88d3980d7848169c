// One 64-key tile of K and V in shared memory (LDS), and its staging from the paged cache; the
// CTA's query rows (QTile) are staged the same way.
//
// Layout: K [64 keys][D] and V [64 keys][D], bf16 rows of D * 2 bytes, cut in 16-byte chunks
// that are XOR-swizzled by the key (chunk c of key k sits at c ^ (k % 8)), so that the matrix
// loads of 8 keys at one column hit 8 different bank groups.
//
// Staging (stage_tile()): the cache holds, for each block and KV head, 16 key slots of [K | V]
// (2 * D bf16), 4 KiB contiguous at D = 64; a tile is 4 pages, whose block ids the caller has
// loaded a tile earlier (load_tile_entries(), checked by resolve()). Each thread copies 16-byte
// chunks, consecutive threads consecutive chunks of a page (coalesced). A key slot is copied only
// when its page is live, its block id valid and the key inside [key_lo, seq_len) (page_table.h);
// otherwise the chunk is zero-filled without reading the source. The kernel masks keys of absent
// pages from TilePages::present_mask() (keys outside [key_lo, seq_len) are never visible to any
// row).
#ifndef MUSE_ATTN_GPU_KV_TILE_H_
#define MUSE_ATTN_GPU_KV_TILE_H_

#include <cstdint>
#include <type_traits>

#include "gpu/vendor.h"
#include "muse_attn/geometry.h"
#include "muse_attn/page_table.h"

namespace muse_attn::gpu {

template <int D>
struct KvTile {
  static constexpr int kRowBytes = D * 2;
  static constexpr int kChunksPerRow = kRowBytes / 16;  // 8 (D = 64) or 16 (D = 128)
  static constexpr int kBytes = 2 * kTileKeys * kRowBytes;  // K, then V

  char* base;  // kBytes of shared memory

  __device__ static int offset(int key, int d) {
    const int chunk = (d >> 3) ^ (key & 7);
    return key * kRowBytes + chunk * 16 + (d & 7) * 2;
  }
  __device__ const char* k_at(int key, int d) const { return base + offset(key, d); }
  __device__ const char* v_at(int key, int d) const {
    return base + kTileKeys * kRowBytes + offset(key, d);
  }
};

// The CTA's query rows (Rows x D bf16) in shared memory, swizzled as a KvTile half (chunk c of
// row r at c ^ (r % 8)). Staged once (stage_q_tile), in its own copy group ahead of the first
// K/V tile, so its loads are in flight from the kernel's start; the warps read their fragments
// from it once the first tile has landed.
template <int D, int Rows>
struct QTile {
  static constexpr int kBytes = Rows * D * 2;

  char* base;  // kBytes of shared memory

  __device__ const char* at(int row, int d) const { return base + KvTile<D>::offset(row, d); }
};

// Issues the copies of rows [0, rows) of a QTile; row r is D contiguous bf16 at q +
// row_offset(r). Rows past `rows` are zero-filled (their scores are 0 and never written) without
// reading the source.
template <int D, int Rows, int kThreads, typename RowOffset>
__device__ __forceinline__ void stage_q_tile(const QTile<D, Rows>& dst, const uint16_t* q, int rows,
                                             RowOffset row_offset, int tid) {
  constexpr int kChunks = D / 8;  // 16-byte chunks a row
  constexpr int kRowsPerPass = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && Rows % kRowsPerPass == 0, "whole rows a pass");
  const int chunk = tid % kChunks, row0 = tid / kChunks;  // tid < kThreads: row0 < kRowsPerPass
#pragma unroll
  for (int pass = 0; pass < Rows / kRowsPerPass; ++pass) {  // a constant trip count: unrolled
    const int r = row0 + pass * kRowsPerPass;
    const bool ok = r < rows;
    copy16(dst.base + KvTile<D>::offset(r, 8 * chunk), q + row_offset(ok ? r : 0) + 8 * chunk, ok);
  }
}

// Where the keys of one (request, KV head) group live. A page's address is one 32 x 32 -> 64-bit
// multiply-add (page_bytes): the block id is a valid id (< 2^31) and the stride between blocks,
// Hkv x 2 KiB x D / 64, fits 32 bits because Hkv <= kMaxGroups (the handler checks it).
template <int D>
struct KvSource {
  static constexpr int kPageBytes = kPageSize * 2 * D * 2;  // one head's page: 16 slots of [K | V]
  const char* head_base;      // kv + kv_head * kPageBytes: block b's page is head_base + b * stride
  uint32_t block_stride;      // bytes between blocks: Hkv * kPageBytes
  const int32_t* table_row;   // block_table[r]
  LivePages live;             // which entries may be read, which ids are valid

  __device__ KvSource(const uint16_t* kv, int num_kv_heads, int kv_head, const int32_t* row,
                      const RequestGeometry& g, int64_t num_blocks)
      : head_base(reinterpret_cast<const char*>(kv) + static_cast<int64_t>(kv_head) * kPageBytes),
        block_stride(static_cast<uint32_t>(num_kv_heads) * kPageBytes),
        table_row(row),
        live(LivePages::of(g, num_blocks)) {}

  // `base` (head_base or a byte address relative to it) moved to block `block` (>= 0).
  __device__ const char* page_bytes(int32_t block, const char* base) const {
    return base + static_cast<uint64_t>(static_cast<uint32_t>(block)) * block_stride;
  }
};

// The block-table entries of one tile's 4 pages as stored (-1 where the page is stale: its
// entry is not read). Loaded a tile ahead of the tile's copies (load_tile_entries) and checked
// against the cache only when the copies are issued (resolve), so that no warp waits for the
// block-table read before it needs the ids.
struct TileEntries {
  int32_t raw[kPagesPerTile];
};

// The cache blocks of one tile's 4 pages: -1 where the page is stale or its id names no block.
struct TilePages {
  int32_t block[kPagesPerTile];

  // Bit i set: page i of the tile names a block (its keys may be present).
  __device__ unsigned present_mask() const {
    unsigned m = 0;
#pragma unroll
    for (int i = 0; i < kPagesPerTile; ++i) m |= (block[i] >= 0 ? 1u : 0u) << i;
    return m;
  }
};

template <int D>
__device__ __forceinline__ TileEntries load_tile_entries(const KvSource<D>& src, int tile) {
  TileEntries e;
#pragma unroll
  for (int i = 0; i < kPagesPerTile; ++i) e.raw[i] = src.live.entry(src.table_row, tile * kPagesPerTile + i);
  return e;
}

template <int D>
__device__ __forceinline__ TilePages resolve(const KvSource<D>& src, const TileEntries& e) {
  TilePages tp;
#pragma unroll
  for (int i = 0; i < kPagesPerTile; ++i) tp.block[i] = src.live.block_of(e.raw[i]);
  return tp;
}

// Issues the copies of tile `tile` into `dst` (asynchronous on NVIDIA: commit + wait later).
// Thread tid always copies the same 16-byte chunk (K or V, column c) of keys key0 + j *
// kKeysPerPass, so its offsets inside a page and in the tile do not depend on the tile. A chunk
// is read only when its page names a block and its key lies in [key_lo, seq_len); otherwise it
// is zero-filled and its source is not touched.
template <int D, int kThreads, bool kInteriorPath>
__device__ __forceinline__ void stage_tile(const KvTile<D>& dst, const KvSource<D>& src,
                                           const RequestGeometry& g, int tile,
                                           const TilePages& pages, int tid) {
  constexpr int kChunksPerKey = 2 * KvTile<D>::kChunksPerRow;  // K and V chunks of a slot
  constexpr int kKeysPerPass = kThreads / kChunksPerKey;
  constexpr int kPassesPerPage = kPageSize / kKeysPerPass;
  static_assert(kTileKeys * kChunksPerKey % kThreads == 0 && kThreads % kChunksPerKey == 0,
                "the tile's chunks must spread evenly over threads");
  static_assert(kPageSize % kKeysPerPass == 0, "a pass must stay inside one page");
  const int chunk = tid % kChunksPerKey;  // < D/8: K, else V
  const bool is_v = chunk >= KvTile<D>::kChunksPerRow;
  const int col = 8 * (is_v ? chunk - KvTile<D>::kChunksPerRow : chunk);  // first d
  const int half = is_v ? kTileKeys * KvTile<D>::kRowBytes : 0;  // bytes to the K or V half
  const int key0 = tid / kChunksPerKey;  // the thread's key in the tile at pass 0
  // The thread's chunk of a page at pass 0, as a byte address relative to block 0's page.
  const char* const base = src.head_base + (key0 * (2 * D) + chunk * 8) * 2;
  const int lo = g.key_lo - tile * kTileKeys;   // keys of the tile in [lo, hi) are in range
  const int hi = g.seq_len - tile * kTileKeys;
  // A tile wholly inside [key_lo, seq_len) (every tile of a segment but its ends) takes a path
  // without the two key compares a chunk; the test is the same in every thread of the CTA.
  // kInteriorPath = false keeps one path: the two-tile kernel (both paths spill under its
  // 152-register cap) and the ping-pong kernel (both paths make it slower).
  const auto copies = [&](auto bounded) {  // std::true_type: the key compares; false_type: none
    constexpr bool kBounded = decltype(bounded)::value;
    // At D = 64 everything unrolled; at D = 128 (on NVIDIA) one page at a time, or a tile's
    // 16 addresses crowd out the registers. AMD unrolls all (its copies go through registers
    // one at a time anyway).
#if defined(MUSE_ATTN_HIP)
#pragma unroll
#else
#pragma unroll(D == 64 ? kPagesPerTile : 1)
#endif
    for (int page = 0; page < kPagesPerTile; ++page) {
      int32_t block = pages.block[0];
#pragma unroll
      for (int i = 1; i < kPagesPerTile; ++i) block = page == i ? pages.block[i] : block;
      const char* page_start = src.page_bytes(block < 0 ? 0 : block, base);
#pragma unroll
      for (int jj = 0; jj < kPassesPerPage; ++jj) {
        const int key = page * kPageSize + key0 + jj * kKeysPerPass;  // key in the tile
        const bool present = block >= 0 && (!kBounded || (key >= lo && key < hi));
        copy16(dst.base + half + KvTile<D>::offset(key, col),
               page_start + jj * kKeysPerPass * (2 * D) * 2, present);
      }
    }
  };
  if (kInteriorPath && lo <= 0 && hi >= kTileKeys) {
    copies(std::false_type{});
  } else {
    copies(std::true_type{});
  }
}

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_KV_TILE_H_
