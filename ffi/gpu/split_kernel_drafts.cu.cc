// The split kernels of the drafts target (muse_attn/mask.h), one set a kind: ragged drafts (a
// chain of each request's count, the chain's mask) and trees (each row's DraftRow). split_cta.h's
// body tile by tile over a bf16 or an FP8 cache, or a two-tile segment as one step over a bf16 one
// (the launch plan picks per_tile or two_tile for the drafts target). A file of its own, so that
// the chain kernels' code is what it was.
#include <atomic>
#include <cstdint>

#include "gpu/kernels.h"
#include "gpu/split_cta.h"

namespace muse_attn::gpu {
namespace {

template <int D, DraftKind K>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm<D>) split_kernel_drafts(VerifyParams p) {
  run_split_cta<D, false, false, false, K>(p);
}
// A two-tile segment as one 128-key step (bf16, D = 64), where the plan takes it for the chain.
// The 3-an-SM bound's registers: under the chain's two-tile cap a tree's mask spills.
template <int D, DraftKind K>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm<D>)
    split_kernel_drafts_two_tile(VerifyParams p) {
  static_assert(D == 64, "as split_kernel_two_tile");
  run_split_cta<D, true, false, false, K>(p);
}

template <int D, DraftKind K>
__global__ void __launch_bounds__(kThreads, kDraftsFp8MinCtasPerSm<D>) split_kernel_drafts_fp8(VerifyParams p) {
  run_split_cta<D, false, false, true, K>(p);
}

template <int D, DraftKind K>
gpuError_t launch_split_drafts_dk(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream) {
  if (p.kv_format != static_cast<int>(KvFormat::kBf16)) {
    static std::atomic<uint64_t> done{0};
    return launch_with_smem(split_kernel_drafts_fp8<D, K>, done, split_grid(p), kThreads,
                            split_smem_bytes<D, true>(), p, stream);
  }
  if constexpr (D == 64) {
    if (kernel == SplitKernel::kTwoTile) {
      static std::atomic<uint64_t> done{0};
      return launch_with_smem(split_kernel_drafts_two_tile<D, K>, done, split_grid(p), kThreads,
                              split_smem_bytes<D>(), p, stream);
    }
  }
  static std::atomic<uint64_t> done{0};
  return launch_with_smem(split_kernel_drafts<D, K>, done, split_grid(p), kThreads,
                          split_smem_bytes<D>(), p, stream);
}

template <int D>
gpuError_t launch_split_drafts_d(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream) {
  return p.draft_kind == static_cast<int>(DraftKind::kTree)
             ? launch_split_drafts_dk<D, DraftKind::kTree>(p, kernel, stream)
             : launch_split_drafts_dk<D, DraftKind::kRagged>(p, kernel, stream);
}

}  // namespace

gpuError_t launch_split_drafts(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream) {
  return p.head_dim == 64 ? launch_split_drafts_d<64>(p, kernel, stream)
                          : launch_split_drafts_d<128>(p, kernel, stream);
}

}  // namespace muse_attn::gpu
