// The split geometry of verify attention: which keys a request's query tokens may see, how that
// key range is cut into 64-key tiles, and how the tiles are dealt out to the segments (CTAs) of
// a (request, KV head) group. The CPU handler and the GPU kernels both call these functions, so
// the bounds that decide what memory is read are written once.
//
// Keys of request r: [0, seq_len). Its NQ new tokens sit at the end: token t has position
// qpos = seq_len - NQ + t and sees keys lo(t) <= k <= qpos, where lo(t) = 0 for full attention
// and max(0, qpos - window + 1) for a sliding window. The union over the tokens is
// [key_lo, seq_len) with key_lo = lo(0); nothing outside it is ever read.
#ifndef MUSE_ATTN_GEOMETRY_H_
#define MUSE_ATTN_GEOMETRY_H_

#include <cstdint>

#include "muse_attn/fast_div.h"
#include "muse_attn/host_device.h"

namespace muse_attn {

inline constexpr int kPageSize = 16;                        // keys a KV-cache block (page)
inline constexpr int kTileKeys = 64;                        // keys a tile
inline constexpr int kPagesPerTile = kTileKeys / kPageSize;  // 4
// A segment gets at least this many tiles when the request has them. 1: the split count alone
// decides (gpu/launch_plan.h default_num_splits keeps segments at 2 tiles or more unless the
// call's split CTAs are few: a segment's partial state, 64 rows x D (o bf16, partials.h), costs
// half the bytes of a tile of K and V to write and merge again).
inline constexpr int kMinTilesPerSegment = 1;

MUSE_HD int min_i(int a, int b) { return a < b ? a : b; }
MUSE_HD int max_i(int a, int b) { return a > b ? a : b; }
MUSE_HD int ceil_div(int a, int b) { return (a + b - 1) / b; }
MUSE_HD int ceil_div(int a, const FastDiv& b) { return (a + b.divisor() - 1) / b; }

// Requests that are real (the rest are padding: nothing of theirs is read). num_reqs_static: the
// count when it was known at trace time (>= 0; then *num_reqs is not read), else -1 and the
// count is read from device memory and clamped to [0, num_requests].
MUSE_HD int real_requests(int num_reqs_static, const int32_t* num_reqs, int num_requests) {
  if (num_reqs_static >= 0) return min_i(num_reqs_static, num_requests);
  return min_i(max_i(*num_reqs, 0), num_requests);
}

// The key range of one request and its cut into segments of whole tiles.
struct RequestGeometry {
  int seq_len;            // keys of the request, clamped to [0, capacity]; 0 for padding
  int ctx;                // seq_len - num_tokens: keys before the first new token (may be < 0)
  int key_lo;             // first key any token sees (the window of token 0), >= 0
  int tile_lo;            // first tile: key_lo / 64
  int tile_hi;            // one past the last tile: ceil(seq_len / 64)
  int tiles_per_segment;  // >= kMinTilesPerSegment
  int num_segments;       // segments that hold at least one tile, <= num_splits (own cut)
  int pool_first;         // balanced cut: the pool slot of segment 0; -1: the group's own cut
};

// raw_seq_len: seq_lens[r] as found in device memory (any int32). capacity: 16 * (block-table
// width), the most keys a block-table row can address. window: 0 for full attention, else the
// sliding window (>= 1). num_splits: segments a group is cut into at most (>= 1; an int, or a
// FastDiv on the GPU). A padding request (r >= num_reqs) is passed raw_seq_len = 0.
template <typename Splits>
MUSE_HD RequestGeometry request_geometry(int raw_seq_len, int capacity, int num_tokens,
                                         int window, Splits num_splits) {
  RequestGeometry g;
  g.seq_len = min_i(max_i(raw_seq_len, 0), capacity);
  g.ctx = g.seq_len - num_tokens;
  g.key_lo = window > 0 ? max_i(g.ctx - window + 1, 0) : 0;
  g.tile_lo = g.key_lo / kTileKeys;
  g.tile_hi = ceil_div(g.seq_len, kTileKeys);
  const int num_tiles = max_i(g.tile_hi - g.tile_lo, 0);
  g.tiles_per_segment = max_i(ceil_div(num_tiles, num_splits), kMinTilesPerSegment);
  g.num_segments = ceil_div(num_tiles, g.tiles_per_segment);
  g.pool_first = -1;
  return g;
}

// Tiles of the request's key range.
MUSE_HD int request_tiles(const RequestGeometry& g) { return max_i(g.tile_hi - g.tile_lo, 0); }

// Tiles [*t0, *t1) of segment seg; empty (t0 >= t1) for a segment past num_segments.
MUSE_HD void segment_tiles(const RequestGeometry& g, int seg, int* t0, int* t1) {
  *t0 = g.tile_lo + seg * g.tiles_per_segment;
  *t1 = min_i(*t0 + g.tiles_per_segment, g.tile_hi);
}

// ---- The balanced cut (the launch plan's balance_segments).
// The split grid has num_splits segment slots a request: slots = R * num_splits a KV head. The
// group's own cut (above) gives every request num_splits segments of its own length, so in a
// ragged batch the longest request's few CTAs run long after the rest. The balanced cut gives
// the whole batch one segment length, the shortest whose segments fit the slots, and request r
// takes ceil(tiles_r / length) consecutive slots after the earlier requests'. It is never longer
// than the own cut's longest segment (at that length every request fits its num_splits slots),
// and a batch of equal lengths gets the own cut's segments. Every CTA and merge works the cut
// out from seq_lens alike (no host step, no buffer), so the launch stays static.

inline constexpr int kPoolMinTiles = 2;  // a segment's partials cost half a tile's bytes

// Segments of a request of `tiles` tiles at segment length len.
MUSE_HD int pool_segments(int tiles, int len) { return tiles > 0 ? (tiles + len - 1) / len : 0; }

// The shortest length in [lo, hi] for which fits(length) holds, by bisection (fits is monotone
// and holds at hi): lo from the batch's tiles over the slots, hi the own cut's longest segment.
template <typename Fits>
MUSE_HD int pool_length(int64_t tiles, int max_tiles, int64_t slots, int splits, Fits&& fits) {
  const int64_t even = (tiles + slots - 1) / slots;
  int lo = static_cast<int>(even > kPoolMinTiles ? even : kPoolMinTiles);
  int hi = max_i(lo, ceil_div(max_tiles, splits));
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (fits(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// The request's geometry under the balanced cut: segments of len tiles from pool slot first.
MUSE_HD void cut_from_pool(RequestGeometry* g, int len, int first) {
  g->tiles_per_segment = len;
  g->num_segments = pool_segments(request_tiles(*g), len);
  g->pool_first = first;
}

// Position of new token t (may be negative when seq_len < num_tokens: such a token sees nothing).
MUSE_HD int token_position(const RequestGeometry& g, int token) { return g.ctx + token; }

}  // namespace muse_attn

#endif  // MUSE_ATTN_GEOMETRY_H_
