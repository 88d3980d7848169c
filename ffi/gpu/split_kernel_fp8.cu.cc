// The split kernels of an FP8 cache: each tile dequantized into bf16 as it lands (kv_tile.h, FP8
// cache), then as for bf16 (a file of its own: beside the bf16 entry points these would change
// their code). The variants the plan picks for it:
//   split_kernel_fp8<D>   split_cta.h's body, a segment tile by tile;
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

template <int D>
gpuError_t launch_split_fp8_d(const VerifyParams& p, gpuStream_t stream) {
  static std::atomic<uint64_t> done{0};
  return launch_with_smem(split_kernel_fp8<D>, done, split_grid(p), kThreads,
                          split_smem_bytes<D, true>(), p, stream);
}

}  // namespace

// The ping-pong kernels at D = 64 on NVIDIA (launch_plan.h picks them only there), else per_tile.
gpuError_t launch_split_fp8(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream) {
#if defined(MUSE_ATTN_CUDA)
  if (p.head_dim == 64 && (kernel == SplitKernel::kPingpong || kernel == SplitKernel::kPingpongTwoPairs))
    return launch_pingpong<true>(p, kernel == SplitKernel::kPingpongTwoPairs, stream);
#else
  (void)kernel;
#endif
  return p.head_dim == 64 ? launch_split_fp8_d<64>(p, stream) : launch_split_fp8_d<128>(p, stream);
}

}  // namespace muse_attn::gpu
