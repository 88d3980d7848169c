// The split count kernel_bench uses when none is given: jax_muse_attn.default_num_splits
// (jax_muse_attn/attention.py) for D = 64 and one 64-row block a group, written again in C++
// because kernel_bench runs without Python. tests/test_kb_policy.py compiles this header on the
// host and checks it against the Python function over a grid of shapes.
#ifndef MUSE_ATTN_BENCHMARKS_KB_POLICY_H_
#define MUSE_ATTN_BENCHMARKS_KB_POLICY_H_

#include <algorithm>

namespace kb_policy {

// pingpong: attention.pingpong_split_kernel (an sm_90 GPU unless MUSE_ATTN_PINGPONG says otherwise).
// two_pairs: the launch plan runs the 2-an-SM count (2 * sms / groups) as the ping-pong kernel's
// two pairs a CTA (attention._runs_two_pairs).
inline int default_splits(int groups, int sms, int max_tiles, bool pingpong, bool two_pairs = false) {
  int full = 3 * sms / groups;  // D = 64: 3 CTAs an SM (_CTAS_PER_SM)
  const int hi = pingpong ? 128 : 32;  // _TWO_PER_SM_TILES(_PINGPONG)
  const int two = 2 * sms / groups;
  if (full > 0 && 4 * full < max_tiles && max_tiles < hi * full)
    full = two;
  else if (full > 0 && two > 0 && pingpong && two_pairs && hi * full <= max_tiles &&
           max_tiles < 256 * full)  // _TWO_PER_SM_TILES_TWO_PAIRS_HI
    full = two;
  // _CHEAP_MERGE_SPLITS, two CTAs an SM, _TILES_PER_SEGMENT_PAST_ONE_WAVE
  const int worth_it = std::max({32, two, (max_tiles + 3) / 4});
  const int s = std::max(sms / groups, std::min(full, worth_it));
  // _MIN_TILES_PER_SEGMENT, 1 where the call's 1-tile CTAs are at most 3/5 of the SMs
  // (_ONE_TILE_SEGMENTS_SM_FRACTION)
  const int k = 5 * groups * max_tiles <= 3 * sms ? 1 : 2;
  const int target = std::max(1, std::min(s, (max_tiles + k - 1) / k));
  if (max_tiles <= 0) return target;
  auto as_segments = [&](int n) {  // as many splits as segments
    const int tiles_per_segment = (max_tiles + n - 1) / n;
    return (max_tiles + tiles_per_segment - 1) / tiles_per_segment;
  };
  auto busiest_sm_tiles = [&](int n) {
    return (n * groups + sms - 1) / sms * ((max_tiles + n - 1) / n);
  };
  int splits = as_segments(target);
  const int two_per_sm = 2 * sms / groups;
  // 2 CTAs an SM for short segments when the busiest SM gets no more tiles
  if (two_per_sm > 0 && splits * groups > 2 * sms && (max_tiles + splits - 1) / splits < 4) {
    const int fewer = as_segments(std::min(two_per_sm, target));
    if (busiest_sm_tiles(fewer) <= busiest_sm_tiles(splits)) splits = fewer;
  }
  return splits;
}

}  // namespace kb_policy

#endif  // MUSE_ATTN_BENCHMARKS_KB_POLICY_H_
