// Launchers of the GPU kernels (split_kernel.cu.cc, merge_kernel.cu.cc) and their arguments.
// Host code (verify_attention_gpu.cc) fills VerifyParams from the FFI buffers; launch
// geometry comes only from its static fields, never from device data.
#ifndef MUSE_ATTN_GPU_KERNELS_H_
#define MUSE_ATTN_GPU_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "gpu/vendor.h"
#include "muse_attn/fast_div.h"

namespace muse_attn::gpu {

struct VerifyParams {
  // Ordered by first use in the split kernel, because the parameters live in the constant bank
  // (c[0x0][0x210] on) and an SM's first read of each 64-byte line is a miss that stalls the
  // warp: ncu put ~12 % of a latency-bound split launch's PC samples on three such misses, one
  // after the other, before seq_lens was even asked for (NOTES.md version 36). The first 48
  // bytes (the line the global-memory descriptor at c[0x0][0x208] opens) hold all the kernel
  // needs to ask for seq_lens; the second line what Q's copies and the block-table reads need.
  // Kernels alone on an H200 against the old order (NOTES.md version 37): 0.08-0.09 us off full
  // 8k R = 2-4, 32k R=1 and 2k R=16, 0.2 off SWA R=16, 0-0.05 at the other latency-bound
  // configs measured.
  // First line: which request, padding or not, its length.
  const int32_t* seq_lens;    // [>= R]
  const int32_t* num_reqs;    // scalar: real requests (clamped to [0, R] on the device)
  FastDiv num_kv_heads;       // Hkv (the count the kernels divide by, as a multiply-shift
                              // divisor, fast_div.h; .divisor() is the count itself)
  int num_reqs_static;        // real requests if known at trace time (*num_reqs not read), or -1
  int num_requests;           // R
  int tokens;                 // NQ
  int pages;                  // block-table width
  int window;                 // 0: full attention
  // Second line: Q's copies, the segment's cut, the block table and the cache.
  const uint16_t* q;          // [NQ*R, Hq, D] bf16
  const uint16_t* kv;         // [num_blocks, Hkv, 16, 2D] bf16
  const int32_t* table;       // [>= R, pages]
  int64_t table_stride;       // elements between block-table rows
  FastDiv qpk;                // query heads a KV head
  FastDiv num_splits;         // S
  int rows;                   // NQ * qpk (blocks of kMaxRows)
  int num_q_heads;
  // The rest: the mask, the partials, the merge (in an order that leaves sm_80's D = 128 merge
  // without spills; five of seven orders tried spilled 8 bytes there).
  int64_t num_blocks;
  float scale_log2;           // scale * log2(e)
  int head_dim;
  uint16_t* out;              // like q
  uint16_t* part_o;           // [R*Hkv, S, rows, D] bf16, rows in partial_o_order.h's order
  float* part_ml;             // [R*Hkv, S, rows, 2]
#if defined(MUSE_ATTN_TIMELINE)
  uint64_t* timeline;         // timeline.h stamps (kernel_bench only)
#endif
};
// The first line's fields in its 48 bytes, the second's in the next 64 (the bank's lines are
// 64-byte aligned and the parameters start 16 bytes into one).
static_assert(offsetof(VerifyParams, window) + sizeof(int) <= 48, "first line of the parameters");
static_assert(offsetof(VerifyParams, num_q_heads) + sizeof(int) <= 48 + 64, "second line");

// The static sizes of VerifyParams, which launch geometry and plan_launch() read (the
// pointers and num_blocks / table_stride / scale_log2 left unset): filled once here for the
// handler (verify_attention_gpu.cc) and the plan query (launch_plan_query.cc) alike, so the
// plan Python is told is the plan a call of those sizes launches.
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

inline constexpr int kMaxRows = 64;  // query rows one split CTA holds (4 warps x 16)
// (request, KV head) groups a call may have: the kernels' grid y (the CUDA / HIP limit).
// jax_muse_attn/attention.py refuses more at trace time (_MAX_GPU_GROUPS).
inline constexpr int kMaxGroups = 65535;

// The split kernel's tiles in flight (shared-memory stages; split_kernel.cu.cc, and the launch
// plan's split_fill_ring). NVIDIA: 4 x 16 KiB at D = 64 (3 CTAs an SM), 2 x 32
// KiB at D = 128 (more would spill registers; 3 vs 4 stages measured the same at D = 64; 5 and 6,
// 2 CTAs an SM: 0.22-0.36 us faster at full 8k R=4 and 32k R=1, slower at full 2k R=16 (4-tile
// segments too), at 8-tile segments and where 3 CTAs an SM are needed: NOTES.md version 24). AMD:
// the LDS of a workgroup is 64 KiB on gfx942, so 3 stages at D = 64 and 1 at D = 128 (the HIP
// copies go through registers anyway).
template <int D>
struct Stages {
#if defined(MUSE_ATTN_SPLIT_STAGES_D64)  // a tuning knob for benchmarks/kernel_bench.cu
  static constexpr int value = D == 64 ? MUSE_ATTN_SPLIT_STAGES_D64 : 2;
#elif defined(MUSE_ATTN_HIP)
  static constexpr int value = D == 64 ? 3 : 1;
#else
  static constexpr int value = D == 64 ? 4 : 2;
#endif
};

// The split kernel's grid: (segments, groups, row blocks of kMaxRows).
inline dim3 split_grid(const VerifyParams& p) {
  return dim3(p.num_splits.divisor(), p.num_requests * p.num_kv_heads.divisor(),
              (p.rows + kMaxRows - 1) / kMaxRows);
}
// The ping-pong kernel as two pairs a CTA (split_kernel_pp2, NVIDIA): segments 2x and 2x + 1 in CTA x.
inline dim3 split_grid_two_pairs(const VerifyParams& p) {
  dim3 g = split_grid(p);
  g.x = (g.x + 1) / 2;
  return g;
}

struct LaunchPlan;  // launch_plan.h: plan_launch(p) decides it on the host (device kind, env)

// Split: grid (S, R * Hkv, ceil(rows / 64)); every CTA finds its tiles from seq_lens and exits
// when it has none.
gpuError_t launch_split(const VerifyParams& p, const LaunchPlan& plan, gpuStream_t stream);
// Merge: 1 to 8 warps a row by the split count (merge_kernel.cu.cc); writes every output row (zeros
// where nothing was seen).
// A programmatic dependent launch of the split kernel when plan.merge_pdl.
gpuError_t launch_merge(const VerifyParams& p, const LaunchPlan& plan, gpuStream_t stream);
// Whether the merge code loaded for the current device waits for the split kernel's writes
// (grid_dependency_wait() compiled for sm_90+): false when the module was built for an older
// architecture and the driver JIT-compiled its PTX (e.g. CMAKE_CUDA_ARCHITECTURES=80 on an
// H100), whatever the device supports. A programmatic dependent launch needs it.
bool merge_waits_for_split();
// Whether the split code loaded for the current device has the ping-pong kernel's two-pairs-a-CTA
// form (split_kernel_pp2, built for sm_90a only: the warpgroup MMA's 128 registers a thread); a
// module with sm_90 code alone has a stub there, which the launch plan never picks.
bool pingpong_two_pairs_loaded();

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_KERNELS_H_
