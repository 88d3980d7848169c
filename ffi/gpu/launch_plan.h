// How a call is launched: the split count, the split kernel, and the merge's width and launch.
// Decided once at trace time, on the host, from the call's static sizes and a description of the
// device (never from device data), so every run of an executable makes the same launches and XLA
// can capture them in a command buffer. Python asks for it through the module
// (jax_muse_attn.launch_plan, and verify_attention, which hands it to the handler as attributes);
// benchmarks/kernel_bench.cu asks for it directly. Plain C++: the module compiles it on every
// build, so the plan of any device can be asked and tested on a CPU. The measured thresholds are
// in tuning.h.
#ifndef MUSE_ATTN_GPU_LAUNCH_PLAN_H_
#define MUSE_ATTN_GPU_LAUNCH_PLAN_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu/amd_targets.h"
#include "gpu/tuning.h"
#include "muse_attn/host_device.h"

namespace muse_attn::gpu {

// ---- The kernels' geometry the plan reasons about (kernels.h and the kernels use these too).

inline constexpr int kMaxRows = 64;        // query rows one split CTA holds (4 warps x 16)
inline constexpr int kMaxGroups = 65535;   // (request, KV head) groups: the grids' y limit
inline constexpr int kMergeMaxWarps = 8;   // a merge row's warps at most
inline constexpr int kMergeBatch = 16;     // segments a merge warp loads at a time

enum class Vendor : int { kCpu = 0, kNvidia = 1, kAmd = 2 };

// K/V tiles a split CTA stages in shared memory. AMD fills its slots from registers loaded a
// tile ahead (split_cta.h), so a slot past two adds no load in flight, only LDS: two at D = 64
// (gfx950 then holds four workgroups a CU, not two), one at D = 128 (gfx942's 64 KiB).
MUSE_HD_CONSTEXPR int split_stages(Vendor vendor, int head_dim) {
  return vendor == Vendor::kAmd ? (head_dim == 64 ? 2 : 1) : (head_dim == 64 ? 4 : 2);
}
// ---- The AMD table's derivation (amd_targets.h).

// Bytes of LDS one split workgroup takes on AMD: its K/V stages and the query tile (split_cta.h
// split_smem_bytes, which asserts it equals this).
MUSE_HD_CONSTEXPR int amd_split_lds_bytes(int head_dim) {
  return split_stages(Vendor::kAmd, head_dim) * 2 * 64 * head_dim * 2 + kMaxRows * head_dim * 2;
}
// Split workgroups a CU holds by LDS.
constexpr int amd_ctas_by_lds(const AmdTarget& t, int head_dim) {
  const int alloc = (amd_split_lds_bytes(head_dim) + t.lds_granule - 1) / t.lds_granule * t.lds_granule;
  return t.lds_bytes / alloc;
}
// Split workgroups a CU holds by VGPRs: a workgroup's 4 waves take one wave slot of each SIMD.
constexpr int amd_ctas_by_vgprs(const AmdTarget& t, int vgprs) {
  const int alloc = (vgprs + t.vgpr_granule - 1) / t.vgpr_granule * t.vgpr_granule;
  const int waves = std::min(t.vgprs_per_simd / alloc, t.max_waves_per_simd);
  return waves * t.simds_per_cu / (kMaxRows / 16);
}
constexpr int amd_split_ctas_per_cu(const AmdTarget& t, int head_dim) {
  return std::max(1, std::min(amd_ctas_by_lds(t, head_dim),
                              amd_ctas_by_vgprs(t, head_dim == 64 ? t.split_vgprs_d64
                                                                  : t.split_vgprs_d128)));
}
constexpr bool amd_table_is_derived() {
  for (const AmdTarget& t : kAmdTargets)
    if (t.split_ctas_per_cu_d64 != amd_split_ctas_per_cu(t, 64) ||
        t.split_ctas_per_cu_d128 != amd_split_ctas_per_cu(t, 128))
      return false;
  return true;
}
static_assert(amd_table_is_derived(), "an AMD table value differs from its derivation");

// The tuning the plan applies on an AMD target: tuning.h's, with the one-wave target (split
// CTAs an SM) and the window's cache policy from the table.
constexpr Tuning amd_tuning(const AmdTarget& a, const Tuning& base) {
  Tuning r = base;
  r.ctas_per_sm_d64 = a.split_ctas_per_cu_d64;
  r.ctas_per_sm_d128 = a.split_ctas_per_cu_d128;
  r.cache_window_kv = a.cache_window_kv;
  return r;
}

// A merge CTA: at least 256 threads, one row's W warps at least.
MUSE_HD_CONSTEXPR int merge_threads(int warps, int warp_size) {
  return warps * warp_size > 256 ? warps * warp_size : 256;
}
MUSE_HD_CONSTEXPR int merge_rows_per_cta(int warps, int warp_size) {
  return merge_threads(warps, warp_size) / (warps * warp_size);
}

// ---- Inputs and result.

// What the plan needs to know of the device.
struct Device {
  Vendor vendor = Vendor::kCpu;
  int multiprocessors = 0;       // SMs / CUs
  int compute_major = 0;         // NVIDIA compute capability major (0 elsewhere)
  int warp_size = 32;            // 64 on AMD (wave64)
  bool merge_can_wait = false;   // the loaded merge code can wait for the split kernel (PDL)
  bool has_two_pairs = false;    // the loaded split code has the two-pair ping-pong kernel
  int amd_gfx = 0;               // AMD: the gfx target (942, 950; amd_targets.h), 0 unknown
};

// The static sizes of a call (one device's shard under tensor parallelism).
struct CallShape {
  int head_dim, tokens, num_q_heads, num_kv_heads, num_requests, pages, window;  // window 0: full
  bool kv_fp8 = false;  // an FP8 cache (per_tile and the ping-pong kernels)
  bool drafts = false;  // ragged drafts or a tree (per_tile, two_tile); lse alone: the chain's plan
  int64_t rows() const { return int64_t{tokens} * (num_q_heads / num_kv_heads); }
  int64_t groups() const { return int64_t{num_requests} * num_kv_heads; }
  int64_t row_blocks() const { return (rows() + kMaxRows - 1) / kMaxRows; }
  // Most 64-key tiles a request's key range can touch.
  int64_t max_tiles() const {
    int64_t tiles = (int64_t{pages} * 16 + 63) / 64;
    if (window > 0) tiles = std::min(tiles, (int64_t{window} + tokens - 1 + 63) / 64 + 1);
    return tiles;
  }
};

// The split kernel variants (split_kernel.cu.cc); the names are the Python ones.
enum class SplitKernel : int {
  kPerTile = 0,           // one warpgroup, a segment tile by tile
  kTwoTile = 1,           // a two-tile segment as one 128-key step (latency-bound calls)
  kFillRing = 2,          // a four-tile segment's copies all issued before the first wait
  kPingpong = 3,          // two warpgroups taking alternate tiles (long segments; NVIDIA)
  kPingpongTwoPairs = 4,  // the same as two pairs a CTA, each on its own segment, one CTA an SM
  kPerTileCached = 5,     // per_tile with K/V loads that keep their lines in the caches (AMD)
};
inline constexpr int kNumSplitKernels = 6;
inline constexpr const char* kSplitKernelNames[kNumSplitKernels] = {
    "per_tile", "two_tile", "fill_ring", "pingpong", "pingpong_two_pairs", "per_tile_cached"};

struct Plan {
  int num_splits = 1;          // segments a (request, KV head) group's keys are cut into
  SplitKernel split_kernel = SplitKernel::kPerTile;
  int merge_warps = 1;         // warps that fold one output row's segments (1, 2, 4, 8)
  bool merge_pdl = false;      // the merge is a programmatic dependent launch of the split kernel
  bool merge_by_lane = false;  // a segment's (m, l) loaded and weighed by one lane, not every lane
  bool balance_segments = false;  // the balanced cut (muse_attn/geometry.h): segments sized by
                                  // the batch's lengths on the device, not request by request
};

// Debug overrides of a GPU plan (MUSE_ATTN_LAUNCH, parse_overrides); -1 / 0: not overridden.
// Each applies where it can run (a split kernel at D = 64 on a vendor that has it, the dependent
// merge where the device and code allow it); elsewhere the default plan stands. They never move
// the split count (pass num_splits for that).
struct Overrides {
  int split_kernel = -1;
  int merge_warps = 0;
  int merge_pdl = -1;
  int merge_by_lane = -1;
  int balance_segments = -1;
};

// ---- Overrides: "key=value,..." with split_kernel=<name>, merge_warps=1|2|4|8, merge_pdl=0|1,
// merge_by_lane=0|1, balance_segments=0|1. Returns "" or what is wrong.
inline std::string parse_overrides(const std::string& text, Overrides* out) {
  Overrides o;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    auto bit = [&](int* field) {
      if (value != "0" && value != "1") return key + " must be 0 or 1, got '" + value + "'";
      *field = value == "1";
      return std::string();
    };
    std::string err;
    if (key == "split_kernel") {
      const auto* names = kSplitKernelNames;
      const auto* hit = std::find_if(names, names + kNumSplitKernels,
                                     [&](const char* n) { return value == n; });
      if (hit == names + kNumSplitKernels)
        err = "split_kernel must be per_tile, two_tile, fill_ring, pingpong, pingpong_two_pairs "
              "or per_tile_cached, got '" + value + "'";
      else
        o.split_kernel = static_cast<int>(hit - names);
    } else if (key == "merge_warps") {
      if (value != "1" && value != "2" && value != "4" && value != "8")
        err = "merge_warps must be 1, 2, 4 or 8, got '" + value + "'";
      else
        o.merge_warps = std::atoi(value.c_str());
    } else if (key == "merge_pdl") {
      err = bit(&o.merge_pdl);
    } else if (key == "merge_by_lane") {
      err = bit(&o.merge_by_lane);
    } else if (key == "balance_segments") {
      err = bit(&o.balance_segments);
    } else {
      err = "unknown key '" + key +
            "' (split_kernel, merge_warps, merge_pdl, merge_by_lane, balance_segments)";
    }
    if (!err.empty()) return err;
  }
  *out = o;
  return "";
}

// ---- The rules.

// Split CTAs of the call at this split count (the split grid: segments x groups x row blocks).
inline int64_t split_ctas(const CallShape& s, int num_splits) {
  return int64_t{num_splits} * s.groups() * s.row_blocks();
}
// Most tiles one segment can have at this split count.
inline int64_t max_segment_tiles(const CallShape& s, int num_splits) {
  return std::max<int64_t>((s.max_tiles() + num_splits - 1) / num_splits, 1);
}

// Warps a merge row: one where one warp loads all of a row's segments in one batch; else the
// fewest that do (up to kMergeMaxWarps; past that they loop), doubled while each warp would still
// fold more than merge_warp_segments and the merge's CTAs stay within max_ctas_per_sm an SM (as a
// dependent launch they start beside the split CTAs; a second wave of them would wait).
inline int merge_warps_for(const Tuning& t, int num_splits, int64_t groups, int64_t rows, int sms,
                           int warp_size, int max_ctas_per_sm) {
  if (num_splits <= kMergeBatch) return 1;
  int warps = 1;
  while (warps < kMergeMaxWarps && warps * kMergeBatch < num_splits) warps *= 2;
  auto row_blocks = [&](int w) {
    const int per_cta = merge_rows_per_cta(w, warp_size);
    return (rows + per_cta - 1) / per_cta;
  };
  while (warps < kMergeMaxWarps && warps * t.merge_warp_segments < num_splits &&
         groups * row_blocks(2 * warps) <= int64_t{max_ctas_per_sm} * sms)
    warps *= 2;
  return warps;
}

// Whether the ping-pong kernel may run at all (the split count reasons with its bounds there).
inline bool pingpong_capable(const CallShape& s, const Device& d) {
  return d.vendor == Vendor::kNvidia && s.head_dim == 64 && d.compute_major == 9 && !s.drafts;
}

// Whole groups: a group's keys make one segment the ping-pong kernel takes (from
// pingpong_min_segment_tiles tiles) and one segment a group gives a share of the SMs a CTA that
// groups that long need (tuning.h whole_groups). One segment a group then, by the one-pair
// ping-pong kernel, whose CTAs write the output (kernels.h split_writes_output): no partials, no
// merge, and its two teams a CTA overlap one's math with the other's loads.
inline bool pingpong_whole_groups(const CallShape& s, const Device& d, const Tuning& t) {
  const int64_t tiles = s.max_tiles(), ctas = s.groups() * s.row_blocks();
  if (!pingpong_capable(s, d) || s.kv_fp8 || tiles < t.pingpong_min_segment_tiles) return false;
  for (const Tuning::WholeGroups& w : t.whole_groups)
    if (tiles <= w.max_tiles) return int64_t{w.sm_den} * ctas >= int64_t{w.sm_num} * d.multiprocessors;
  return false;
}

// The plan at a given split count; o may force parts of it.
inline Plan plan_at(const CallShape& s, const Device& d, const Tuning& t, int num_splits,
                    const Overrides& o) {
  Plan p;
  p.num_splits = num_splits;
  // The balanced cut for full attention where segments are long enough that working it out (a
  // pass over seq_lens in every CTA, longer with more requests) costs little beside them, and a
  // batch has requests to balance (a window evens a batch's lengths out). Not for an FP8 cache at
  // D = 128 (gpu/segment_pool.h says why). AMD takes NVIDIA's thresholds until measured.
  const int64_t tiles = max_segment_tiles(s, num_splits);
  p.balance_segments = !(s.kv_fp8 && s.head_dim == 128) &&
                       (o.balance_segments >= 0
                            ? o.balance_segments == 1
                            : d.vendor != Vendor::kCpu && s.window == 0 && s.num_requests > 1 &&
                                  s.num_requests <= t.balance_max_requests && num_splits > 1 &&
                                  tiles >= t.balance_min_segment_tiles);
  if (d.vendor == Vendor::kCpu) return p;  // one scheme; nothing more to choose
  const bool nvidia = d.vendor == Vendor::kNvidia, sm90 = nvidia && d.compute_major == 9;
  const int sms = d.multiprocessors;
  const int64_t ctas = split_ctas(s, num_splits);
  const bool few_ctas = sms > 0 && ctas <= int64_t{t.merge_max_split_ctas_per_sm} * sms;

  int forced = o.split_kernel;  // where the forced kernel can run (else the default choice)
  if (forced >= 0) {
    const auto k = static_cast<SplitKernel>(forced);
    const bool runs = k == SplitKernel::kPerTile ||
                      (k == SplitKernel::kPerTileCached
                           ? !nvidia
                           : s.head_dim == 64 && (k == SplitKernel::kTwoTile || nvidia));
    if (runs && k == SplitKernel::kPingpongTwoPairs && !(sm90 && d.has_two_pairs))
      forced = static_cast<int>(SplitKernel::kPingpong);
    if (!runs) forced = -1;
  }
  const auto forced_pingpong = [&] {
    return forced == int(SplitKernel::kPingpong) || forced == int(SplitKernel::kPingpongTwoPairs);
  };
  if (s.kv_fp8 && forced >= 0 && !forced_pingpong() && forced != int(SplitKernel::kPerTileCached))
    forced = static_cast<int>(SplitKernel::kPerTile);  // an FP8 cache's other variants
  if (s.drafts && forced >= 0 && forced != static_cast<int>(SplitKernel::kTwoTile))
    forced = static_cast<int>(SplitKernel::kPerTile);  // the drafts target's other variant
  // An FP8 cache's tiles cost more math than bytes (their dequantization): its ping-pong kernels,
  // which run one team's math under the other's, take long segments at any CTA count.
  const bool whole_groups = num_splits == 1 && pingpong_whole_groups(s, d, t);
  const bool pingpong = forced >= 0 ? forced_pingpong()
                                    : (pingpong_capable(s, d) && (few_ctas || s.kv_fp8) &&
                                       tiles >= t.pingpong_min_segment_tiles) ||
                                          whole_groups;

  p.merge_warps = o.merge_warps > 0
                      ? o.merge_warps
                      : merge_warps_for(t, num_splits, s.groups(), s.rows(), sms, d.warp_size,
                                        pingpong ? t.merge_ctas_per_sm_beside_pingpong : 1);
  p.merge_by_lane = o.merge_by_lane >= 0
                        ? o.merge_by_lane == 1
                        : (num_splits + p.merge_warps - 1) / p.merge_warps <= t.merge_by_lane_segments;
  const bool pdl_capable = nvidia && d.compute_major >= 9 && d.merge_can_wait;
  p.merge_pdl = pdl_capable && o.merge_pdl != 0 && (o.merge_pdl == 1 || few_ctas);

  if (forced >= 0) {
    p.split_kernel = static_cast<SplitKernel>(forced);
  } else if (pingpong) {
    const int64_t two_pair_ctas = (num_splits + 1) / 2 * s.groups() * s.row_blocks();
    p.split_kernel = !whole_groups && d.has_two_pairs && tiles >= t.two_pairs_min_segment_tiles &&
                             two_pair_ctas <= sms
                         ? SplitKernel::kPingpongTwoPairs
                         : SplitKernel::kPingpong;
  } else if (sm90 && s.head_dim == 64 && !s.kv_fp8 && sms > 0 && tiles <= 2 &&
             (2 * ctas <= int64_t{t.two_tile_max_ctas_per_sm_x2} * sms ||
              (p.merge_pdl && ctas <= int64_t{t.two_tile_max_ctas_per_sm_pdl} * sms))) {
    p.split_kernel = SplitKernel::kTwoTile;
  } else {
    // The fill ring, where a dependent merge's CTAs can all start beside the split CTAs.
    const int per_cta = merge_rows_per_cta(p.merge_warps, d.warp_size);
    const int64_t merge_ctas = (s.rows() + per_cta - 1) / per_cta * s.groups();
    const bool merge_fits =
        !p.merge_pdl || ctas + merge_ctas <= int64_t{t.fill_ring_max_ctas_per_sm} * sms;
    const bool ring = sm90 && s.head_dim == 64 && !s.drafts && !s.kv_fp8 && merge_fits &&
                      tiles == split_stages(Vendor::kNvidia, 64);
    // AMD: a window's keys through the caches, where the target's row says so (amd_targets.h).
    const bool cached = !nvidia && t.cache_window_kv && s.window > 0 && !s.drafts;
    p.split_kernel = ring     ? SplitKernel::kFillRing
                     : cached ? SplitKernel::kPerTileCached
                              : SplitKernel::kPerTile;
  }
  // The balanced cut's segments are of any length: no two_tile or fill_ring under it, and it has
  // no cached variant. A forced kernel of those turns the default cut off; both forced, per_tile.
  if (p.balance_segments &&
      (p.split_kernel == SplitKernel::kTwoTile || p.split_kernel == SplitKernel::kFillRing ||
       p.split_kernel == SplitKernel::kPerTileCached)) {
    if (o.balance_segments == 1)
      p.split_kernel = SplitKernel::kPerTile;
    else
      p.balance_segments = false;
  }
  return p;
}

// The split count: fill the multiprocessors with one wave of split CTAs (as many an SM as they
// hold), cut no segment below min_tiles_per_segment where CTAs are plenty, and stop adding
// segments once the merge would cost more than they save. CPU: a fixed count.
inline int default_num_splits(const CallShape& s, const Device& d, const Tuning& t) {
  const int64_t tiles = s.max_tiles();
  int64_t min_tiles = t.min_tiles_per_segment, target, cps = 0, sms = 0, per_sm = 0, two_per_sm = 0;
  if (d.vendor == Vendor::kCpu) {
    target = t.cpu_splits;
  } else {
    cps = s.groups() * s.row_blocks();  // split CTAs a segment of every group
    sms = d.multiprocessors;
    per_sm = s.head_dim == 64 ? t.ctas_per_sm_d64 : t.ctas_per_sm_d128;
    // One wave: rounding down keeps every CTA resident at once.
    const int64_t one_per_sm = sms / cps;
    int64_t full = per_sm * sms / cps;
    const bool pingpong = pingpong_capable(s, d);
    const int64_t lo = t.two_per_sm_tiles_lo,
                  hi = pingpong ? t.two_per_sm_tiles_hi_pingpong : t.two_per_sm_tiles_hi;
    two_per_sm = 2 * sms / cps;
    auto runs_two_pairs = [&](int64_t n) {
      return plan_at(s, d, t, static_cast<int>(n), Overrides{}).split_kernel ==
             SplitKernel::kPingpongTwoPairs;
    };
    if (per_sm > 2 && full > 0 && lo * full < tiles && tiles < hi * full) {
      full = two_per_sm;
    } else if (per_sm > 2 && full > 0 && two_per_sm > 0 && pingpong && hi * full <= tiles &&
               tiles < t.two_per_sm_tiles_hi_two_pairs * full && runs_two_pairs(two_per_sm)) {
      full = two_per_sm;
    }
    const int64_t worth_it = std::max({int64_t{t.cheap_merge_splits}, two_per_sm,
                                       (tiles + t.tiles_per_segment_past_one_wave - 1) /
                                           t.tiles_per_segment_past_one_wave});
    target = std::max(one_per_sm, std::min(full, worth_it));
    if (int64_t{t.one_tile_sm_den} * cps * tiles <= int64_t{t.one_tile_sm_num} * sms) min_tiles = 1;
  }
  target = std::max<int64_t>(1, std::min(target, (tiles + min_tiles - 1) / min_tiles));
  // As many splits as the longest request has segments: more only launch CTAs with no tiles.
  auto as_segments = [&](int64_t n) {
    const int64_t per = (tiles + n - 1) / n;
    return (tiles + per - 1) / per;
  };
  auto busiest_sm_tiles = [&](int64_t n) {  // CTAs on the busiest SM x tiles a segment
    return (n * cps + sms - 1) / sms * ((tiles + n - 1) / n);
  };
  int64_t splits = as_segments(target);
  // Short segments past 2 CTAs an SM: 2 an SM where the busiest SM gets no more tiles.
  if (two_per_sm > 0 && splits * cps > 2 * sms &&
      (tiles + splits - 1) / splits < t.two_per_sm_tiles_lo) {
    const int64_t fewer = as_segments(std::min(two_per_sm, target));
    if (busiest_sm_tiles(fewer) <= busiest_sm_tiles(splits)) splits = fewer;
  }
  // Past one wave: where one segment a group is already more split CTAs than a wave holds, or
  // where segments would be longer than max_segment_tiles (a ragged batch's longest request would
  // keep its few CTAs busy long after the rest), the count from the least that caps segments
  // whose waves carry the fewest tiles on the busiest SM (the last wave's CTAs count whole).
  if (d.vendor != Vendor::kCpu) {
    const int64_t slots = std::max<int64_t>(1, per_sm * sms);
    const int64_t least =
        std::max<int64_t>(1, (tiles + t.max_segment_tiles - 1) / t.max_segment_tiles);
    if (cps > slots || splits < least) {
      auto wave_tiles = [&](int64_t n) {
        return (n * cps + slots - 1) / slots * ((tiles + n - 1) / n);
      };
      int64_t best = least;
      for (int64_t n = least + 1; n <= 2 * least + 2 && n * min_tiles <= tiles; ++n)
        if (wave_tiles(n) < wave_tiles(best)) best = n;
      splits = as_segments(best);
    }
    if (pingpong_whole_groups(s, d, t)) splits = 1;  // by the ping-pong kernel (plan_at)
  }
  return static_cast<int>(std::min<int64_t>(splits, 1 << 30));
}

// The plan of a call: num_splits > 0 pins the split count, else default_num_splits. Returns ""
// or what is wrong (sizes the handlers refuse, a GPU with no multiprocessor count).
inline std::string plan_launch(const CallShape& s, const Device& d, int num_splits,
                               const Overrides& o, Plan* out, const Tuning& t = kTuning) {
  if ((s.head_dim != 64 && s.head_dim != 128) || s.tokens < 1 || s.tokens > 16 ||
      s.num_kv_heads < 1 || s.num_q_heads < s.num_kv_heads || s.num_q_heads % s.num_kv_heads != 0 ||
      s.num_requests < 1 || s.pages < 1 || s.window < 0 || num_splits < 0)
    return "sizes outside what the handlers accept";
  if (d.vendor != Vendor::kCpu) {
    if (s.groups() > kMaxGroups)
      return "requests x KV heads = " + std::to_string(s.groups()) + ", more than the GPU grid's " +
             std::to_string(kMaxGroups);
    if (d.multiprocessors < 1) return "the device's multiprocessor count is unknown";
  }
  if (d.vendor == Vendor::kAmd) {  // AMD's own table (amd_targets.h)
    const Tuning a = amd_tuning(amd_target(d.amd_gfx), t);
    *out = plan_at(s, d, a, num_splits > 0 ? num_splits : default_num_splits(s, d, a), o);
    return "";
  }
  *out = plan_at(s, d, t, num_splits > 0 ? num_splits : default_num_splits(s, d, t), o);
  return "";
}

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_LAUNCH_PLAN_H_
