// The GPU handler of verify attention ("CUDA" or "ROCM", one source): checks the static shapes
// and the launch plan it was handed (decided at trace time, launch_plan.h), fills VerifyParams and
// launches the split kernel then (unless the split kernel writes the output) the merge on XLA's
// stream. Command-buffer compatible: no host synchronization, no allocation (the partials are
// results of the call, sized at trace time), launch geometry from static shapes only.
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

// The plan's attributes, checked against what this build and device can run (a plan made for
// another device, or by hand, is refused rather than launched wrong).
ffi::Error read_plan(int32_t split_kernel, int32_t merge_warps, int32_t merge_pdl,
                     int32_t merge_by_lane, int head_dim, Plan* plan) {
  auto bad = [](const std::string& what) {
    return ffi::Error::InvalidArgument("jax_muse_attn verify_attention (GPU): launch plan: " + what);
  };
  if (split_kernel < 0 || split_kernel >= kNumSplitKernels)
    return bad("split_kernel " + std::to_string(split_kernel) + " is not a split kernel");
  if (merge_warps != 1 && merge_warps != 2 && merge_warps != 4 && merge_warps != 8)
    return bad("merge_warps must be 1, 2, 4 or 8, got " + std::to_string(merge_warps));
  plan->split_kernel = static_cast<SplitKernel>(split_kernel);
  plan->merge_warps = merge_warps;
  plan->merge_pdl = merge_pdl != 0;
  plan->merge_by_lane = merge_by_lane != 0;
  const char* name = kSplitKernelNames[split_kernel];
  const bool per_tile =
      plan->split_kernel == SplitKernel::kPerTile || plan->split_kernel == SplitKernel::kPerTileCached;
  if (!per_tile && head_dim != 64) return bad(std::string(name) + " needs D = 64");
  if (plan->split_kernel == SplitKernel::kPerTileCached && kVendor != Vendor::kAmd)
    return bad(std::string(name) + " runs on AMD only");
  const bool nvidia_only = plan->split_kernel == SplitKernel::kFillRing ||
                           plan->split_kernel == SplitKernel::kPingpong ||
                           plan->split_kernel == SplitKernel::kPingpongTwoPairs;
  if (nvidia_only && kVendor != Vendor::kNvidia) return bad(std::string(name) + " runs on NVIDIA only");
  // What the loaded code can do, asked once a process (XLA runs one kind of GPU a process).
  static const bool two_pairs = pingpong_two_pairs_loaded();
  static const bool pdl = device_supports_pdl() && merge_waits_for_split();
  if (plan->split_kernel == SplitKernel::kPingpongTwoPairs && !two_pairs)
    return bad("pingpong_two_pairs is not in this build's code for this GPU (sm_90a only)");
  if (plan->merge_pdl && !pdl) return bad("merge_pdl needs sm_90+ and merge code compiled for it");
  return ffi::Error::Success();
}

// The plan's kernels on XLA's stream (kernels.h launch_call).
ffi::Error launch(const VerifyParams& p, const Plan& plan, gpuStream_t stream) {
  if (gpuError_t e = launch_call(p, plan, stream); e != gpuSuccess) return gpu_error("kernel launch", e);
  return ffi::Error::Success();
}

// The checks and the parameters both targets share: the static shapes, the cache format, the
// plan; p filled but for the drafts target's fields.
ffi::Error prepare_call(ffi::BufferR3<ffi::BF16> q, ffi::AnyBuffer kv_cache,
                        ffi::BufferR2<ffi::S32> block_table, ffi::BufferR1<ffi::S32> seq_lens,
                        ffi::BufferR0<ffi::S32> num_reqs, ffi::Buffer<ffi::F32> k_scale,
                        ffi::Buffer<ffi::F32> v_scale, ffi::Result<ffi::BufferR3<ffi::BF16>> out,
                        ffi::Result<ffi::BufferR4<ffi::BF16>> part_o,
                        ffi::Result<ffi::BufferR4<ffi::F32>> part_ml, float scale, int32_t window,
                        int32_t tokens, int32_t num_splits, int32_t num_reqs_static,
                        int32_t split_kernel, int32_t merge_warps, int32_t merge_pdl,
                        int32_t merge_by_lane, int32_t balance_segments, int32_t kv_format,
                        int32_t scale_kind, Problem* pr, Plan* plan, VerifyParams* p) {
  *pr = Problem{};
  ffi::Error status = make_problem(q.dimensions(), kv_cache.dimensions(),
                                   block_table.dimensions(), seq_lens.dimensions(),
                                   part_o->dimensions(), part_ml->dimensions(), scale, window,
                                   tokens, num_splits, num_reqs_static, pr);
  if (status.failure()) return status;
  status = check_kv_format(kv_cache.element_type(), k_scale.dimensions(), v_scale.dimensions(),
                           kv_format, scale_kind, pr);
  if (status.failure()) return status;
  if (pr->groups() > kMaxGroups || pr->num_kv_heads > kMaxGroups)  // grid y; 32-bit page strides
    return ffi::Error::InvalidArgument(
        "jax_muse_attn verify_attention (GPU): requests x KV heads and KV heads must be <= " +
        std::to_string(kMaxGroups) + ", got " + std::to_string(pr->num_requests) + " x " +
        std::to_string(pr->num_kv_heads));
  if (pr->head_dim != 64 && pr->head_dim != 128)
    return ffi::Error::InvalidArgument(
        "jax_muse_attn verify_attention (GPU): D must be 64 or 128, got " +
        std::to_string(pr->head_dim));
  plan->num_splits = pr->num_splits;
  status = read_plan(split_kernel, merge_warps, merge_pdl, merge_by_lane, pr->head_dim, plan);
  if (status.failure()) return status;
  *p = sized_params(pr->num_requests, pr->tokens, pr->num_q_heads, pr->num_kv_heads,
                    pr->head_dim, pr->pages, pr->window, pr->num_splits, pr->num_reqs_static);
  p->q = q.typed_data();
  p->kv = kv_cache.untyped_data();
  p->table = block_table.typed_data();
  p->seq_lens = seq_lens.typed_data();
  p->num_reqs = num_reqs.typed_data();
  p->out = out->typed_data();
  p->part_o = part_o->typed_data();
  p->part_ml = part_ml->typed_data();
  p->k_scale = k_scale.typed_data();
  p->v_scale = v_scale.typed_data();
  p->kv_format = static_cast<int>(pr->kv_format);
  p->scale_kind = static_cast<int>(pr->scale_kind);
  p->num_blocks = pr->num_blocks;
  p->table_stride = pr->table_row_stride;
  p->scale_log2 = pr->scale_log2;
  plan->balance_segments = balance_segments != 0;
  if (plan->balance_segments && pr->kv_format != KvFormat::kBf16 && pr->head_dim == 128)
    return ffi::Error::InvalidArgument(
        "jax_muse_attn verify_attention (GPU): launch plan: balance_segments needs a bf16 cache "
        "or an FP8 one at D = 64");
  return ffi::Error::Success();
}

ffi::Error verify_attention_gpu(gpuStream_t stream,
                                ffi::BufferR3<ffi::BF16> q,           // [NQ*R, Hq, D]
                                ffi::AnyBuffer kv_cache,              // [blocks, Hkv, 16, 2D]
                                ffi::BufferR2<ffi::S32> block_table,  // [>=R, P]
                                ffi::BufferR1<ffi::S32> seq_lens,     // [>=R]
                                ffi::BufferR0<ffi::S32> num_reqs,     // real requests
                                ffi::Buffer<ffi::F32> k_scale,        // [] or [blocks, Hkv, 16]
                                ffi::Buffer<ffi::F32> v_scale,
                                ffi::ResultBufferR3<ffi::BF16> out,   // like q
                                ffi::ResultBufferR4<ffi::BF16> part_o,  // [R*Hkv, S, rows, D]
                                ffi::ResultBufferR4<ffi::F32> part_ml,  // [R*Hkv, S, rows, 2]
                                float scale, int32_t window, int32_t tokens,
                                int32_t num_splits, int32_t num_reqs_static,
                                int32_t split_kernel, int32_t merge_warps, int32_t merge_pdl,
                                int32_t merge_by_lane, int32_t balance_segments,
                                int32_t kv_format, int32_t scale_kind) {
  Problem pr;
  Plan plan;
  VerifyParams p;
  ffi::Error status = prepare_call(q, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale,
                                   out, part_o, part_ml, scale, window, tokens, num_splits,
                                   num_reqs_static, split_kernel, merge_warps, merge_pdl,
                                   merge_by_lane, balance_segments, kv_format, scale_kind, &pr,
                                   &plan, &p);
  if (status.failure()) return status;
  return launch(p, plan, stream);
}

// The drafts target (ragged drafts, trees, lse): the same call with the draft operands and the
// lse result; its own split kernels (per_tile) where drafts are ragged or a tree, its merge.
ffi::Error verify_attention_drafts_gpu(gpuStream_t stream,
                                       ffi::BufferR3<ffi::BF16> q, ffi::AnyBuffer kv_cache,
                                       ffi::BufferR2<ffi::S32> block_table,
                                       ffi::BufferR1<ffi::S32> seq_lens,
                                       ffi::BufferR0<ffi::S32> num_reqs,
                                       ffi::Buffer<ffi::F32> k_scale, ffi::Buffer<ffi::F32> v_scale,
                                       ffi::BufferR1<ffi::S32> draft_lens,    // [R]
                                       ffi::BufferR2<ffi::U32> tree_mask,     // [R, NQ]
                                       ffi::BufferR2<ffi::S32> draft_depths,  // [R, NQ]
                                       ffi::ResultBufferR3<ffi::BF16> out,
                                       ffi::ResultBufferR2<ffi::F32> lse,     // [NQ*R, Hq]
                                       ffi::ResultBufferR4<ffi::BF16> part_o,
                                       ffi::ResultBufferR4<ffi::F32> part_ml, float scale,
                                       int32_t window, int32_t tokens, int32_t num_splits,
                                       int32_t num_reqs_static, int32_t split_kernel,
                                       int32_t merge_warps, int32_t merge_pdl,
                                       int32_t merge_by_lane, int32_t balance_segments,
                                       int32_t kv_format, int32_t scale_kind, int32_t draft_kind,
                                       int32_t return_lse) {
  Problem pr;
  Plan plan;
  VerifyParams p;
  ffi::Error status = prepare_call(q, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale,
                                   out, part_o, part_ml, scale, window, tokens, num_splits,
                                   num_reqs_static, split_kernel, merge_warps, merge_pdl,
                                   merge_by_lane, balance_segments, kv_format, scale_kind, &pr,
                                   &plan, &p);
  if (status.failure()) return status;
  status = check_drafts(draft_lens.dimensions(), tree_mask.dimensions(), draft_depths.dimensions(),
                        lse->dimensions(), draft_kind, return_lse, &pr);
  if (status.failure()) return status;
  p.draft_kind = static_cast<int>(pr.draft_kind);
  p.draft_lens = pr.draft_lens_given ? draft_lens.typed_data() : nullptr;
  p.tree_mask = pr.tree_mask_given ? tree_mask.typed_data() : nullptr;
  p.draft_depths = pr.draft_depths_given ? draft_depths.typed_data() : nullptr;
  p.lse = pr.return_lse ? lse->typed_data() : nullptr;
  return launch(p, plan, stream);
}

}  // namespace
}  // namespace muse_attn::gpu

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    MUSE_GPU_HANDLER_SYMBOL(MuseVerifyAttention), muse_attn::gpu::verify_attention_gpu,
    muse_attn::bind_verify_attention(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<muse_attn::gpu::gpuStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    MUSE_GPU_HANDLER_SYMBOL(MuseVerifyAttentionDrafts), muse_attn::gpu::verify_attention_drafts_gpu,
    muse_attn::bind_verify_attention_drafts(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<muse_attn::gpu::gpuStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});
