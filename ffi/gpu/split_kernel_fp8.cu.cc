// The split kernels of an FP8 cache: each tile dequantized into bf16 as it lands (kv_tile.h, FP8
// cache), then as for bf16 (a file of its own: beside the bf16 entry points these would change
// their code). The variants the plan picks for it:
//   split_kernel_fp8<D>   split_cta.h's body, a segment tile by tile;
//   split_kernel_fp8_cached<D>  the same, its K/V loads through the caches (AMD: a window);
//   pingpong_cta.h's two ping-pong kernels at D = 64 (NVIDIA), each team converting its tiles
//   under the other's MMAs.
#include <atomic>
#include <cstdint>

#include "gpu/kernels.h"
#include "gpu/pingpong_cta.h"
#include "gpu/split_cta.h"

namespace muse_attn::gpu {
namespace {

template <int D>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm<D>) split_kernel_fp8(VerifyParams p) {
  run_split_cta<D, false, false, true>(p);
}
#if defined(MUSE_ATTN_HIP)
template <int D>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm<D>) split_kernel_fp8_cached(VerifyParams p) {
  run_split_cta<D, false, false, true, DraftKind::kChain, false, true>(p);
}
#endif

template <int D>
gpuError_t launch_split_fp8_d(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream) {
#if defined(MUSE_ATTN_HIP)
  if (kernel == SplitKernel::kPerTileCached) {
    static std::atomic<uint64_t> done{0};
    return launch_with_smem(split_kernel_fp8_cached<D>, done, split_grid(p), kThreads,
                            split_smem_bytes<D, true>(), p, stream);
  }
#else
  (void)kernel;
#endif
  static std::atomic<uint64_t> done{0};
  return launch_with_smem(split_kernel_fp8<D>, done, split_grid(p), kThreads,
                          split_smem_bytes<D, true>(), p, stream);
}

}  // namespace

// The ping-pong kernels at D = 64 on NVIDIA and per_tile_cached on AMD (launch_plan.h picks them
// only there), else per_tile.
gpuError_t launch_split_fp8(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream) {
#if defined(MUSE_ATTN_CUDA)
  if (p.head_dim == 64 && (kernel == SplitKernel::kPingpong || kernel == SplitKernel::kPingpongTwoPairs))
    return launch_pingpong<true>(p, kernel == SplitKernel::kPingpongTwoPairs, stream);
#endif
  return p.head_dim == 64 ? launch_split_fp8_d<64>(p, kernel, stream)
                          : launch_split_fp8_d<128>(p, kernel, stream);
}

}  // namespace muse_attn::gpu
