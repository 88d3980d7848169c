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

#include "gpu/amd_ops.h"
#include "gpu/vendor.h"
#include "muse_attn/fp8.h"
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
#if defined(MUSE_ATTN_HIP)
  // AMD: every pass's load in flight before the first is written (copy16 waits for each).
  amd::u32x4 v[Rows / kRowsPerPass];
#pragma unroll
  for (int pass = 0; pass < Rows / kRowsPerPass; ++pass) {
    const int r = row0 + pass * kRowsPerPass;
    v[pass] = amd::u32x4{0u, 0u, 0u, 0u};
    if (r < rows) v[pass] = __builtin_nontemporal_load(reinterpret_cast<const amd::u32x4*>(q + row_offset(r) + 8 * chunk));
  }
#pragma unroll
  for (int pass = 0; pass < Rows / kRowsPerPass; ++pass)
    lds_write(dst.base + KvTile<D>::offset(row0 + pass * kRowsPerPass, 8 * chunk), v[pass]);
#else
#pragma unroll
  for (int pass = 0; pass < Rows / kRowsPerPass; ++pass) {  // a constant trip count: unrolled
    const int r = row0 + pass * kRowsPerPass;
    const bool ok = r < rows;
    copy16(dst.base + KvTile<D>::offset(r, 8 * chunk), q + row_offset(ok ? r : 0) + 8 * chunk, ok);
  }
#endif
}

// Where the keys of one (request, KV head) group live (kElemBytes: 2 for bf16, 1 for FP8). A
// page's address is one 32 x 32 -> 64-bit multiply-add (page_bytes): the block id is a valid id
// (< 2^31) and the stride between blocks, Hkv x 2 KiB x D / 64, fits 32 bits because Hkv <=
// kMaxGroups (the handler checks it).
template <int D, int kElemBytes = 2>
struct KvSource {
  static constexpr int kPageBytes = kPageSize * 2 * D * kElemBytes;  // a head's page: 16 [K | V]
  using Elem = std::conditional_t<kElemBytes == 2, uint16_t, uint8_t>;  // (its alignment shapes the code)
  const char* head_base;      // kv + kv_head * kPageBytes: block b's page is head_base + b * stride
  uint32_t block_stride;      // bytes between blocks: Hkv * kPageBytes
  const int32_t* table_row;   // block_table[r]
  LivePages live;             // which entries may be read, which ids are valid

  __device__ KvSource(const Elem* kv, int num_kv_heads, int kv_head, const int32_t* row,
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

template <int D, int E>
__device__ __forceinline__ TileEntries load_tile_entries(const KvSource<D, E>& src, int tile) {
  TileEntries e;
#pragma unroll
  for (int i = 0; i < kPagesPerTile; ++i) {
#if defined(MUSE_ATTN_HIP)
    // Scalar loads (amd_ops.h): the ids wait in SGPRs, not in a vector load's wait.
    const int page = tile * kPagesPerTile + i;
    e.raw[i] = src.live.is_live(page) ? amd::load_invariant(src.table_row + page) : -1;
#else
    e.raw[i] = src.live.entry(src.table_row, tile * kPagesPerTile + i);
#endif
  }
  return e;
}

template <int D, int E>
__device__ __forceinline__ TilePages resolve(const KvSource<D, E>& src, const TileEntries& e) {
  TilePages tp;
#pragma unroll
  for (int i = 0; i < kPagesPerTile; ++i) tp.block[i] = src.live.block_of(e.raw[i]);
  return tp;
}

// The 16-byte chunks thread tid moves of tile `tile`: f(i, half, at, src, present) for its i-th
// chunk (i < kTileChunks<D, kThreads>), half + at its place in a KvTile (K or V half, the place
// in it), src its bytes in the cache (AMD: f(i, half, at, page, offset, present), src as its
// page's start, the same on every thread, and the offset in it, for a buffer load). Thread tid
// always moves the same 16-byte chunk (K or V, column c) of keys key0 + j * kKeysPerPass, so
// its offsets inside a page and in the tile do not depend on the tile. A chunk
// is present (may be read) only when its page names a block and its key lies in [key_lo,
// seq_len), and is not in `unread` (bit k: key k of the tile is a draft slot no row of a tree
// sees, mask.h); otherwise it is zero-filled and its source is not touched.
template <int D, int kThreads>
inline constexpr int kTileChunks = kTileKeys * 2 * KvTile<D>::kChunksPerRow / kThreads;

template <int D, int kThreads, bool kInteriorPath, typename F>
__device__ __forceinline__ void for_each_tile_chunk(const KvSource<D>& src, const RequestGeometry& g,
                                                    int tile, const TilePages& pages, int tid,
                                                    uint64_t unread, F f) {
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
  // Whether key `key` (key0 + rel) is unread (a tree's unseen draft slots). NVIDIA shifts the word
  // by key0 once and tests a constant bit a chunk: a shift by each chunk's key compiled to a branch
  // around every copy of a tree's tiles.
  [[maybe_unused]] const uint64_t unread_from_key0 = unread >> key0;
  const auto is_unread = [&]([[maybe_unused]] int key, [[maybe_unused]] int rel) {
#if defined(MUSE_ATTN_HIP)
    return ((unread >> key) & 1u) != 0;
#else
    return ((unread_from_key0 >> rel) & 1u) != 0;
#endif
  };
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
      [[maybe_unused]] const char* page_start = src.page_bytes(block < 0 ? 0 : block, base);
#pragma unroll
      for (int jj = 0; jj < kPassesPerPage; ++jj) {
        const int key = page * kPageSize + key0 + jj * kKeysPerPass;  // key in the tile
        const bool present = block >= 0 && (!kBounded || (key >= lo && key < hi &&
                                                           !is_unread(key, page * kPageSize + jj * kKeysPerPass)));
#if defined(MUSE_ATTN_HIP)
        f(page * kPassesPerPage + jj, half, KvTile<D>::offset(key, col),
          src.page_bytes(block < 0 ? 0 : block, src.head_base),
          static_cast<int>(base - src.head_base) + jj * kKeysPerPass * (2 * D) * 2, present);
#else
        f(page * kPassesPerPage + jj, half, KvTile<D>::offset(key, col),
          page_start + jj * kKeysPerPass * (2 * D) * 2, present);
#endif
      }
    }
  };
  if (kInteriorPath && lo <= 0 && hi >= kTileKeys && unread == 0) {
    copies(std::false_type{});
  } else {
    copies(std::true_type{});
  }
}

// Issues the copies of tile `tile` into `dst` (asynchronous on NVIDIA: commit + wait later).
template <int D, int kThreads, bool kInteriorPath>
__device__ __forceinline__ void stage_tile(const KvTile<D>& dst, const KvSource<D>& src,
                                           const RequestGeometry& g, int tile,
                                           const TilePages& pages, int tid, uint64_t unread = 0) {
  for_each_tile_chunk<D, kThreads, kInteriorPath>(
      src, g, tile, pages, tid, unread,
#if defined(MUSE_ATTN_HIP)
      [&](int, int half, int at, const char* page, int offset, bool present) {
        copy16(dst.base + half + at, page + offset, present);
      });
#else
      [&](int, int half, int at, const char* from, bool present) { copy16(dst.base + half + at, from, present); });
#endif
}

#if defined(MUSE_ATTN_HIP)
// AMD's copies go through registers: a tile loaded into them (load_tile_regs) is in flight
// during the previous tile's math and written to LDS (store_tile_regs) after it, so a workgroup
// overlaps its loads with its math. A thread's chunks of one tile: 16 VGPRs at D = 64. Each is a
// buffer load over its page (amd_ops.h buffer_load16): an absent chunk's offset is out of the
// page's range, so it is zeros without a branch or a read.
template <int D, int kThreads>
struct TileRegs {
  amd::u32x4 chunk[kTileChunks<D, kThreads>];
};

// kPolicy: nontemporal everywhere today. The gfx950 design this follows reads a window's keys
// cached (the next step rereads them); a choice by the window at run time would double the loop's
// load code, so it waits for a kernel variant of its own and a measurement.
template <int D, int kThreads, bool kInteriorPath, amd::CachePolicy kPolicy>
__device__ __forceinline__ void load_tile_regs(TileRegs<D, kThreads>& regs, const KvSource<D>& src,
                                               const RequestGeometry& g, int tile,
                                               const TilePages& pages, int tid, uint64_t unread) {
  for_each_tile_chunk<D, kThreads, kInteriorPath>(
      src, g, tile, pages, tid, unread,
      [&](int i, int, int, const char* page, int offset, bool present) {
        regs.chunk[i] = amd::buffer_load16<kPolicy>(
            page, KvSource<D>::kPageBytes, present ? static_cast<uint32_t>(offset) : amd::kOutOfRange);
      });
}

// The chunks' places in a tile depend on the thread alone (for_each_tile_chunk).
template <int D, int kThreads>
__device__ __forceinline__ void store_tile_regs(const KvTile<D>& dst, const TileRegs<D, kThreads>& regs,
                                                const KvSource<D>& src, const RequestGeometry& g,
                                                int tid) {
  const TilePages none{{-1, -1, -1, -1}};
  for_each_tile_chunk<D, kThreads, false>(src, g, 0, none, tid, 0,
                                          [&](int i, int half, int at, const char*, int, bool) {
                                            lds_write(dst.base + half + at, regs.chunk[i]);
                                          });
}
#endif

// ---- FP8 cache (muse_attn/fp8.h) ------------------------------------------------------------
// A tile is dequantized into the bf16 KvTile above (K = bf16(fp32(scale * decode(k8)))), and the
// split kernel runs on from there as for a bf16 cache. Two ways to get there:
//   staged (NVIDIA: the copies are asynchronous): the FP8 bytes and per-token scales are copied
//     into an Fp8Stage (stage_fp8_tile), and once they have landed convert_fp8_tile writes the
//     bf16 tile;
//   direct (AMD: the copies go through registers anyway): the FP8 bytes and scales loaded into
//     registers (load_fp8_tile_regs), then converted into the bf16 tile (store_fp8_tile_regs),
//     no FP8 stage; stage_fp8_tile_direct does both at once.
// Either way a key that is not present (its page names no block, or it lies outside [key_lo,
// seq_len)) becomes zeros, its bytes and its scale unread, as for a bf16 cache.

// What a tile's dequantization needs besides its bytes. A present key's scale is read from
// memory either way (per tensor: the one value, every time), so that the same copies and loads
// serve both kinds.
struct Fp8Scales {
  const float* k;  // [] (per tensor) or [num_blocks, Hkv, 16] (per token)
  const float* v;
  bool per_token;
  bool fnuz;       // e4m3fnuz (gfx942) rather than e4m3fn
  int num_kv_heads, kv_head;
  // Where the scale of the key in slot `slot` of block `block` (>= 0) is.
  __device__ const float* at(bool v, int32_t block, int slot) const {
    const float* base = v ? this->v : k;
    return per_token ? base + (static_cast<int64_t>(block) * num_kv_heads + kv_head) * kPageSize + slot
                     : base;
  }
};

// One tile of the FP8 cache as copied (staged form): [64 keys][K | V] bytes, then the 64 keys'
// K scales and V scales.
template <int D>
struct Fp8Stage {
  static constexpr int kRowBytes = 2 * D;
  static constexpr int kBytes = kTileKeys * kRowBytes + 2 * kTileKeys * 4;

  char* base;

  __device__ char* row(int key) const { return base + key * kRowBytes; }
  __device__ char* scale(bool v, int key) const {
    return base + kTileKeys * kRowBytes + 4 * (v ? kTileKeys + key : key);
  }
};

// The tile's keys in [lo, hi) of pages with a block, and not unread (stage_tile), are present.
struct TileKeys {
  int lo, hi;
  unsigned pages;   // TilePages::present_mask()
  uint64_t unread;  // draft slots no row sees (mask.h tile_unread_keys)
  __device__ bool present(int key) const {
    return ((pages >> (key / kPageSize)) & 1u) != 0 && key >= lo && key < hi &&
           ((unread >> key) & 1u) == 0;
  }
};
__device__ __forceinline__ TileKeys tile_keys(const RequestGeometry& g, int tile, unsigned pages,
                                              uint64_t unread = 0) {
  return TileKeys{g.key_lo - tile * kTileKeys, g.seq_len - tile * kTileKeys, pages, unread};
}

// 16 FP8 values (4 words) -> 16 bf16 (8 words), as the rule says; zeros where !present. AMD
// decodes its own format with the conversion instruction (exact) and rounds a pair at a time
// (v_cvt_pk_bf16_f32 on gfx950): the same bits, but for a NaN's payload (a NaN stays a NaN).
__device__ __forceinline__ void fp8x16_to_bf16(const uint32_t (&in)[4], float scale, bool fnuz,
                                               bool present, uint32_t (&out)[8]) {
#if defined(MUSE_ATTN_HIP)
  if (fnuz == amd::kNativeFp8IsFnuz) {
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      const amd::F32Pair f = w % 2 ? amd::cvt_pk_f32_fp8<true>(in[w / 2]) : amd::cvt_pk_f32_fp8<false>(in[w / 2]);
#if defined(__gfx950__)
      const uint32_t pair = amd::cvt_pk_bf16_f32(scale * f.lo, scale * f.hi);
#else
      const uint32_t pair = fp8_round_bf16(scale * f.lo) | (fp8_round_bf16(scale * f.hi) << 16);
#endif
      out[w] = present ? pair : 0u;
    }
    return;
  }
#endif
#pragma unroll
  for (int w = 0; w < 8; ++w) {
    const uint32_t lo = in[w / 2] >> (16 * (w % 2)) & 0xFFu, hi = in[w / 2] >> (16 * (w % 2) + 8) & 0xFFu;
    const uint32_t pair = fp8_dequantize_bf16(lo, scale, fnuz) | (fp8_dequantize_bf16(hi, scale, fnuz) << 16);
    out[w] = present ? pair : 0u;
  }
}

// NVIDIA sm_89+: the same for e4m3fn by the hardware conversion (exact: every e4m3fn value is an
// f16), then the rule's fp32 product and bf16 rounding: 3 instructions a value where the
// bit-level decode takes ~25. (e4m3fnuz has no such conversion there.)
#if defined(MUSE_ATTN_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define MUSE_ATTN_FP8_CVT 1
__device__ __forceinline__ void e4m3fn_x16_to_bf16(const uint32_t (&in)[4], float scale, bool present,
                                                   uint32_t (&out)[8]) {
#pragma unroll
  for (int w = 0; w < 8; ++w) {
    const uint16_t two = static_cast<uint16_t>(in[w / 2] >> (16 * (w % 2)));
    uint32_t h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(two));  // low byte -> low half
    float lo, hi;
    asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"(static_cast<uint16_t>(h2)));
    asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"(static_cast<uint16_t>(h2 >> 16)));
    out[w] = present ? pack_bf16x2(scale * lo, scale * hi) : 0u;
  }
}
#endif

// The thread's chunks of an FP8 tile: chunk ci (16 bytes: a slot's K or V at columns
// 16 * part ..) of key ci / kChunksPerKey, ci = tid + j * kThreads.
template <int D, int kThreads>
struct Fp8Chunks {
  static constexpr int kChunksPerKey = 2 * D / 16;  // K then V
  static constexpr int kPerThread = kTileKeys * kChunksPerKey / kThreads;
  static_assert(kTileKeys * kChunksPerKey % kThreads == 0, "whole chunks a thread");
  __device__ static int key(int tid, int j) { return (tid + j * kThreads) / kChunksPerKey; }
  __device__ static int part(int tid, int j) { return (tid + j * kThreads) % kChunksPerKey; }
};

// Writes 16 dequantized values (a chunk of key's K or V from column d0) into the bf16 tile.
template <int D>
__device__ __forceinline__ void write_bf16_chunk(const KvTile<D>& dst, int key, bool v, int d0,
                                                 const uint32_t (&w)[8]) {
  const int half = v ? kTileKeys * KvTile<D>::kRowBytes : 0;
  lds_write(dst.base + half + KvTile<D>::offset(key, d0), make_uint4(w[0], w[1], w[2], w[3]));
  lds_write(dst.base + half + KvTile<D>::offset(key, d0 + 8), make_uint4(w[4], w[5], w[6], w[7]));
}

// Page `page`'s block of the tile (a select chain: an indexed register array would go to
// scratch memory).
__device__ __forceinline__ int32_t block_of_page(const TilePages& pages, int page) {
  int32_t block = pages.block[0];
#pragma unroll
  for (int i = 1; i < kPagesPerTile; ++i) block = page == i ? pages.block[i] : block;
  return block;
}

// Staged form: issues the copies of tile `tile`'s FP8 bytes and (per token) scales into `dst`.
// A chunk or scale is read only where its key is present; the rest is zero-filled.
template <int D, int kThreads>
__device__ __forceinline__ void stage_fp8_tile(const Fp8Stage<D>& dst, const KvSource<D, 1>& src,
                                               const Fp8Scales& sc, const RequestGeometry& g,
                                               int tile, const TilePages& pages, int tid,
                                               uint64_t unread = 0) {
  using C = Fp8Chunks<D, kThreads>;
  const TileKeys keys = tile_keys(g, tile, pages.present_mask(), unread);
  constexpr int kKeyStep = kThreads / C::kChunksPerKey;
  if constexpr (D == 64 && kKeyStep == kPageSize) {
    // A thread's chunks are one column part of keys key0 + j * kKeyStep (key0 < kKeyStep, a
    // page): chunk j lies in page j, at a fixed step in the stage.
    const unsigned t = static_cast<unsigned>(tid);
    const int key0 = static_cast<int>(t / C::kChunksPerKey), part = static_cast<int>(t % C::kChunksPerKey);
    char* const row0 = dst.row(key0) + 16 * part;
#pragma unroll
    for (int j = 0; j < C::kPerThread; ++j) {
      const int32_t block = pages.block[j];
      const char* slot = src.page_bytes(block < 0 ? 0 : block, src.head_base) + key0 * 2 * D;
      copy16(row0 + j * kKeyStep * Fp8Stage<D>::kRowBytes, slot + 16 * part, keys.present(key0 + j * kKeyStep));
    }
  } else {
#pragma unroll 1  // the math's registers are live across the staging
    for (int j = 0; j < C::kPerThread; ++j) {
      const int key = C::key(tid, j), part = C::part(tid, j);
      const int32_t block = block_of_page(pages, key / kPageSize);
      const char* slot = src.page_bytes(block < 0 ? 0 : block, src.head_base) + (key % kPageSize) * 2 * D;
      copy16(dst.row(key) + 16 * part, slot + 16 * part, keys.present(key));
    }
  }
  static_assert(kThreads >= 2 * kTileKeys, "a scale a thread");
  if (tid < 2 * kTileKeys) {
    const int key = tid % kTileKeys;
    const bool v = tid >= kTileKeys;
    const int32_t block = block_of_page(pages, key / kPageSize);
    copy4(dst.scale(v, key), sc.at(v, block < 0 ? 0 : block, key % kPageSize), keys.present(key));
  }
}

// Staged form: the landed FP8 tile `raw` dequantized into the bf16 tile `dst` (every thread of
// the CTA; raw's copies waited for and a barrier passed before, a barrier after). At D = 64 a
// thread's chunks are one column part of keys key0, key0 + 16, ... (Fp8Chunks): their addresses
// a fixed step apart in both tiles (the swizzle's key % 8 is key0's), worked out once, and no key
// is tested (the staging zero-filled an absent key's bytes and scale, which decode to +0 as the
// rule has it). D = 128 works each chunk out and tests its key: at its 255 registers the tree
// kernel spills otherwise.
template <int D, int kThreads>
__device__ __forceinline__ void convert_fp8_tile(const KvTile<D>& dst, const Fp8Stage<D>& raw,
                                                 const Fp8Scales& sc, const RequestGeometry& g,
                                                 int tile, unsigned pages, int tid) {
  using C = Fp8Chunks<D, kThreads>;
  constexpr int kKeyStep = kThreads / C::kChunksPerKey;
  static_assert(kThreads % C::kChunksPerKey == 0 && kKeyStep % 8 == 0, "chunks a fixed step apart");
  const unsigned t = static_cast<unsigned>(tid);
  const int key0 = static_cast<int>(t / C::kChunksPerKey), part0 = static_cast<int>(t % C::kChunksPerKey);
  const TileKeys keys = tile_keys(g, tile, pages);
  // Two chunks at a time (the math's registers are live across the conversion), one loop a format.
  auto convert = [&](auto dequantize) {
#pragma unroll 2
    for (int j = 0; j < C::kPerThread; ++j) {
      const int key = D == 64 ? key0 + j * kKeyStep : C::key(tid, j);
      const int part = D == 64 ? part0 : C::part(tid, j);
      const bool v = part >= D / 16;
      const uint4 bytes = lds_read<uint4>(raw.row(key) + 16 * part);
      const uint32_t in[4] = {bytes.x, bytes.y, bytes.z, bytes.w};
      uint32_t out[8];
      dequantize(in, lds_read<float>(raw.scale(v, key)), D == 64 || keys.present(key), out);
      write_bf16_chunk(dst, key, v, 16 * (part % (D / 16)), out);
    }
  };
#if defined(MUSE_ATTN_FP8_CVT)
  if (!sc.fnuz) {
    convert([](const uint32_t(&in)[4], float s, bool present, uint32_t(&out)[8]) {
      e4m3fn_x16_to_bf16(in, s, present, out);
    });
    return;
  }
#endif
  convert([fnuz = sc.fnuz](const uint32_t(&in)[4], float s, bool present, uint32_t(&out)[8]) {
    fp8x16_to_bf16(in, s, fnuz, present, out);
  });
}

#if defined(MUSE_ATTN_HIP)
// AMD: the direct form in two steps, as TileRegs for bf16: a tile's FP8 bytes and scales loaded
// into registers a tile ahead (load_fp8_tile_regs, in flight during the previous tile's math),
// dequantized and written to the bf16 tile after it (store_fp8_tile_regs). A thread's chunks:
// 4 VGPRs and a scale each (2 chunks at D = 64). The bytes by buffer loads over their page (an
// absent chunk's offset out of range: zeros, no read); a scale only where its key is present.
template <int D, int kThreads>
struct Fp8TileRegs {
  static constexpr int kChunks = Fp8Chunks<D, kThreads>::kPerThread;
  amd::u32x4 bytes[kChunks];
  float scale[kChunks];
  unsigned present;  // bit j: chunk j's key is present
};

template <int D, int kThreads, amd::CachePolicy kPolicy>
__device__ __forceinline__ void load_fp8_tile_regs(Fp8TileRegs<D, kThreads>& regs,
                                                   const KvSource<D, 1>& src, const Fp8Scales& sc,
                                                   const RequestGeometry& g, int tile,
                                                   const TilePages& pages, int tid, uint64_t unread) {
  using C = Fp8Chunks<D, kThreads>;
  const TileKeys keys = tile_keys(g, tile, pages.present_mask(), unread);
  regs.present = 0;
#pragma unroll
  for (int j = 0; j < C::kPerThread; ++j) {
    const int key = C::key(tid, j), part = C::part(tid, j);
    const bool v = part >= D / 16, present = keys.present(key);
    const int32_t block = block_of_page(pages, key / kPageSize);
    const int offset = (key % kPageSize) * 2 * D + 16 * part;
    regs.bytes[j] = amd::buffer_load16<kPolicy>(
        src.page_bytes(block < 0 ? 0 : block, src.head_base), KvSource<D, 1>::kPageBytes,
        present ? static_cast<uint32_t>(offset) : amd::kOutOfRange);
    regs.scale[j] = present ? *sc.at(v, block, key % kPageSize) : 0.0f;
    regs.present |= static_cast<unsigned>(present) << j;
  }
}

template <int D, int kThreads>
__device__ __forceinline__ void store_fp8_tile_regs(const KvTile<D>& dst,
                                                    const Fp8TileRegs<D, kThreads>& regs, bool fnuz,
                                                    int tid) {
  using C = Fp8Chunks<D, kThreads>;
#pragma unroll
  for (int j = 0; j < C::kPerThread; ++j) {
    const int key = C::key(tid, j), part = C::part(tid, j);
    const uint32_t in[4] = {regs.bytes[j][0], regs.bytes[j][1], regs.bytes[j][2], regs.bytes[j][3]};
    uint32_t out[8];
    fp8x16_to_bf16(in, regs.scale[j], fnuz, ((regs.present >> j) & 1u) != 0, out);
    write_bf16_chunk(dst, key, part >= D / 16, 16 * (part % (D / 16)), out);
  }
}

// Direct form: tile `tile`'s FP8 bytes loaded, dequantized and written into the bf16 tile `dst`
// in one step (split_cta.h's stage() for a direct FP8 cache; the prologue and the loop take the
// two steps, their loads in flight together).
template <int D, int kThreads>
__device__ __forceinline__ void stage_fp8_tile_direct(const KvTile<D>& dst, const KvSource<D, 1>& src,
                                                      const Fp8Scales& sc, const RequestGeometry& g,
                                                      int tile, const TilePages& pages, int tid,
                                                      uint64_t unread = 0) {
  Fp8TileRegs<D, kThreads> regs;
  load_fp8_tile_regs<D, kThreads, amd::CachePolicy::kNonTemporal>(regs, src, sc, g, tile, pages, tid,
                                                                  unread);
  store_fp8_tile_regs<D, kThreads>(dst, regs, sc.fnuz, tid);
}
#endif

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_KV_TILE_H_
