// The split kernel of the drafts target (ragged drafts, trees; muse_attn/mask.h): split_cta.h's
// per-tile body with the request's draft count and each row's DraftRow, over a bf16 cache (the
// launch plan picks per_tile for the drafts target). A file of its own, so that the chain
// kernels' code is what it was. (An FP8 cache's staged tiles beside the drafts' mask spill
// registers: that pair runs on the CPU handler and the reference for now.)
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

template <int D>
gpuError_t launch_split_drafts_d(const VerifyParams& p, gpuStream_t stream) {
  static std::atomic<uint64_t> done{0};
  return launch_with_smem(split_kernel_drafts<D>, done, split_grid(p), kThreads,
                          split_smem_bytes<D>(), p, stream);
}

}  // namespace

gpuError_t launch_split_drafts(const VerifyParams& p, gpuStream_t stream) {
  return p.head_dim == 64 ? launch_split_drafts_d<64>(p, stream) : launch_split_drafts_d<128>(p, stream);
}

}  // namespace muse_attn::gpu
