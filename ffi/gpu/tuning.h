// The launch plan's measured thresholds (launch_plan.h applies them), kept apart from the rules
// that use them. Each was measured on NVIDIA H100 / H200 (sm_90, 132 SMs) with the benchmark or
// kernel_bench; docs/DESIGN.md ("Tuning") gives the measurement behind each and the command that
// re-measures it. Other GPUs take the same table until they are measured.
#ifndef MUSE_ATTN_GPU_TUNING_H_
#define MUSE_ATTN_GPU_TUNING_H_

namespace muse_attn::gpu {

struct Tuning {
  // Split count.
  int ctas_per_sm_d64;             // split CTAs an SM holds at D = 64 (registers, shared memory)
  int ctas_per_sm_d128;            // ... at D = 128
  int min_tiles_per_segment;       // a segment's partials cost half a tile's bytes: 2 tiles at least
  int one_tile_sm_num, one_tile_sm_den;  // 1 tile a segment where split CTAs <= num/den of the SMs
  int cheap_merge_splits;          // past one CTA an SM, more segments pay up to this many
  int tiles_per_segment_past_one_wave;  // ... or while segments keep this many tiles
  int two_per_sm_tiles_lo;         // 2 CTAs an SM (not 3) for segments of (lo, hi) tiles
  int two_per_sm_tiles_hi;         // ... with the one-warpgroup split kernel
  int two_per_sm_tiles_hi_pingpong;   // ... where the ping-pong kernel can run
  int two_per_sm_tiles_hi_two_pairs;  // ... up to here where it runs as two pairs a CTA
  int max_segment_tiles;           // segments this long at most (past it, more of them)
  int cpu_splits;                  // segments a group on the CPU handler
  // Split kernel.
  int pingpong_min_segment_tiles;  // the ping-pong kernel from segments this long (2 CTAs an SM)
  int two_pairs_min_segment_tiles;  // ... as two pairs a CTA from segments this long (one wave)
  // One segment a group (no merge) where its CTAs are >= sm_num / sm_den of the SMs, for groups
  // of up to max_tiles tiles (rows by max_tiles): a CTA an SM reads slower than two, which short
  // groups' start and merge costs outweigh at a lower share than long groups'.
  struct WholeGroups {
    int max_tiles, sm_num, sm_den;
  } whole_groups[2];
  int two_tile_max_ctas_per_sm_x2;  // two-tile steps where split CTAs <= this/2 an SM
  int two_tile_max_ctas_per_sm_pdl;  // ... or this many an SM beside a dependent merge
  int fill_ring_max_ctas_per_sm;   // fill ring only where split + dependent merge CTAs fit this many
  // Merge.
  int merge_max_split_ctas_per_sm;  // merge as a dependent launch where split CTAs <= this an SM
  int merge_warp_segments;         // widen a row's warps while each folds more than this many
  int merge_by_lane_segments;      // weigh a segment on one lane while a warp folds <= this many
  int merge_ctas_per_sm_beside_pingpong;  // merge CTAs an SM the widening may reach there (else 1)
  // Segments.
  int balance_min_segment_tiles;   // the balanced cut where the plan's segments are this long
  int balance_max_requests;        // ... and a call has at most this many requests
  // Loads.
  bool cache_window_kv;            // a windowed call's K/V through the caches (per_tile_cached; AMD)
};

inline constexpr Tuning kTuning = {
    /*ctas_per_sm_d64=*/3,
    /*ctas_per_sm_d128=*/2,
    /*min_tiles_per_segment=*/2,
    /*one_tile_sm_num=*/3,
    /*one_tile_sm_den=*/5,
    /*cheap_merge_splits=*/32,
    /*tiles_per_segment_past_one_wave=*/4,
    /*two_per_sm_tiles_lo=*/4,
    /*two_per_sm_tiles_hi=*/32,
    /*two_per_sm_tiles_hi_pingpong=*/128,
    /*two_per_sm_tiles_hi_two_pairs=*/256,
    /*max_segment_tiles=*/128,
    /*cpu_splits=*/8,
    /*pingpong_min_segment_tiles=*/16,
    /*two_pairs_min_segment_tiles=*/32,
    /*whole_groups=*/{{/*max_tiles=*/64, 2, 3}, {/*max_tiles=*/128, 8, 11}},
    /*two_tile_max_ctas_per_sm_x2=*/3,
    /*two_tile_max_ctas_per_sm_pdl=*/2,
    /*fill_ring_max_ctas_per_sm=*/3,
    /*merge_max_split_ctas_per_sm=*/2,
    /*merge_warp_segments=*/9,
    /*merge_by_lane_segments=*/16,
    /*merge_ctas_per_sm_beside_pingpong=*/2,
    /*balance_min_segment_tiles=*/64,
    /*balance_max_requests=*/64,
    /*cache_window_kv=*/false,  // no NVIDIA kernel has it
};

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_TUNING_H_
