// The split kernels of a bf16 cache (split_cta.h: one CTA per (segment, request, KV head[,
// block of 64 rows]) and what it does). The variants (launch_plan.h SplitKernel picks one; one
// body, run_split_cta, for the first three):
//   split_kernel<D>             a segment tile by tile;
//   split_kernel_two_tile<64>   a segment of exactly two tiles as one 128-key step;
//   split_kernel_fill_ring<64>  a four-tile segment's copies all issued in the prologue;
//   split_kernel_cached<D>      split_kernel, its K/V loads through the caches (AMD: a window);
//   split_kernel_pingpong<64, false>   two warpgroups a CTA taking alternate tiles (NVIDIA), and
//   split_kernel_pingpong_two_pairs<64, false>  the same as two pairs a CTA, each on its own
//   segment (pingpong_cta.h).
// An FP8 cache's kernels are split_kernel_fp8.cu.cc's (a file of their own: beside these entry
// points they would change their code).
#include <atomic>
#include <cstdint>

#include "gpu/kernels.h"
#include "gpu/pingpong_cta.h"
#include "gpu/split_cta.h"

namespace muse_attn::gpu {
namespace {

// The entry points (launch_split picks one from the launch plan).
template <int D>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm<D>) split_kernel(VerifyParams p) {
  run_split_cta<D, false, false>(p);
}
template <int D>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm<D>) split_kernel_fill_ring(VerifyParams p) {
  run_split_cta<D, false, true>(p);
}
#if defined(MUSE_ATTN_HIP)
template <int D>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm<D>) split_kernel_cached(VerifyParams p) {
  run_split_cta<D, false, false, false, DraftKind::kChain, false, true>(p);
}
#endif
template <int D>
__global__ void MUSE_ATTN_TWO_TILE_BOUNDS split_kernel_two_tile(VerifyParams p) {
  static_assert(D == 64, "the two-tile step is tuned (and its cap written) for D = 64");
  run_split_cta<D, true, false>(p);
}

// Launches one of split_kernel's entry points (all take kThreads threads and the same shared
// memory); `done` is the entry point's own.
template <int D, typename Kernel>
gpuError_t launch_split_entry(Kernel kernel, std::atomic<uint64_t>& done, const VerifyParams& p,
                              gpuStream_t stream) {
  return launch_with_smem(kernel, done, split_grid(p), kThreads, split_smem_bytes<D>(), p, stream);
}

template <int D, bool kTwoTile = false, bool kFillRing = false, bool kCached = false>
gpuError_t launch_split_d(const VerifyParams& p, gpuStream_t stream) {
  static std::atomic<uint64_t> done{0};
  if constexpr (kTwoTile) {
    return launch_split_entry<D>(split_kernel_two_tile<D>, done, p, stream);
  } else if constexpr (kFillRing) {
    return launch_split_entry<D>(split_kernel_fill_ring<D>, done, p, stream);
#if defined(MUSE_ATTN_HIP)
  } else if constexpr (kCached) {
    return launch_split_entry<D>(split_kernel_cached<D>, done, p, stream);
#endif
  } else {
    return launch_split_entry<D>(split_kernel<D>, done, p, stream);
  }
}


}  // namespace

bool pingpong_two_pairs_loaded() {
#if defined(MUSE_ATTN_CUDA)
  cudaFuncAttributes attr = {};
  if (cudaFuncGetAttributes(&attr, split_kernel_pingpong_two_pairs<64, false>) != cudaSuccess) {
    (void)cudaGetLastError();  // not left for the next launch's error check
    return false;
  }
  return attr.sharedSizeBytes == 0;  // the stub has a static shared word, the kernel none
#else
  return false;
#endif
}

// The variants other than per_tile and per_tile_cached exist at D = 64 only, the fill ring and
// ping-pong kernels on NVIDIA only, per_tile_cached on AMD only (launch_plan.h never picks them
// elsewhere; here they fall back to per_tile). An FP8 cache: split_kernel_fp8.cu.cc.
gpuError_t launch_split(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream) {
  if (p.kv_format != static_cast<int>(KvFormat::kBf16)) return launch_split_fp8(p, kernel, stream);
  const bool d64 = p.head_dim == 64;
#if defined(MUSE_ATTN_CUDA)
  if (d64 && (kernel == SplitKernel::kPingpong || kernel == SplitKernel::kPingpongTwoPairs))
    return launch_pingpong<false>(p, kernel == SplitKernel::kPingpongTwoPairs, stream);
#endif
  if (d64 && kernel == SplitKernel::kTwoTile) return launch_split_d<64, true>(p, stream);
#if defined(MUSE_ATTN_CUDA)
  if (d64 && kernel == SplitKernel::kFillRing) return launch_split_d<64, false, true>(p, stream);
#endif
#if defined(MUSE_ATTN_HIP)
  if (kernel == SplitKernel::kPerTileCached)
    return d64 ? launch_split_d<64, false, false, true>(p, stream)
               : launch_split_d<128, false, false, true>(p, stream);
#endif
  return d64 ? launch_split_d<64>(p, stream) : launch_split_d<128>(p, stream);
}

}  // namespace muse_attn::gpu
