// The bulk tensor copy (TMA, NVIDIA sm_90) of a tile's pages: the cache seen as a 2-D tensor of
// num_blocks * Hkv * 16 rows (one a key slot of one KV head) of 2 * D bf16 ([K | V]), and a box of
// 16 rows x D columns (one page's K, or its V) landing in a KvTile half with the 128-byte swizzle
// (kv_tile.h's layout: chunk c of key k at c ^ (k % 8)). One thread issues a tile's 8 boxes
// (4 pages x K, V) against one mbarrier that counts their bytes; the team waits on the barrier's
// phase. A page whose block id is absent gets a row coordinate past the tensor: the box is
// zero-filled and nothing is read. Only tiles wholly inside [key_lo, seq_len) take it (a page's
// box reads all 16 slots); boundary tiles keep the per-thread copies (kv_tile.h stage_tile).
#ifndef MUSE_ATTN_GPU_KV_TMA_H_
#define MUSE_ATTN_GPU_KV_TMA_H_

#include <climits>
#include <climits>
#include <cstdint>

#include "gpu/vendor.h"

#if defined(MUSE_ATTN_CUDA)
#include <cuda.h>  // CUtensorMap (types only: the encoder comes through the runtime)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#endif

namespace muse_attn::gpu {

#if defined(MUSE_ATTN_CUDA)
// The kernel's view of the cache for the bulk copies (a __grid_constant__ parameter).
struct KvTensorMap {
  CUtensorMap map;  // 64-byte aligned, 128 bytes
  int rows;         // num_blocks * Hkv * 16 (0: not encoded, the per-thread copies only)
};

// Encodes the map for kv [num_blocks, Hkv, 16, 2 * D] bf16 (host; no device work, no sync).
// rows = 0 where it cannot be encoded (rows past int32, the encoder missing or failing).
gpuError_t encode_kv_tensor_map(KvTensorMap* out, const void* kv, int64_t num_blocks,
                                int num_kv_heads, int head_dim);

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// After mbar_init, before the barrier is used by the bulk copies (the async proxy).
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
#endif
}
// Waits until the barrier's phase `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
#endif
}
// One box (column col, row row) of the map into shared memory at dst (1024-byte aligned for the
// swizzle), its bytes counted on bar.
__device__ __forceinline__ void tma_load_box(void* dst, const CUtensorMap* map, int col, int row,
                                             uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(smem_u32(bar))
      : "memory");
#endif
}
#endif  // MUSE_ATTN_CUDA

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_KV_TMA_H_
