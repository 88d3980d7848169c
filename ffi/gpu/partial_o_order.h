// The order of a partial o row in GPU memory (muse_attn/partials.h: D bf16 a row).
//
// NVIDIA: the split kernel's MMA fragments (warp_mma.h) give lane t = lane % 4 of a quad the
// column pairs 8n + 2t, n = 0 .. D / 8 - 1. Stored in column order, a quad writes 16 contiguous
// bytes a store, half a 32-byte sector (slower in every latency-bound call). So each 32-column
// block of a row is stored with its pairs transposed: the pair of columns 32k + 8j + 2t sits at
// position 32k + 8t + 2j, lane t writes its pairs n = 4k .. 4k + 3 as one 16-byte store, and a
// quad 64 contiguous bytes. The transpose is its own inverse: the merge, which reads positions,
// finds each pair's columns with the same function. AMD: column order (a lane's four elements
// are contiguous already).
//
// Only the split kernel writes and only the merge kernel reads the partials, inside one call;
// the CPU handler keeps column order.
#ifndef MUSE_ATTN_GPU_PARTIAL_O_ORDER_H_
#define MUSE_ATTN_GPU_PARTIAL_O_ORDER_H_

#include "gpu/vendor.h"
#include "muse_attn/host_device.h"

namespace muse_attn::gpu {

#if defined(MUSE_ATTN_CUDA)
inline constexpr bool kPartialOTransposed = true;
#else
inline constexpr bool kPartialOTransposed = false;
#endif

// Position <-> column of the pair that starts at even index i (an involution): within each
// 32-element block, i = 8a + 2b <-> 8b + 2a. (Sums, not ors, of disjoint bits: nvcc folds them
// into the store's address arithmetic, and the SASS is that of a hand-written 32k + 8t.)
MUSE_HD constexpr int partial_o_swap(int i) {
  return kPartialOTransposed ? (i & ~31) + ((i & 6) << 2) + ((i >> 2) & 6) : i;
}

static_assert(partial_o_swap(0) == 0 && partial_o_swap(2) == (kPartialOTransposed ? 8 : 2) &&
                  partial_o_swap(partial_o_swap(34)) == 34,
              "the transpose is its own inverse");

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_PARTIAL_O_ORDER_H_
