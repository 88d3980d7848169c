// The split kernel of the drafts target (ragged drafts, trees; muse_attn/mask.h): split_cta.h's
// per-tile body with the request's draft count and each row's DraftRow, over a bf16 or an FP8
// cache (the launch plan picks per_tile for the drafts target). A file of its own, so that the
// chain kernels' code is what it was.
#include <atomic>
#include <cstdint>

#include "gpu/kernels.h"
#include "gpu/split_cta.h"

namespace muse_attn::gpu {
namespace {

template <int D>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm<D>) split_kernel_drafts(VerifyParams p) {
  run_split_cta<D, false, false, false, true>(p);
}

// The FP8 kernel's bound: at D = 64 on the mma.sync path (no warpgroup MMA) the FP8 stage, the
// drafts' mask and the math need more than the 3-an-SM bound's 168 registers: 2 CTAs an SM.
#if defined(MUSE_ATTN_CUDA) && !defined(MUSE_ATTN_WGMMA)
template <int D>
inline constexpr int kDraftsFp8MinCtasPerSm = D == 64 ? 2 : kMinCtasPerSm<D>;
#else
template <int D>
inline constexpr int kDraftsFp8MinCtasPerSm = kMinCtasPerSm<D>;
#endif

template <int D>
__global__ void __launch_bounds__(kThreads, kDraftsFp8MinCtasPerSm<D>) split_kernel_drafts_fp8(VerifyParams p) {
  run_split_cta<D, false, false, true, true>(p);
}

template <int D>
gpuError_t launch_split_drafts_d(const VerifyParams& p, gpuStream_t stream) {
  if (p.kv_format != static_cast<int>(KvFormat::kBf16)) {
    static std::atomic<uint64_t> done{0};
    return launch_with_smem(split_kernel_drafts_fp8<D>, done, split_grid(p), kThreads,
                            split_smem_bytes<D, true>(), p, stream);
  }
  static std::atomic<uint64_t> done{0};
  return launch_with_smem(split_kernel_drafts<D>, done, split_grid(p), kThreads,
                          split_smem_bytes<D>(), p, stream);
}

}  // namespace

gpuError_t launch_split_drafts(const VerifyParams& p, gpuStream_t stream) {
  return p.head_dim == 64 ? launch_split_drafts_d<64>(p, stream) : launch_split_drafts_d<128>(p, stream);
}

}  // namespace muse_attn::gpu
