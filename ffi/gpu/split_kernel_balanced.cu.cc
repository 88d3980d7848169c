// The split kernels of the balanced cut (the launch plan's balance_segments, segment_pool.h):
// split_cta.h's body tile by tile, and the ping-pong kernels at D = 64 (pingpong_cta.h), over a
// bf16 or an FP8 cache, for the chain and each draft kind, each CTA taking the request and segment
// the batch's cut puts in its pool slot. A file of their own, so that the other kernels' code is
// what it was. No FP8 cache at D = 128 (segment_pool.h says why; the plan never asks for it).
#include <atomic>
#include <cstdint>

#include "gpu/kernels.h"
#include "gpu/pingpong_cta.h"
#include "gpu/split_cta.h"

namespace muse_attn::gpu {

namespace {

template <int D, bool kFp8, DraftKind K>
inline constexpr int kBalancedMinCtasPerSm =
    kFp8 && K != DraftKind::kChain ? kDraftsFp8MinCtasPerSm<D> : kMinCtasPerSm<D>;

template <int D, bool kFp8, DraftKind K>
__global__ void __launch_bounds__(kThreads, (kBalancedMinCtasPerSm<D, kFp8, K>))
    split_kernel_balanced(VerifyParams p) {
  run_split_cta<D, false, false, kFp8, K, true>(p);
}

template <int D, bool kFp8, DraftKind K>
gpuError_t launch_balanced_dk(const VerifyParams& p, gpuStream_t stream) {
  static std::atomic<uint64_t> done{0};
  return launch_with_smem(split_kernel_balanced<D, kFp8, K>, done, split_grid(p), kThreads,
                          split_smem_bytes<D, kFp8>(), p, stream);
}

template <int D, bool kFp8>
gpuError_t launch_balanced_d(const VerifyParams& p, gpuStream_t stream) {
  switch (static_cast<DraftKind>(p.draft_kind)) {
    case DraftKind::kRagged: return launch_balanced_dk<D, kFp8, DraftKind::kRagged>(p, stream);
    case DraftKind::kTree: return launch_balanced_dk<D, kFp8, DraftKind::kTree>(p, stream);
    default: return launch_balanced_dk<D, kFp8, DraftKind::kChain>(p, stream);
  }
}

}  // namespace

gpuError_t launch_split_balanced(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream) {
  const bool fp8 = p.kv_format != static_cast<int>(KvFormat::kBf16);
#if defined(MUSE_ATTN_CUDA)
  const bool pingpong = kernel == SplitKernel::kPingpong || kernel == SplitKernel::kPingpongTwoPairs;
  if (p.head_dim == 64 && pingpong && p.draft_kind == static_cast<int>(DraftKind::kChain)) {
    const bool two_pairs = kernel == SplitKernel::kPingpongTwoPairs;
    return fp8 ? launch_pingpong<true, true>(p, two_pairs, stream)
               : launch_pingpong<false, true>(p, two_pairs, stream);
  }
#else
  (void)kernel;  // per_tile (the plan's only AMD kernel under the cut)
#endif
  if (p.head_dim == 64)
    return fp8 ? launch_balanced_d<64, true>(p, stream) : launch_balanced_d<64, false>(p, stream);
  return fp8 ? gpuErrorInvalidValue : launch_balanced_d<128, false>(p, stream);
}

}  // namespace muse_attn::gpu
