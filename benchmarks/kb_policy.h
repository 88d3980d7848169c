// The split count kernel_bench uses when none is given: jax_muse_attn.default_num_splits
// (jax_muse_attn/attention.py) for D = 64 and one 64-row block a group, written again in C++
// because kernel_bench runs without Python. tests/test_kb_policy.py compiles this header on the
// host and checks it against the Python function over a grid of shapes.
#ifndef MUSE_ATTN_BENCHMARKS_KB_POLICY_H_
#define MUSE_ATTN_BENCHMARKS_KB_POLICY_H_

#include <algorithm>


namespace kb_policy {

inline int default_splits(int groups, int sms, int max_tiles) {
  int full = 3 * sms / groups;  // D = 64: 3 CTAs an SM (_CTAS_PER_SM)
  if (full > 0 && 4 * full < max_tiles && max_tiles < 16 * full)  // _TWO_PER_SM_TILES
    full = 2 * sms / groups;
  // _CHEAP_MERGE_SPLITS, two CTAs an SM, _TILES_PER_SEGMENT_PAST_ONE_WAVE
  const int worth_it = std::max({32, 2 * sms / groups, (max_tiles + 3) / 4});
  const int s = std::max(sms / groups, std::min(full, worth_it));
  // _MIN_TILES_PER_SEGMENT, 1 where the call's 1-tile CTAs are at most 3/5 of the SMs
  // (_ONE_TILE_SEGMENTS_SM_FRACTION)
  const int k = 5 * groups * max_tiles <= 3 * sms ? 1 : 2;
  const int target = std::max(1, std::min(s, (max_tiles + k - 1) / k));
  if (max_tiles <= 0) return target;
  const int tiles_per_segment = (max_tiles + target - 1) / target;  // as many splits as segments
  return (max_tiles + tiles_per_segment - 1) / tiles_per_segment;
}

}  // namespace kb_policy

#endif  // MUSE_ATTN_BENCHMARKS_KB_POLICY_H_
