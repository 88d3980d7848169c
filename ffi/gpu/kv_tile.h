// One 64-key tile of K and V in shared memory (LDS), and its staging from the paged cache.
//
// Layout: K [64 keys][D] and V [64 keys][D], bf16 rows of D * 2 bytes, cut in 16-byte chunks
// that are XOR-swizzled by the key (chunk c of key k sits at c ^ (k % 8)), so that the matrix
// loads of 8 keys at one column hit 8 different bank groups.
//
// Staging (stage_tile()): the cache holds, for each block and KV head, 16 key slots of [K | V]
// (2 * D bf16), 4 KiB contiguous at D = 64; a tile is 4 pages, whose block ids the caller has
// loaded a tile earlier (load_tile_pages()). Each thread copies 16-byte chunks, consecutive
// threads consecutive chunks of a page (coalesced). A key slot is copied
// only when its page is live, its block id valid and the key inside [key_lo, seq_len)
// (page_table.h); otherwise the chunk is zero-filled without reading the source, and
// key_ok[key] = 0 tells the mask to drop the key.
#ifndef MUSE_ATTN_GPU_KV_TILE_H_
#define MUSE_ATTN_GPU_KV_TILE_H_

#include <cstdint>

#include "gpu/vendor.h"
#include "muse_attn/geometry.h"
#include "muse_attn/page_table.h"

namespace muse_attn::gpu {

template <int D>
struct KvTile {
  static constexpr int kRowBytes = D * 2;
  static constexpr int kChunksPerRow = kRowBytes / 16;  // 8 (D = 64) or 16 (D = 128)
  static constexpr int kBytes = 2 * kTileKeys * kRowBytes + kTileKeys;  // K, V, key_ok

  char* base;  // kBytes of shared memory

  __device__ static int offset(int key, int d) {
    const int chunk = (d >> 3) ^ (key & 7);
    return key * kRowBytes + chunk * 16 + (d & 7) * 2;
  }
  __device__ const char* k_at(int key, int d) const { return base + offset(key, d); }
  __device__ const char* v_at(int key, int d) const {
    return base + kTileKeys * kRowBytes + offset(key, d);
  }
  __device__ char* key_ok() const { return base + 2 * kTileKeys * kRowBytes; }
};

// Everything stage() needs to find the keys of one (request, KV head) group.
struct KvSource {
  const uint16_t* kv;         // the cache, [num_blocks, Hkv, 16, 2D]
  const int32_t* table_row;   // block_table[r]
  int64_t num_blocks;
  int num_kv_heads;
  int kv_head;
};

// The cache blocks of one tile's 4 pages: -1 where the page is stale (its entry is not read)
// or its id names no block. Loaded a tile ahead of its copies (load_tile_pages), so that the
// copies never wait on a block-table read.
struct TilePages {
  int32_t block[kPagesPerTile];
};

__device__ __forceinline__ TilePages load_tile_pages(const KvSource& src, const RequestGeometry& g,
                                                     int tile) {
  TilePages tp;
#pragma unroll
  for (int i = 0; i < kPagesPerTile; ++i)
    tp.block[i] = lookup_block(src.table_row, g, tile * kPagesPerTile + i, src.num_blocks);
  return tp;
}

// Issues the copies of tile `tile` into `dst` (asynchronous on NVIDIA: commit + wait later).
template <int D, int kThreads>
__device__ __forceinline__ void stage_tile(const KvTile<D>& dst, const KvSource& src,
                                           const RequestGeometry& g, int tile,
                                           const TilePages& pages, int tid) {
  constexpr int kChunksPerKey = 2 * KvTile<D>::kChunksPerRow;  // K and V chunks of a slot
  constexpr int kChunks = kTileKeys * kChunksPerKey;
  constexpr int kKeysPerPass = kThreads / kChunksPerKey;
  static_assert(kChunks % kThreads == 0 && kThreads % kChunksPerKey == 0,
                "the tile's chunks must spread evenly over threads");
  static_assert(kPageSize % kKeysPerPass == 0, "a pass must stay inside one page");
  const int chunk = tid % kChunksPerKey;  // < D/8: K, else V
  const bool is_v = chunk >= KvTile<D>::kChunksPerRow;
  const int c = is_v ? chunk - KvTile<D>::kChunksPerRow : chunk;
  char* const half = dst.base + (is_v ? kTileKeys * KvTile<D>::kRowBytes : 0);
#pragma unroll
  for (int j = 0; j < kChunks / kThreads; ++j) {
    const int key_in_tile = tid / kChunksPerKey + j * kKeysPerPass;
    const int page = (j * kKeysPerPass) / kPageSize;  // compile-time after unrolling
    const int key = tile * kTileKeys + key_in_tile;
    const int32_t block = pages.block[page];
    const bool present = block >= 0 && key >= g.key_lo && key < g.seq_len;
    const uint16_t* slot =
        src.kv + ((static_cast<int64_t>(block < 0 ? 0 : block) * src.num_kv_heads + src.kv_head) *
                      kPageSize + key % kPageSize) * (2 * D);
    copy16(half + KvTile<D>::offset(key_in_tile, 8 * c), slot + chunk * 8, present);
    if (chunk == 0) dst.key_ok()[key_in_tile] = present;
  }
}

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_KV_TILE_H_
