// The balanced cut on the GPU (muse_attn/geometry.h; the launch plan's balance_segments): one
// warp of each split and merge CTA reads every request's length, picks the batch's segment length
// and finds what its CTA needs (a split CTA: the request and segment of its pool slot; a merge
// CTA: its request's first slot), then hands it to the CTA through shared memory. No host step
// and no buffer: every CTA works out the same cut from the same operands. Its kernels are their
// own instantiations (split_kernel_balanced.cu.cc, merge_kernel_balanced), so the others keep
// their code (on AMD the default kernels' start keeps its few memory round trips:
// tools/amd_model.py). Not for an FP8 cache at D = 128 (NVIDIA's kernels sit at 254 of 255
// registers and spill with the cut).
#ifndef MUSE_ATTN_GPU_SEGMENT_POOL_H_
#define MUSE_ATTN_GPU_SEGMENT_POOL_H_

#include <cstdint>

#include "gpu/kernels.h"
#include "gpu/vendor.h"
#include "muse_attn/geometry.h"
#include "muse_attn/mask.h"

namespace muse_attn::gpu {

// What the cut reads of the call.
struct PoolArgs {
  const int32_t* seq_lens;
  const int32_t* draft_lens;
  const int32_t* num_reqs;
  int num_reqs_static, num_requests, tokens, pages, window, splits;
  bool counted;  // the draft counts are read (as the drafts kernels read them)
};
__device__ __forceinline__ PoolArgs pool_args(const VerifyParams& p, bool counted) {
  return PoolArgs{p.seq_lens, p.draft_lens, p.num_reqs, p.num_reqs_static, p.num_requests,
                  p.tokens, p.pages, p.window, p.num_splits.divisor(), counted};
}

// Request r's tiles as its CTAs see them: 0 for padding and for a ragged request with no drafts.
__device__ __forceinline__ int pool_request_tiles(const PoolArgs& a, int real, int r) {
  if (r >= real) return 0;
  const int count = a.counted ? request_draft_count(a.draft_lens, r, a.tokens) : a.tokens;
  const int len = keyed_length(a.seq_lens[r], count, a.counted);
  return request_tiles(request_geometry(len, a.pages * kPageSize, count, a.window, 1));
}

__device__ __forceinline__ int64_t shfl_xor_i64(int64_t v, int mask) {
  const int lo = shfl_xor(static_cast<int>(v & 0xffffffff), mask);
  const int hi = shfl_xor(static_cast<int>(v >> 32), mask);
  return static_cast<int64_t>(static_cast<uint64_t>(static_cast<uint32_t>(hi)) << 32 |
                              static_cast<uint32_t>(lo));
}
__device__ __forceinline__ int64_t warp_sum_i64(int64_t v) {
#pragma unroll
  for (int m = 1; m < kWarpSize; m <<= 1) v += shfl_xor_i64(v, m);
  return v;
}

// One warp's view of the batch: lane l holds the tiles of requests l, l + warp, ... (the first
// kKeep of them in registers, their loads all in flight at once; past them, loaded again).
template <int kKeep>
struct PoolWarp {
  PoolArgs a;
  int real, lane;
  int kept[kKeep];

  __device__ __forceinline__ PoolWarp(const PoolArgs& args, int lane_) : a(args), lane(lane_) {
    real = real_requests(a.num_reqs_static, a.num_reqs, a.num_requests);
#pragma unroll
    for (int i = 0; i < kKeep; ++i) kept[i] = pool_request_tiles(a, real, i * kWarpSize + lane);
  }
  // f(request, its tiles) for every chunk of a warp's requests, in order; the same chunks on
  // every lane, so f may shuffle.
  template <typename F>
  __device__ __forceinline__ void for_each(F&& f) const {
#pragma unroll
    for (int i = 0; i < kKeep; ++i)
      if (i * kWarpSize < a.num_requests) f(i * kWarpSize + lane, kept[i]);
#pragma unroll 1
    for (int i = kKeep; i * kWarpSize < a.num_requests; ++i)
      f(i * kWarpSize + lane, pool_request_tiles(a, real, i * kWarpSize + lane));
  }
  // The batch's segment length (geometry.h pool_length): a bisection, each step one sum over
  // the warp (the same on every lane).
  __device__ __forceinline__ int length() const {
    const int64_t slots = int64_t{a.num_requests} * a.splits;
    int64_t tiles = 0;
    int most = 0;
    for_each([&](int, int n) {
      tiles += n;
      most = max_i(most, n);
    });
    tiles = warp_sum_i64(tiles);
    most = xor_reduce<1, kLaneBits>(most, [](int x, int y) { return max_i(x, y); });
    return pool_length(tiles, most, slots, a.splits, [&](int len) {
      int n = 0;  // at most slots + R, an int (as the partials' buffer's size)
      for_each([&](int, int t) { n += pool_segments(t, len); });
      return xor_reduce<1, kLaneBits>(n, [](int x, int y) { return x + y; }) <= slots;
    });
  }
  // The requests' segments at length len summed over the requests before `before`.
  __device__ __forceinline__ int segments_before(int len, int before) const {
    int n = 0;
    for_each([&](int r, int tiles) { n += r < before ? pool_segments(tiles, len) : 0; });
    return xor_reduce<1, kLaneBits>(n, [](int x, int y) { return x + y; });
  }
  // The request and segment of pool slots slot0 + k (k < kSlots), each lane's: the request
  // holding the slot (p.num_requests where none does: past the batch's segments) and its segment.
  template <int kSlots>
  __device__ __forceinline__ void locate(int len, int64_t slot0, int (&req)[kSlots],
                                         int (&seg)[kSlots]) const {
    int hit_req[kSlots], hit_seg[kSlots];
#pragma unroll
    for (int k = 0; k < kSlots; ++k) hit_req[k] = a.num_requests, hit_seg[k] = 0;
    int before = 0;  // segments of the earlier chunks
    for_each([&](int r, int tiles) {
      const int n = pool_segments(tiles, len);
      int incl = n;  // inclusive scan over the warp
#pragma unroll
      for (int d = 1; d < kWarpSize; d <<= 1) {
        const int up = shfl_from(incl, max_i(lane - d, 0));
        if (lane >= d) incl += up;
      }
      const int64_t first = before + incl - n;
#pragma unroll
      for (int k = 0; k < kSlots; ++k)
        if (slot0 + k >= first && slot0 + k < first + n) {
          hit_req[k] = r;
          hit_seg[k] = static_cast<int>(slot0 + k - first);
        }
      before += shfl_from(incl, kWarpSize - 1);
    });
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {  // one lane holds a hit, the others num_requests and 0
      req[k] = xor_reduce<1, kLaneBits>(hit_req[k], [](int a, int b) { return min_i(a, b); });
      seg[k] = xor_reduce<1, kLaneBits>(hit_seg[k], [](int a, int b) { return max_i(a, b); });
    }
  }
};

// A split CTA's pool slots under the balanced cut: request, segment and the batch's length.
struct PoolSlot {
  int req, seg, len;
};

// The first warp's work for a split CTA: the batch's length and the request and segment of pool
// slots slot0 + k (k < kSlots), written to word[0], word[1 + 2k], word[2 + 2k].
template <int kSlots>
__device__ __forceinline__ void pool_find_slots(PoolArgs a, int64_t slot0, int* word) {
  const PoolWarp<8> v(a, static_cast<int>(threadIdx.x));  // R <= 8 warps: one round of loads
  const int len = v.length();
  int req[kSlots], seg[kSlots];
  v.locate<kSlots>(len, slot0, req, seg);
  if (threadIdx.x == 0) {
    lds_write(&word[0], len);
#pragma unroll
    for (int k = 0; k < kSlots; ++k) lds_write(&word[1 + 2 * k], req[k]), lds_write(&word[2 + 2 * k], seg[k]);
  }
}

// Pool slots slot0 + k (k < kSlots) of this split CTA; slot `which` returned. Every thread of the
// CTA calls it; the first warp works, the rest wait. word: 1 + 2 kSlots ints of shared memory no
// copy has been issued to yet (a stage's; the second barrier keeps them ours until every thread
// has read them).
template <int kSlots>
__device__ __forceinline__ PoolSlot pool_slot(const VerifyParams& p, bool counted, int64_t slot0,
                                              int which, int* word) {
  if (threadIdx.x < kWarpSize) pool_find_slots<kSlots>(pool_args(p, counted), slot0, word);
  __syncthreads();
  const PoolSlot s{lds_read<int>(&word[1 + 2 * which]), lds_read<int>(&word[2 + 2 * which]),
                   lds_read<int>(&word[0])};
  __syncthreads();
  return s;
}

// The first warp's work for a merge CTA: the batch's length and request req's first slot, written
// to word[0] and word[1].
__device__ __forceinline__ void pool_find_first(PoolArgs a, int req, int* word) {
  const PoolWarp<8> v(a, static_cast<int>(threadIdx.x));
  const int len = v.length();
  const int first = v.segments_before(len, req);
  if (threadIdx.x == 0) lds_write(&word[0], len), lds_write(&word[1], first);
}

// The merge's shared words of the balanced cut: the batch's length and the request's first slot.
__device__ __forceinline__ int* pool_word() {
  __shared__ int word[2];
  return word;
}
// A merge CTA's request under the balanced cut: pool_word() holds its length and first slot once
// it returns. Every thread of the CTA calls it.
__device__ __forceinline__ void pool_first_slot(const VerifyParams& p, bool counted, int req) {
  if (threadIdx.x < kWarpSize) pool_find_first(pool_args(p, counted), req, pool_word());
  __syncthreads();
}

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_SEGMENT_POOL_H_
