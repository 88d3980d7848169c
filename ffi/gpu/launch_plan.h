// How one call is launched, decided on the host from the device's kind, the merge's compiled
// architecture and an environment override only (static shapes may join them), never from
// device data, so the same launches are made every call and a command buffer (CUDA/HIP graph)
// can capture them.
//
// The merge follows the split kernel as a programmatic dependent launch (PDL, NVIDIA sm_90+;
// its launch and prologue overlap the split kernel's tail) when the split grid has at most 2 CTAs
// an SM, on sm_90+ GPUs where the loaded merge code was compiled for sm_90+ (it then has the
// dependency wait). Measured on an H200 through JAX (benchmarks/NOTES.md version 8, command
// buffers on, PDL against plain, two rounds): where the split grid fills 3 CTAs an SM PDL cost
// (128k R=4 80.2 / 82.5 vs 77.9 / 78.9 us; SWA R=16 12.9 vs 12.1 in version 7), at 2 or fewer
// it paid or was even (SWA R=1 6.9 vs 7.8, 8k R=4 10.9 vs 11.7, 8k R=8 14.9 vs 17.2, 32k R=4
// even). The kernels alone (kernel_bench) had shown PDL ahead everywhere (version 7): only the
// JAX figures decide. MUSE_ATTN_PDL=1 / 0 forces it on / off (benchmarks, tests); read once a
// process. compute-sanitizer needs neither: it runs clean through JAX with PDL on once XLA's
// autotuner is off (README, Troubleshooting).
//
// Tried and measured slower (NOTES.md version 6): 8 warps a CTA splitting every tile's keys in
// two halves for small grids, and a PDL trigger after the split kernel's stores.
//
// The merge's warps a row (merge_kernel.cu.cc) are chosen here too, from the split count, the
// rows and the multiprocessor count; and the split kernel: the ping-pong one (two warpgroups a
// CTA, split_kernel.cu.cc) on sm_90 GPUs where segments are long (kPingpongMinSegmentTiles), the
// one that takes two-tile segments as one step where latency rules (split_pairs), the one that
// issues a 4-tile segment's copies all in its prologue (split_fill_ring).
#ifndef MUSE_ATTN_GPU_LAUNCH_PLAN_H_
#define MUSE_ATTN_GPU_LAUNCH_PLAN_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "gpu/kernels.h"
#include "gpu/vendor.h"
#include "muse_attn/geometry.h"

namespace muse_attn::gpu {

struct LaunchPlan {
  bool merge_pdl = false;       // the merge is a programmatic dependent launch of the split kernel
  int merge_warps = 1;          // warps that share one output row's segments in the merge
  bool merge_by_lane = true;    // the merge weighs a segment on one lane (merge_weights_by_lane)
  bool split_pingpong = false;  // the ping-pong split kernel (split_kernel.cu.cc; NVIDIA, D = 64)
  bool split_pairs = false;     // split_kernel taking two-tile segments as one step (D = 64)
  bool split_fill_ring = false; // split_kernel issuing a kStages-tile segment's copies at once (D = 64)
  bool split_pp_two_pairs = false;  // with split_pingpong: as two pairs a CTA, one CTA an SM
};

// The ping-pong split kernel (two warpgroups a CTA taking alternate tiles) where a segment can
// have at least this many tiles and the split grid fits 2 of its CTAs an SM, on sm_90 GPUs (it
// was tuned for the warpgroup MMA). Kernels alone on an H200 (benchmarks/NOTES.md version 14,
// graph, us, ping-pong against split_kernel): full 128k R=1 (16 tiles a segment) 24.4 vs 25.7,
// 128k R=2 (32) 40.05 vs 42.0, 32k R=4 (16) 24.1 vs 25.0, 32k R=8 (32) 40.05 vs 41.6; but 32k
// R=2 (8) 13.6 vs 13.25, 32k R=1 (4) 10.1 vs 9.7 and every latency-bound config slower.
inline constexpr int kPingpongMinSegmentTiles = 16;

// The ping-pong kernel as two pairs a CTA, one CTA an SM, each pair on its own segment (the same
// work as two one-pair CTAs an SM, without a CTA placed second on its SM, which ran slower than the
// first, benchmarks/NOTES.md version 41), where a segment can have at least this many tiles and its
// CTAs fit one an SM. On an H200 (NOTES.md version 42, us, one pair / two pairs), through JAX
// (device clock, command buffers on, 3 runs each, A B B A A B): 128 tiles a segment, full 128k R=8
// 127.84-127.88 / 126.89-126.94; at 64 tiles at most 0.1 either way: 32k R=16 67.67-67.68 /
// 67.77-67.82, 64k R=8 67.16-67.27 / 67.09-67.15. The kernels alone (graph, three rounds) had
// favoured 64 tiles too (32k R=16 68.05-68.09 / 67.69-67.71, 64k R=8 67.99-68.08 / 67.55-67.59; 128
// tiles: 64k R=16 128.7-129.0 / 126.9-127.7, 128k R=8 129.0-130.1 / 127.8-128.2), 32 tiles even
// (32k R=8 37.89 / 37.78-37.87), 16 slower (32k R=4 23.22 / 23.38, another run): only the JAX
// figures decide. Past one wave (forced at full 128k R=4, 33 splits: 136 CTAs on 132 SMs) 92 us
// against 68; by default the one-wave condition keeps that one out (the tile bound did too, 63
// tiles, until version 45), and others with an odd split count (e.g. full 128k R=8 on 124 SMs: 15
// splits, 137 tiles, 128 CTAs).
// Lowered from 128 to 32 in version 45, on head's kernels through JAX (device clock, command buffers
// on, one pair / two pairs forced by MUSE_ATTN_PP_TWO_PAIRS=1, 3 runs each a call, A B B A A B,
// benchmarks/results/h200_v45_two_pairs_jax_ab.txt): 32 tiles, full 32k R=8 38.22-38.28 /
// 38.12-38.18 (two calls), 128k R=2 38.22-38.24 / 38.19-38.20; 64 tiles, 32k R=16 68.39-68.49 / 68.11-68.17, 64k
// R=8 68.91-69.07 / 68.53-68.60 (session 42's 32k R=16, with that version's merge, had read 0.1
// the other way). 16 tiles stay one pair (32k R=4, kernels alone, version 42: 23.22 / 23.38).
inline constexpr int kPpTwoPairsMinSegmentTiles = 32;

// split_kernel_pairs<64> (a segment of exactly two tiles as one 128-key step: both tiles' score
// MMAs in one round trip, one softmax, both P V in one round trip; the warpgroup MMA only) where
// no segment has more than two tiles and most SMs hold one split CTA, or up to two where the
// merge is a programmatic dependent (below; versions 26 to 32 also asked that its CTAs fit). Kernels alone on an H200
// (benchmarks/NOTES.md version 16, graph, us, against split_kernel<64>): SWA R=2 5.15 vs
// 5.33, SWA R=4 (136 CTAs) 5.78-5.81 vs 6.17-6.19, 2k R=2 5.27 vs 5.37, 2k R=4 (128 CTAs) 5.82
// vs 5.95, 8k R=1 6.06 vs 6.10; but 8k R=2 (256 CTAs, 2 an SM) 7.77 vs 7.31 (a CTA waits for
// both tiles before any math), and the step compiled into every split_kernel cost 0.5 us where
// segments are longer (its registers, 145 -> 165: 32k R=1 10.30 vs 9.72). With the second
// tile's wait under the first tile's score MMAs (version 17): SWA R=2 5.10 vs 5.17, R=4 5.72
// vs 5.85, 2k R=2 4.98 vs 5.06, R=4 5.74 vs 5.89, 8k R=1 5.90 vs 6.09; at 2 CTAs an SM still
// slower (2k R=8 7.61 vs 7.04-7.10, 8k R=2 7.63 vs 7.42-7.51), so the bound stayed. On version
// 25's kernels (benchmarks/NOTES.md version 26, kernels alone, graph, two rounds, per-tile /
// two-tile) it gains at 2 CTAs an SM too where the merge, a programmatic dependent, has CTAs that
// fit beside the split CTAs (split + merge CTAs at most kFillRingMaxCtasPerSm an SM, as for the
// fill ring below): 8k R=2 (256 + 128 CTAs) 6.47-6.48 / 6.30, 2k R=8 (256 + 128) 6.42 / 6.28-6.29,
// 4k R=4 6.66-6.67 / 6.47-6.48, 16k R=1 6.75-6.76 / 6.52-6.53, SWA 32k R=6 (204 + 192, at the
// bound) 6.36-6.37 / 6.05-6.06, 2k R=7 (224 + 112) 6.38-6.39 / 6.32-6.34; and loses where they
// do not: 1k R=16 (256 + 256) 6.71 / 6.82-6.84, SWA R=7 (238 + 224) 6.67-6.68 / 6.77-6.78. The
// bound is empirical: 3k R=5 (240 + 160, just past it) gains too (6.62 / 6.48-6.49), left off.
// Version 32 capped the two-tile kernel at 152 registers (split_kernel.cu.cc, kPairsMaxRegs),
// which leaves more room for the merge's CTAs beside two split CTAs; since then it gains at 2
// an SM whether or not every merge CTA fits (benchmarks/NOTES.md version 32, kernels alone,
// graph, two rounds, per-tile / two-tile, us): 1k R=16 (256 + 256) 6.13 / 5.84, SWA R=7 (238 +
// 224) 6.24 / 5.90, 1k R=13 (208 + 208) 5.83 / 5.50; so the bound at 2 an SM now asks only that
// the merge be a programmatic dependent (beside a plain merge it was never measured).
inline constexpr int kPairsMaxCtasPerSmX2 = 3;  // split CTAs <= 1.5 x SMs: whatever the merge
inline constexpr int kPairsMaxCtasPerSmPdl = 2;  // up to 2 an SM beside a dependent merge

// split_kernel_fill_ring<64> (a segment of exactly kStages = 4 tiles issues all four tiles'
// copies in the prologue instead of the fourth in the loop's first iteration) where no segment
// has more than kStages tiles and at least one may have that many, unless the merge is a
// programmatic dependent whose CTAs cannot all start beside the split CTAs: split + merge CTAs
// more than 3 an SM. The bound is empirical (at full 2k it lies between 416 and 448 CTAs on 132
// SMs) and near what registers allow: a split CTA holds 152 x 128 = 19.5 K of an SM's 64 K, so two
// leave room for one merge CTA of 256 threads (at most 104 registers; the D = 64 merges take 46-80)
// and one for two or three, by the merge's registers. Why it
// loses where they do not fit is not known (the split alone gains there; with the timeline's
// stamps compiled in it gains); the rule is what was measured. Kernels alone on an H200
// (benchmarks/NOTES.md version 25, graph, us, both rounds alike; off / on, split + merge CTAs):
// full 2k at 8 splits R=11 (176 + 176) 8.15 / 7.68, R=12 (192 + 192) 8.19 / 7.90, R=13 (208 +
// 208) 8.30 / 8.18, R=14 (224 + 224) 8.56 / 8.82, R=16 (256 + 256) 8.67 / 9.03; 8k R=4 (256 +
// 128) 8.60 / 8.47, 32k R=1 (256 + 128) 8.72 / 8.55, 16k R=2 (256 + 128) 8.65 / 8.52; with the
// merge a plain launch (MUSE_ATTN_PDL=0) 2k R=16 9.05 / 8.88, 8k R=4 9.48 / 9.35. The bound
// gives up R=13's 0.12 us (416 CTAs) to stay clear of R=14's loss; full 4k R=8 at 16 splits (256
// + 128) takes it and does not move (8.56 / 8.57, version 25's first call). Where segments have 8
// tiles it costs 0.1-0.15 us (8k R=8 12.84 / 12.95: the same schedule, one more register), hence
// only at kStages tiles. Through JAX (version 24, the same kernel as a build knob, device clock): 8k
// R=4 8.29 -> 8.07, 32k R=1 8.40 -> 8.16, 2k R=16 8.35 -> 8.57.
inline constexpr int kFillRingMaxCtasPerSm = 3;

// Most 64-key tiles one segment of the call can have (static: the block-table width, the window
// and the split count), as jax_muse_attn's Shapes.max_tiles cut by the split count.
inline int max_segment_tiles(const VerifyParams& p) {
  int64_t tiles = (int64_t{p.pages} * kPageSize + kTileKeys - 1) / kTileKeys;
  if (p.window > 0) {  // 64-bit: window + tokens may pass INT32_MAX
    const int64_t span = int64_t{p.window} + p.tokens - 1;
    tiles = std::min(tiles, (span + kTileKeys - 1) / kTileKeys + 1);
  }
  const int64_t splits = p.num_splits.divisor() > 0 ? p.num_splits.divisor() : 1;
  return max_i(static_cast<int>((tiles + splits - 1) / splits), kMinTilesPerSegment);
}

// The merge (merge_kernel.cu.cc): W warps a row, W a power of 2 up to kMergeMaxWarps; a warp
// loads up to kMergeBatch segments at a time; a CTA is max(256 threads, one row's W warps).
inline constexpr int kMergeMaxWarps = 8;
inline constexpr int kMergeBatch = 16;
__host__ __device__ constexpr int merge_threads(int warps) {
  return warps * kWarpSize > 256 ? warps * kWarpSize : 256;
}
__host__ __device__ constexpr int merge_rows_per_cta(int warps) {
  return merge_threads(warps) / (warps * kWarpSize);
}
// The merge's CTAs a (request, KV head) group: its grid x.
constexpr int merge_row_blocks(int rows, int warps) {
  return (rows + merge_rows_per_cta(warps) - 1) / merge_rows_per_cta(warps);
}
// The merge's grid at W = warps: (row blocks, groups), as launch_merge launches it.
inline dim3 merge_grid(const VerifyParams& p, int warps) {
  return dim3(static_cast<unsigned>(merge_row_blocks(p.rows, warps)),
              p.num_requests * p.num_kv_heads.divisor());
}

// Warps a row: one where one warp loads all of a row's segments in one batch (at most
// kMergeBatch: the row needs no meet of warps in shared memory); else the fewest that load every
// segment in one batch (up to 128 segments; past that they loop), then doubled while each warp
// would still fold more than kMergeWarpSegments and the merge's CTAs stay within max_ctas_per_sm
// an SM (as a programmatic dependent they start beside the split CTAs; a second wave of them
// waits): one, or kMergeCtasPerSmBesidePingpong beside the ping-pong split kernel (below). One warp
// at 10-16 segments (version 30, kernels alone, H200, graph, two rounds, us, 2 warps / 1): full
// 2k R=3 4.75 / 4.57-4.58, R=4 5.19-5.20 / 5.02, R=2 4.48 / 4.44-4.45, R=1 at 16 splits 4.25 / 4.19-4.20,
// 1k R=1 4.08 / 4.01-4.02, R=2 4.14-4.15 / 4.10-4.11 (with version 12's merge 2 had won at 2k R=1,
// 5.10 / 5.42; tuned on an H200 at D = 64 only). Before it (benchmarks/NOTES.md version 12,
// graph, us): SWA R=1 (17 segments) 2 warps 5.11, 4: 4.90; full 2k R=1 (16) 1: 5.42, 2: 5.10;
// 8k R=1 (64) 4: 6.14, 8: 5.92; but 8k R=2 (64) 4: 7.31, 8 (256 CTAs): 7.90; 8k R=4 (32) 2: 9.51,
// 4 (256 CTAs): 10.27. With one tile a segment (attention.py): SWA R=1 (34 segments) 8 warps
// 4.75, 4: 4.65; the bound 9 beat 8 and 16 summed over SWA / 2k R = 1-4 and 8k R = 1-2.
#if defined(MUSE_ATTN_MERGE_WARP_SEGMENTS)  // a tuning knob for benchmarks/kernel_bench.cu
inline constexpr int kMergeWarpSegments = MUSE_ATTN_MERGE_WARP_SEGMENTS;
#else
inline constexpr int kMergeWarpSegments = 9;
#endif
// Whether a merge warp loads and weighs a segment's (m, l) on one lane (the weight shuffled to
// the others; fewer instructions) or on every lane (no shuffle chain between the loads and the
// fold): by one lane while a warp folds at most kMergeByLaneSegments segments. Kernels alone on
// an H200, both ways forced in one run (benchmarks/NOTES.md version 19, graph, us, one lane /
// every lane): SWA R=1 (9 a warp) 4.56-4.57 / 4.62-4.63, full 2k R=2 (8) 4.85 / 5.03; full 32k
// R=2 (16) 14.10-14.13 / 13.49-13.53, 128k R=1 (16) 24.64-24.65 / 24.27-24.28, 8k R=8 (16, one
// warp a row) 13.20-13.21 / 12.64-12.79, but full 2k R=8 (16, one warp) 6.90-6.91 / 6.95-7.05.
// With the partial o as bf16 (version 22, kernels alone, two rounds, every lane / one lane at 16
// a warp): 8k R=2 6.70 / 6.43, R=4 8.48 / 8.30, 32k R=1 9.25 / 9.17, R=2 13.33 / 13.10, R=4
// 24.45 / 23.86, R=8 40.05 / 39.70, 128k R=1 24.58 / 23.95, R=2 40.05 / 39.38; slower only at 2k
// R=8 6.51 / 6.63 and 8k R=8 13.15 / 13.30 (one warp a row; 32k R=8, the same merge after the
// ping-pong split kernel, gains 0.35: not understood). Past 16 a warp
// (more than 128 splits: TP8's one KV head a device, GPUs with more SMs) every lane, unmeasured
// since version 19. Tuned on an H200 only; on AMD warp_max is a 6-step butterfly (vendor.h) and
// the trade is unmeasured.
#if defined(MUSE_ATTN_MERGE_BY_LANE_SEGMENTS)  // a tuning knob for benchmarks/kernel_bench.cu
inline constexpr int kMergeByLaneSegments = MUSE_ATTN_MERGE_BY_LANE_SEGMENTS;
#else
inline constexpr int kMergeByLaneSegments = 16;
#endif
constexpr bool merge_weights_by_lane(int num_splits, int warps) {
  return (num_splits + warps - 1) / warps <= kMergeByLaneSegments;
}
// Beside the ping-pong split kernel (segments of 16 tiles or more) the merge's CTAs may be 2 an
// SM. Kernels alone on an H200 (benchmarks/NOTES.md version 43, graph, two rounds, us, 2 an SM /
// 1): full 128k R=2 (64 splits, 8 warps / 4) 37.86-37.87 / 38.19, 32k R=4 (32, 4 / 2)
// 22.96-22.99 / 23.38, 128k R=4 (33) 68.40-68.41 / 68.36-68.39 (the same 4); but beside the
// other split kernels (shorter segments) slower: 8k R=2 (64, pairs) 5.95-6.01 / 5.79-5.81, 8k R=4
// (32) 8.03-8.06 / 7.79-7.82, 32k R=2 (64) 12.72-12.76 / 12.50-12.53.
#if defined(MUSE_ATTN_MERGE_CTAS_PER_SM_BESIDE_PINGPONG)  // a tuning knob (1: as before version 43)
inline constexpr int kMergeCtasPerSmBesidePingpong = MUSE_ATTN_MERGE_CTAS_PER_SM_BESIDE_PINGPONG;
#else
inline constexpr int kMergeCtasPerSmBesidePingpong = 2;
#endif
inline int merge_warps_for(int num_splits, int64_t groups, int rows, int sms,
                           int max_ctas_per_sm = 1) {
  if (num_splits <= kMergeBatch) return 1;
  int warps = 1;
  while (warps < kMergeMaxWarps && warps * kMergeBatch < num_splits) warps *= 2;
  while (warps < kMergeMaxWarps && warps * kMergeWarpSegments < num_splits &&
         groups * merge_row_blocks(rows, 2 * warps) <= int64_t{max_ctas_per_sm} * sms)
    warps *= 2;
  return warps;
}

// A 1 / 0 / unset switch in the environment: 1 forces on, 0 forces off, -1 leaves the choice
// to the launch plan (anything else set counts as unset).
inline int env_force(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return -1;
  return std::strcmp(v, "1") == 0 ? 1 : std::strcmp(v, "0") == 0 ? 0 : -1;
}

// Split CTAs of the call (split_grid, as launch_split launches it).
inline int64_t split_ctas(const VerifyParams& p) {
  const dim3 g = split_grid(p);
  return int64_t{g.x} * g.y * g.z;
}

// Multiprocessors of the current device, asked of the runtime once a device (devices 0-63;
// past that every call); 0 when the runtime cannot say.
inline int device_multiprocessors() {
  static std::atomic<int> known[64];  // 0: not asked yet (static storage starts zeroed)
  int dev = 0;
  if (current_device(&dev) != gpuSuccess) return 0;
  const bool cached = dev >= 0 && dev < 64;
  if (cached) {
    if (const int n = known[dev].load(std::memory_order_relaxed); n > 0) return n;
  }
  int sms = 0;
  if (multiprocessor_count(&sms) != gpuSuccess || sms <= 0) return 0;
  if (cached) known[dev].store(sms, std::memory_order_relaxed);
  return sms;
}

inline LaunchPlan plan_launch(const VerifyParams& p) {
  LaunchPlan plan;
  const int sms = device_multiprocessors();  // 0: then the fewest merge warps, no PDL by size
#if defined(MUSE_ATTN_CUDA)
  const int64_t ctas = split_ctas(p);
  const bool small = sms > 0 && ctas <= int64_t{2} * sms;
  // MUSE_ATTN_PINGPONG=1 / 0 forces the ping-pong split kernel on / off at D = 64 (tests,
  // benchmarks); read once a process.
  static const int pingpong = env_force("MUSE_ATTN_PINGPONG");
  static const bool sm90_device = device_compute_major() == 9;
  const int tiles = max_segment_tiles(p);
  plan.split_pingpong = p.head_dim == 64 &&
                        (pingpong == 1 || (pingpong == -1 && sm90_device && small &&
                                           tiles >= kPingpongMinSegmentTiles));
#endif
  plan.merge_warps = merge_warps_for(p.num_splits.divisor(),
                                     int64_t{p.num_requests} * p.num_kv_heads.divisor(), p.rows, sms,
                                     plan.split_pingpong ? kMergeCtasPerSmBesidePingpong : 1);
  // MUSE_ATTN_MERGE_BY_LANE=1 / 0 forces the merge's one-lane / every-lane weighing (tests,
  // benchmarks); read once a process.
  static const int by_lane = env_force("MUSE_ATTN_MERGE_BY_LANE");
  plan.merge_by_lane = by_lane == -1
                           ? merge_weights_by_lane(p.num_splits.divisor(), plan.merge_warps)
                           : by_lane == 1;
#if defined(MUSE_ATTN_CUDA)
  static const int forced = env_force("MUSE_ATTN_PDL");
  // One kind of GPU a process, as XLA assumes; the merge's code must have the wait in it.
  static const bool sm90 = device_supports_pdl() && merge_waits_for_split();
  plan.merge_pdl = sm90 && forced != 0 && (forced == 1 || small);
  // Whether every merge CTA, a programmatic dependent, can start beside the split CTAs.
  const dim3 mg = merge_grid(p, plan.merge_warps);
  const int64_t merge_ctas = int64_t{mg.x} * mg.y;
  const bool pdl_merge_fits =
      plan.merge_pdl && ctas + merge_ctas <= int64_t{kFillRingMaxCtasPerSm} * sms;
  // The ping-pong kernel as two pairs a CTA (kPpTwoPairsMinSegmentTiles) where its CTAs, one an
  // SM, fit in one wave; MUSE_ATTN_PP_TWO_PAIRS=1 / 0 forces it on (where the ping-pong kernel
  // runs, in any number of waves) / off (tests, benchmarks); read once a process. Never where the
  // loaded module lacks it (sm_90 code alone, without sm_90a's).
  static const int two_pairs = env_force("MUSE_ATTN_PP_TWO_PAIRS");
  static const bool two_pairs_loaded = sm90_device && pingpong_two_pairs_loaded();
  const dim3 g2 = split_grid_two_pairs(p);
  const int64_t two_pair_ctas = int64_t{g2.x} * g2.y * g2.z;
  plan.split_pp_two_pairs =
      plan.split_pingpong && two_pairs_loaded &&
      (two_pairs == 1 || (two_pairs == -1 && tiles >= kPpTwoPairsMinSegmentTiles &&
                          two_pair_ctas <= sms));
  // MUSE_ATTN_PAIRS=1 / 0 forces split_kernel_pairs<64> on / off where the ping-pong kernel is
  // not chosen (tests, benchmarks); read once a process.
  static const int pairs = env_force("MUSE_ATTN_PAIRS");
  plan.split_pairs =
      p.head_dim == 64 && !plan.split_pingpong &&
      (pairs == 1 ||
       (pairs == -1 && sm90_device && sms > 0 && tiles <= 2 &&
        (2 * ctas <= int64_t{kPairsMaxCtasPerSmX2} * sms ||
         (plan.merge_pdl && ctas <= int64_t{kPairsMaxCtasPerSmPdl} * sms))));
  // MUSE_ATTN_FILL_RING=1 / 0 forces split_kernel_fill_ring<64> on / off where neither
  // variant above is chosen (tests, benchmarks); read once a process.
  static const int fill_ring = env_force("MUSE_ATTN_FILL_RING");
  const bool merge_fits = !plan.merge_pdl || pdl_merge_fits;
  plan.split_fill_ring =
      p.head_dim == 64 && !plan.split_pingpong && !plan.split_pairs &&
      (fill_ring == 1 || (fill_ring == -1 && sm90_device && tiles == Stages<64>::value && merge_fits));
#else
  (void)p;  // AMD: plain launches
#endif
  return plan;
}

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_LAUNCH_PLAN_H_
