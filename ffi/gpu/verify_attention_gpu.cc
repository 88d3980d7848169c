// The GPU handler of verify attention ("CUDA" or "ROCM", one source): checks the static
// shapes, fills VerifyParams and launches the split kernel then the merge on XLA's stream.
// Command-buffer compatible: no host synchronization, no allocation (the partials are results
// of the call, sized at trace time), launch geometry from static shapes only.
#include <cstdint>
#include <string>

#include "gpu/kernels.h"
#include "gpu/launch_plan.h"
#include "gpu/vendor.h"
#include "handlers.h"
#include "muse_attn/problem.h"
#include "xla/ffi/api/ffi.h"

namespace muse_attn::gpu {
namespace {

ffi::Error gpu_error(const char* what, gpuError_t e) {
  return ffi::Error::Internal(std::string("jax_muse_attn verify_attention: ") + what + ": " +
                              gpuGetErrorString(e));
}

ffi::Error verify_attention_gpu(gpuStream_t stream,
                                ffi::BufferR3<ffi::BF16> q,           // [NQ*R, Hq, D]
                                ffi::BufferR4<ffi::BF16> kv_cache,    // [blocks, Hkv, 16, 2D]
                                ffi::BufferR2<ffi::S32> block_table,  // [>=R, P]
                                ffi::BufferR1<ffi::S32> seq_lens,     // [>=R]
                                ffi::BufferR0<ffi::S32> num_reqs,     // real requests
                                ffi::ResultBufferR3<ffi::BF16> out,   // like q
                                ffi::ResultBufferR4<ffi::BF16> part_o,  // [R*Hkv, S, rows, D]
                                ffi::ResultBufferR4<ffi::F32> part_ml,  // [R*Hkv, S, rows, 2]
                                float scale, int32_t window, int32_t tokens,
                                int32_t num_splits, int32_t num_reqs_static) {
  Problem pr{};
  ffi::Error status = make_problem(q.dimensions(), kv_cache.dimensions(),
                                   block_table.dimensions(), seq_lens.dimensions(),
                                   part_o->dimensions(), part_ml->dimensions(), scale, window,
                                   tokens, num_splits, num_reqs_static, &pr);
  if (status.failure()) return status;
  if (pr.groups() > kMaxGroups || pr.num_kv_heads > kMaxGroups)  // grid y; 32-bit page strides
    return ffi::Error::InvalidArgument(
        "jax_muse_attn verify_attention (GPU): requests x KV heads and KV heads must be <= " +
        std::to_string(kMaxGroups) + ", got " + std::to_string(pr.num_requests) + " x " +
        std::to_string(pr.num_kv_heads));
  if (pr.head_dim != 64 && pr.head_dim != 128)
    return ffi::Error::InvalidArgument(
        "jax_muse_attn verify_attention (GPU): D must be 64 or 128, got " +
        std::to_string(pr.head_dim));
  VerifyParams p = sized_params(pr.num_requests, pr.tokens, pr.num_q_heads, pr.num_kv_heads,
                                pr.head_dim, pr.pages, pr.window, pr.num_splits,
                                pr.num_reqs_static);
  p.q = q.typed_data();
  p.kv = kv_cache.typed_data();
  p.table = block_table.typed_data();
  p.seq_lens = seq_lens.typed_data();
  p.num_reqs = num_reqs.typed_data();
  p.out = out->typed_data();
  p.part_o = part_o->typed_data();
  p.part_ml = part_ml->typed_data();
  p.num_blocks = pr.num_blocks;
  p.table_stride = pr.table_row_stride;
  p.scale_log2 = pr.scale_log2;
  const LaunchPlan plan = plan_launch(p);  // host-side only: the same every call
  if (gpuError_t e = launch_split(p, plan, stream); e != gpuSuccess) return gpu_error("split launch", e);
  if (gpuError_t e = launch_merge(p, plan, stream); e != gpuSuccess) return gpu_error("merge launch", e);
  return ffi::Error::Success();
}

}  // namespace
}  // namespace muse_attn::gpu

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    MUSE_GPU_HANDLER_SYMBOL(MuseVerifyAttention), muse_attn::gpu::verify_attention_gpu,
    muse_attn::bind_verify_attention(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<muse_attn::gpu::gpuStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});
