// The split kernel of an FP8 cache: split_cta.h's per-tile body with each tile dequantized into
// bf16 as it lands (kv_tile.h, FP8 cache), the one variant an FP8 cache has (launch_plan.h picks
// per_tile for it).
#include <atomic>
#include <cstdint>

#include "gpu/kernels.h"
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

gpuError_t launch_split_fp8(const VerifyParams& p, gpuStream_t stream) {
  return p.head_dim == 64 ? launch_split_fp8_d<64>(p, stream) : launch_split_fp8_d<128>(p, stream);
}

}  // namespace muse_attn::gpu
