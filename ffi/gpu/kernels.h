// The GPU kernels' arguments (VerifyParams) and launchers (split_kernel.cu.cc,
// split_kernel_fp8.cu.cc, merge_kernel.cu.cc). The handler (verify_attention_gpu.cc) fills VerifyParams from the FFI
// buffers and launches what the launch plan says; launch geometry comes from static sizes only,
// never from device data.
#ifndef MUSE_ATTN_GPU_KERNELS_H_
#define MUSE_ATTN_GPU_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "gpu/launch_plan.h"
#include "gpu/vendor.h"
#include "muse_attn/fast_div.h"
#include "muse_attn/fp8.h"
#include "muse_attn/host_device.h"

namespace muse_attn::gpu {

struct VerifyParams {
  // Ordered by first use in the split kernel: the parameters live in the constant bank, and an
  // SM's first read of each 64-byte line stalls the warp. The first 48 bytes hold all the kernel
  // needs to ask for seq_lens, the next line what Q's copies and the block-table reads need.
  // First line: which request, padding or not, its length.
  const int32_t* seq_lens;    // [>= R]
  const int32_t* num_reqs;    // scalar: real requests (clamped to [0, R] on the device)
  FastDiv num_kv_heads;       // Hkv, as a multiply-shift divisor (fast_div.h)
  int num_reqs_static;        // real requests if known at trace time (*num_reqs not read), or -1
  int num_requests;           // R
  int tokens;                 // NQ
  int pages;                  // block-table width
  int window;                 // 0: full attention
  // Second line: Q's copies, the segment's cut, the block table and the cache.
  const uint16_t* q;          // [NQ*R, Hq, D] bf16
  const void* kv;             // [num_blocks, Hkv, 16, 2D] bf16 or FP8
  const int32_t* table;       // [>= R, pages]
  int64_t table_stride;       // elements between block-table rows
  FastDiv qpk;                // query heads a KV head
  FastDiv num_splits;         // S
  int rows;                   // NQ * qpk (blocks of kMaxRows)
  int num_q_heads;
  // The rest: the mask, the partials, the merge (an order that leaves sm_80's D = 128 merge
  // without spills).
  int64_t num_blocks;
  float scale_log2;           // scale * log2(e)
  int head_dim;
  uint16_t* out;              // like q
  uint16_t* part_o;           // [R*Hkv, S, rows, D] bf16, rows in partial_o_order.h's order
  float* part_ml;             // [R*Hkv, S, rows, 2]
  // An FP8 cache (kv_tile.h, muse_attn/fp8.h); last, so that a bf16 kernel's parameters keep
  // their places.
  const float* k_scale;       // [] per tensor or [num_blocks, Hkv, 16] per token
  const float* v_scale;
  int kv_format;              // muse_attn::KvFormat
  int scale_kind;             // muse_attn::ScaleKind
  // The drafts target (split_kernel_drafts.cu.cc, muse_attn/mask.h); read by its kernels only.
  const int32_t* draft_lens;     // [R] (draft_kind >= 1)
  const uint32_t* tree_mask;     // [R, NQ] (draft_kind 2)
  const int32_t* draft_depths;   // [R, NQ] (draft_kind 2)
  float* lse;                    // [NQ*R, Hq], or null: not asked for
  int draft_kind;                // muse_attn::DraftKind
  int split_writes_output;       // 1: the split kernel writes out, no merge (split_writes_output)
};
// The first line's fields in its 48 bytes, the second's in the next 64 (the bank's lines are
// 64-byte aligned and the parameters start 16 bytes into one).
static_assert(offsetof(VerifyParams, window) + sizeof(int) <= 48, "first line of the parameters");
static_assert(offsetof(VerifyParams, num_q_heads) + sizeof(int) <= 48 + 64, "second line");

// The static sizes of VerifyParams (the pointers and num_blocks / table_stride / scale_log2 left
// unset), for the handler and benchmarks/kernel_bench.cu alike.
inline VerifyParams sized_params(int num_requests, int tokens, int num_q_heads, int num_kv_heads,
                                 int head_dim, int pages, int window, int num_splits,
                                 int num_reqs_static) {
  VerifyParams p{};
  p.num_requests = num_requests;
  p.tokens = tokens;
  p.num_q_heads = num_q_heads;
  p.num_kv_heads = FastDiv(num_kv_heads);
  p.qpk = FastDiv(num_q_heads / num_kv_heads);
  p.head_dim = head_dim;
  p.rows = tokens * (num_q_heads / num_kv_heads);  // <= 16 x Hq
  p.pages = pages;
  p.window = window;
  p.num_splits = FastDiv(num_splits);
  p.num_reqs_static = num_reqs_static;
  return p;
}

// The build's vendor, as the launch plan names it.
#if defined(MUSE_ATTN_HIP)
inline constexpr Vendor kVendor = Vendor::kAmd;
#else
inline constexpr Vendor kVendor = Vendor::kNvidia;
#endif

// How an FP8 tile becomes bf16 (kv_tile.h): staged (copied as FP8, then converted) where copies
// are asynchronous; direct (converted as it is copied) on AMD, whose copies go through registers.
// MUSE_ATTN_FP8_STAGED takes the staged form on AMD too (the emulator's tests run both).
#if defined(MUSE_ATTN_CUDA) || defined(MUSE_ATTN_FP8_STAGED)
inline constexpr bool kFp8Staged = true;
#else
inline constexpr bool kFp8Staged = false;
#endif

// The split kernel's tiles in flight (shared-memory stages).
template <int D>
struct Stages {
  static constexpr int value = split_stages(kVendor, D);
};

// The split kernel's grid: (segments, groups, row blocks of kMaxRows).
inline dim3 split_grid(const VerifyParams& p) {
  return dim3(p.num_splits.divisor(), p.num_requests * p.num_kv_heads.divisor(),
              (p.rows + kMaxRows - 1) / kMaxRows);
}
// The two-pair ping-pong kernel's grid: segments 2x and 2x + 1 in CTA x.
inline dim3 split_grid_two_pairs(const VerifyParams& p) {
  dim3 g = split_grid(p);
  g.x = (g.x + 1) / 2;
  return g;
}

// Split: every CTA finds its tiles from seq_lens and exits when it has none.
gpuError_t launch_split(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream);
// The split kernel of an FP8 cache (kv_format != bf16): the plan's ping-pong kernels (NVIDIA) or
// per_tile_cached (AMD), else per_tile.
gpuError_t launch_split_fp8(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream);
// The split kernel of the drafts target (ragged drafts, trees; bf16 or FP8 cache): two_tile where
// the plan says so over a bf16 cache at D = 64, else per_tile (no cached variant).
gpuError_t launch_split_drafts(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream);
// The split kernel of a call: the drafts kernel where drafts are ragged or a tree, else the plan's
// (a chain asking for its lse runs the chain's kernels; the merge writes the lse).
inline gpuError_t launch_split_for(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream) {
  return p.draft_kind != 0 ? launch_split_drafts(p, kernel, stream)
                           : launch_split(p, kernel, stream);
}
// The split kernel of the balanced cut (the plan's balance_segments, segment_pool.h):
// per_tile, or the plan's ping-pong kernels on NVIDIA, of the chain or the drafts target.
gpuError_t launch_split_balanced(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream);
// Merge: plan.merge_warps warps a row; writes every output row (zeros where nothing was seen), and
// each row's lse where p.lse is set; a programmatic dependent launch of the split kernel when
// plan.merge_pdl.
gpuError_t launch_merge(const VerifyParams& p, const Plan& plan, gpuStream_t stream);
// The split kernels compiled with the output epilogue, read by their bodies and by the launch
// alike: on NVIDIA the one-pair ping-pong kernel of a bf16 cache (the two-pair one would spill at
// its 128 registers; an FP8 cache's is unmeasured that way), on AMD per_tile and per_tile_cached
// (where its plan takes one split).
MUSE_HD_CONSTEXPR bool has_output_epilogue(SplitKernel k, bool fp8) {
  return kVendor == Vendor::kAmd ? k == SplitKernel::kPerTile || k == SplitKernel::kPerTileCached
                                 : k == SplitKernel::kPingpong && !fp8;
}
// Whether the split kernel writes the output itself and no merge runs: one segment a group (its
// state, normalised, is the row), a chain without lse (the drafts target's merge writes rows past
// a count and the lse), the group's own cut, by a kernel with the epilogue.
inline bool split_writes_output(const Plan& plan, const VerifyParams& p) {
  return has_output_epilogue(plan.split_kernel, p.kv_format != static_cast<int>(KvFormat::kBf16)) &&
         plan.num_splits == 1 && !plan.balance_segments && p.draft_kind == 0 && p.lse == nullptr;
}
// The plan's launches: its split kernel (the balanced cut's, or the call's own), then the merge
// unless the split kernel writes the output.
inline gpuError_t launch_call(VerifyParams p, const Plan& plan, gpuStream_t stream) {
  p.split_writes_output = split_writes_output(plan, p);
  const gpuError_t e = plan.balance_segments ? launch_split_balanced(p, plan.split_kernel, stream)
                                             : launch_split_for(p, plan.split_kernel, stream);
  if (e != gpuSuccess || p.split_writes_output) return e;
  return launch_merge(p, plan, stream);
}

// The current device as the launch plan needs it; false where the runtime cannot say.
bool describe_current_device(Device* out);
// Whether the merge code loaded for the current device can wait for the split kernel's writes
// (compiled for sm_90+; not when the driver JIT-compiled older PTX): a dependent launch needs it.
bool merge_waits_for_split();
// Whether the split code loaded for the current device has the two-pair ping-pong kernel (sm_90a
// code only; a stub elsewhere, which is never launched).
bool pingpong_two_pairs_loaded();

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_KERNELS_H_
