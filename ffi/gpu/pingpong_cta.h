// The ping-pong pair (NVIDIA, D = 64): two warpgroups ("teams") a CTA, each with the CTA's 64
// query rows and its own query tile, stages, copy groups and barrier, take the segment's tiles
// t0 + team, t0 + team + 2, ... independently; their score MMAs are issued in turn (FA3's
// ping-pong, two named barriers), so one team's softmax runs under the other's MMAs. At the end
// team 1 hands its (m, l, O) to team 0 through its own stages, and team 0 writes the partial (at
// one split, the output rows themselves: kernels.h split_writes_output). The
// body of the ping-pong entry points of a bf16 cache (split_kernel.cu.cc) and of an FP8 one
// (split_kernel_fp8.cu.cc); internal to the file that includes it.
#ifndef MUSE_ATTN_GPU_PINGPONG_CTA_H_
#define MUSE_ATTN_GPU_PINGPONG_CTA_H_

#include <atomic>
#include <cstdint>

#include "gpu/split_cta.h"

#if defined(MUSE_ATTN_CUDA)
namespace muse_attn::gpu {
namespace {

// Barrier ids as immediates (a register id makes ptxas reserve all 16); team is warp-uniform.
template <int kId, int kCount>
__device__ __forceinline__ void named_bar_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kCount) : "memory");
}
template <int kId, int kCount>
__device__ __forceinline__ void named_bar_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kCount) : "memory");
}
constexpr int kTeamThreads = kThreads;        // a team: one warpgroup
constexpr int kPpThreads = 2 * kTeamThreads;  // two teams
// Stages a team (its own, not Stages<D>: two a team are faster than three where bytes rule).
inline constexpr int kPpStagesPerTeam = 2;
// A team's shared memory: its stages; an FP8 cache's (kv_tile.h, staged form): the bf16 tile its
// MMAs read, then its FP8 stages.
template <int D, bool kFp8>
__host__ __device__ constexpr int pp_team_bytes() {
  return kFp8 ? KvTile<D>::kBytes + kPpStagesPerTeam * Fp8Stage<D>::kBytes
              : kPpStagesPerTeam * KvTile<D>::kBytes;
}
// A pair's shared memory past the alignment slack (the two teams', then their query tiles), and
// a one-pair CTA's with it.
template <int D, bool kFp8>
__host__ __device__ constexpr int pp_pair_bytes() {
  return 2 * pp_team_bytes<D, kFp8>() + 2 * QTile<D, kMaxRows>::kBytes;
}
template <int D, bool kFp8>
constexpr int pp_smem_bytes() {
  return pp_pair_bytes<D, kFp8>() + kSmemAlign;
}

// 2 CTAs an SM (128 registers) where it is tuned, the warpgroup MMA's sm_90a; elsewhere (the
// mma.sync path, only run when forced) 1, so that it does not spill either.
#if defined(MUSE_ATTN_WGMMA)
inline constexpr int kPpMinCtasPerSm = 2;
#else
inline constexpr int kPpMinCtasPerSm = 1;
#endif
// One ping-pong pair (two teams, kPpThreads threads) working on segment c.seg (after the entry
// point's grid_launch_dependents): the body of split_kernel_pingpong (one pair a CTA) and of
// split_kernel_pingpong_two_pairs (two pairs a CTA, each on its own segment). smem: the pair's
// shared memory (aligned); tid: the thread's index in the pair; kBar: the first of the pair's named
// barriers (4, and a fifth where kPaired: the hand-over, __syncthreads() in a CTA of one pair).
// kFp8: an FP8 cache (kv_tile.h, staged form): each landed tile is dequantized by its team into
// the team's bf16 tile (under the other team's MMAs and softmax), then as for bf16.
template <int D, int kBar, bool kPaired, bool kFp8, bool kBalanced = false>
__device__ __forceinline__ void run_pp_pair(const VerifyParams& p, char* const smem, const int tid,
                                            const SplitCta c) {
  using Warp = WarpAttention<D>;
  static_assert(!kFp8 || kFp8Staged, "a team converts staged FP8 tiles");
  constexpr int P = kPpStagesPerTeam;  // a team's stages
  static_assert(P >= 2, "two stages a team at least");
  constexpr int R = Warp::kRowsPerLane;

  // The output instead of the partial at one split (kernels.h split_writes_output): the group's own
  // cut, by a kernel with the epilogue.
  constexpr bool kMayWriteOutput =
      has_output_epilogue(kPaired ? SplitKernel::kPingpongTwoPairs : SplitKernel::kPingpong, kFp8) && !kBalanced;
  MUSE_ATTN_MARK(TimelineMark::kStart);
  const int real = real_requests(p.num_reqs_static, p.num_reqs, p.num_requests);
  if (c.req >= real) {  // padding: no keys
    if (kMayWriteOutput && p.split_writes_output) write_zero_rows<D, kPpThreads>(p, c, tid);
    return;
  }
  const int raw_len = p.seq_lens[c.req];
  const int team = tid / kTeamThreads;
  const int ttid = tid % kTeamThreads;
  const int warp = ttid / kWarpSize;
  const int row0 = c.block_row0 + 16 * warp;
  const int lane = tid % kWarpSize;
  constexpr int kTeamBytes = pp_team_bytes<D, kFp8>();
  const QTile<D, kMaxRows> q_tile{smem + 2 * kTeamBytes + team * QTile<D, kMaxRows>::kBytes};
  stage_query_rows<D, kTeamThreads>(p, c, q_tile, ttid, p.rows);  // each team its own copy
  Warp w(lane);
  RequestGeometry g = request_geometry(raw_len, p.pages * kPageSize, p.tokens, p.window,
                                       p.num_splits);
  if constexpr (kBalanced) cut_from_pool(&g, c.pool_len, 0);
  int t0, t1;
  segment_tiles(g, c.seg, &t0, &t1);
  if (t0 >= t1) {
    copy_wait<0>();
    if (kMayWriteOutput && p.split_writes_output) write_zero_rows<D, kPpThreads>(p, c, tid);
    return;
  }
  const int n_team = (t1 - t0 - team + 1) / 2;         // this team's tiles
  const int n_other = (t1 - t0) - n_team;             // the other team's
  auto team_tile = [&](int i) { return t0 + team + 2 * i; };
  using Source = KvSource<D, kFp8 ? 1 : 2>;
  const Source src(static_cast<const typename Source::Elem*>(p.kv), p.num_kv_heads.divisor(), c.kvh,
                   p.table + c.req * p.table_stride, g, p.num_blocks);
  auto tile_at = [&](int slot) { return KvTile<D>{smem + (team * P + slot) * KvTile<D>::kBytes}; };
  const KvTile<D> fp8_tile{smem + team * kTeamBytes};  // FP8: the team's bf16 tile
  auto fp8_at = [&](int slot) {
    return Fp8Stage<D>{smem + team * kTeamBytes + KvTile<D>::kBytes + slot * Fp8Stage<D>::kBytes};
  };
  // FP8: the scales' view, made where it is used (split_cta.h).
  auto scales = [&] {
    return Fp8Scales{p.k_scale, p.v_scale, p.scale_kind == static_cast<int>(ScaleKind::kToken),
                     p.kv_format == static_cast<int>(KvFormat::kFp8E4m3fnuz),
                     p.num_kv_heads.divisor(), c.kvh};
  };
  unsigned present = 0;  // 4 bits a slot of this team
  auto stage = [&](int slot, int tile, const TileEntries& entries) {
    const TilePages pages = resolve(src, entries);
    if constexpr (kFp8)
      stage_fp8_tile<D, kTeamThreads>(fp8_at(slot), src, scales(), g, tile, pages, ttid);
    else
      stage_tile<D, kTeamThreads, false>(tile_at(slot), src, g, tile, pages, ttid);
    present = (present & ~(0xFu << (4 * slot))) | (pages.present_mask() << (4 * slot));
  };
  {
    TileEntries first[P - 1];
#pragma unroll
    for (int s = 0; s < P - 1; ++s)
      if (s < n_team) first[s] = load_tile_entries(src, team_tile(s));
#pragma unroll
    for (int s = 0; s < P - 1; ++s) {
      if (s < n_team) stage(s, team_tile(s), first[s]);
      copy_commit();
    }
  }
  TileEntries next{};
  if (P - 1 < n_team) next = load_tile_entries(src, team_tile(P - 1));
  MUSE_ATTN_MARK(TimelineMark::kIssued);

  const LaneMask<R> mask = lane_mask(p, g, w, row0);
  SoftmaxState st[R];
#pragma unroll
  for (int rr = 0; rr < R; ++rr) st[rr] = SoftmaxState::empty();

  // Barriers: 1 + team a team's own (its stages), 3 + team "this team may issue its score MMAs"
  // (the other team arrives on it after issuing its own). Team 0 goes first. Every sync on a
  // turn barrier is fed by exactly one arrive: team j's i-th turn by the other's arrive after
  // its (i - 1 + j)-th MMAs, team 0's first by team 1's arrive here.
  auto team_bar = [&] {
    if (team == 0) named_bar_sync<kBar, kTeamThreads>(); else named_bar_sync<kBar + 1, kTeamThreads>();
  };
  auto my_turn = [&] {
    if (team == 0) named_bar_sync<kBar + 2, kPpThreads>(); else named_bar_sync<kBar + 3, kPpThreads>();
  };
  auto their_turn = [&] {
    if (team == 0) named_bar_arrive<kBar + 3, kPpThreads>(); else named_bar_arrive<kBar + 2, kPpThreads>();
  };
  if (team == 1) named_bar_arrive<kBar + 2, kPpThreads>();
  // The id loads stay behind the refill's copies here (ahead of them, as split_kernel issues
  // them, this kernel is slower).
  for (int i = 0; i < n_team; ++i) {
    const int t = team_tile(i);
    if (i + P - 1 < n_team) stage((i + P - 1) % P, team_tile(i + P - 1), next);
    if (i + P < n_team) next = load_tile_entries(src, team_tile(i + P));
    copy_commit();
    copy_wait<P - 1>();  // tile i (and the team's Q, an older group) landed
    fence_proxy_async_shared();
    team_bar();
    if (i == 0) MUSE_ATTN_MARK(TimelineMark::kFirstTile);
    const int slot = i % P;
    if constexpr (kFp8) {  // the landed FP8 tile into the team's bf16 tile
      convert_fp8_tile<D, kTeamThreads>(fp8_tile, fp8_at(slot), scales(), g, t, (present >> (4 * slot)) & 0xFu,
                                        ttid);
      fence_proxy_async_shared();
      team_bar();
    }
    const KvTile<D> tile = kFp8 ? fp8_tile : tile_at(slot);
    w.load_q(q_tile, 16 * warp);  // every tile: 4 ldmatrix, and no registers held for Q between
    my_turn();
    w.scores(tile);
    if (i + team < n_other) their_turn();  // once this team's scores are in
    const unsigned pages_ok = (present >> (4 * slot)) & 0xFu;
    softmax_and_accumulate<true>(w, st, tile, t, pages_ok, mask.boundary(t, pages_ok), mask, p.scale_log2);
    team_bar();  // the team's stage is refilled next iteration
  }
  copy_wait<0>();
  MUSE_ATTN_MARK(TimelineMark::kLoopEnd);

  if (t1 - t0 > 1) {  // team 1 saw tiles: its state to team 0 through team 1's stages
    constexpr int kOut = D / 8 * 4;
    constexpr int kSlots = 2 * R + kOut;
    static_assert(kSlots * kTeamThreads * 4 <= kTeamBytes, "fits team 1's stages");
    float* const xfer = reinterpret_cast<float*>(smem + kTeamBytes) + ttid;
    if (team == 1) {
#pragma unroll
      for (int rr = 0; rr < R; ++rr) {
        xfer[(2 * rr) * kTeamThreads] = st[rr].m;
        xfer[(2 * rr + 1) * kTeamThreads] = st[rr].l;  // the lane's part of the row's l
      }
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) xfer[(2 * R + 4 * n + c) * kTeamThreads] = w.o[n][c];
    }
    if constexpr (kPaired) named_bar_sync<kBar + 4, kPpThreads>(); else __syncthreads();
    if (team == 1) return;
    float w0[R], w1[R];
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
      const float m1 = xfer[(2 * rr) * kTeamThreads];
      const MergeState ms{fmaxf(st[rr].m, m1)};
      w0[rr] = ms.weight(st[rr].m);
      w1[rr] = ms.weight(m1);
      st[rr].l = st[rr].l * w0[rr] + xfer[(2 * rr + 1) * kTeamThreads] * w1[rr];
      st[rr].m = ms.m_max;
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        w.o[n][c] = w.o[n][c] * w0[c / 2] + xfer[(2 * R + 4 * n + c) * kTeamThreads] * w1[c / 2];
  } else if (team == 1) {
    return;
  }

  if (kMayWriteOutput && p.split_writes_output)
    write_output_rows(p, w, st, c, row0);
  else
    write_partials(p, w, st,
                   kPaired ? partial_slot<kBalanced, 2>(p, c, threadIdx.x / kPpThreads)
                           : partial_slot<kBalanced>(p, c),
                   row0);
  MUSE_ATTN_MARK(TimelineMark::kEnd);
}

__device__ __forceinline__ char* pp_smem_aligned() {
  extern __shared__ __align__(16) char smem_raw[];
  return smem_raw + ((kSmemAlign - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) % kSmemAlign) %
                     kSmemAlign);
}

// The ping-pong split kernel (the plan picks it where segments are long): one pair a CTA, 256
// threads, 2 CTAs an SM. Instantiated by the file of its cache kind (kFp8).
template <int D, bool kFp8, bool kBalanced = false>
__global__ void __launch_bounds__(kPpThreads, kPpMinCtasPerSm) split_kernel_pingpong(VerifyParams p) {
  grid_launch_dependents();
  char* const smem = pp_smem_aligned();
  run_pp_pair<D, 1, false, kFp8, kBalanced>(p, smem, threadIdx.x,
                                            split_cta<1, kBalanced>(p, false, smem));
}

// Two pairs a CTA, one CTA an SM, each pair on its own segment (2 x, 2 x + 1): the work of
// split_kernel_pingpong's two CTAs an SM, without a CTA placed second on its SM (which runs
// slower than the first). Launched with grid x = ceil(S / 2); a pair whose segment is past the
// group's ends at once (each pair has its own barriers: 1-5, 6-10).
template <int D, bool kFp8, bool kBalanced = false>
__global__ void __launch_bounds__(2 * kPpThreads, 1) split_kernel_pingpong_two_pairs(VerifyParams p) {
#if defined(MUSE_ATTN_WGMMA)
  grid_launch_dependents();
  char* const smem = pp_smem_aligned();
  const int pair = threadIdx.x / kPpThreads;
  const SplitCta c = split_cta<2, kBalanced>(p, false, smem, pair);
  if (pair == 0)
    run_pp_pair<D, 1, true, kFp8, kBalanced>(p, smem, threadIdx.x, c);
  else
    run_pp_pair<D, 6, true, kFp8, kBalanced>(p, smem + pp_pair_bytes<D, kFp8>(),
                                             threadIdx.x - kPpThreads, c);
#else
  // Only the warpgroup MMA's build has it (the mma.sync path spills at 128 registers). This stub
  // is never launched: its static shared word marks it for pingpong_two_pairs_loaded() (the real
  // kernel has dynamic shared memory only), which the device description asks.
  __shared__ int no_two_pairs_code;
  if (threadIdx.x == 0) *static_cast<volatile int*>(&no_two_pairs_code) = p.num_requests;
  __trap();
#endif
}

// Launches the ping-pong kernel of a cache kind at D = 64, one pair or two a CTA.
template <bool kFp8, bool kBalanced = false>
gpuError_t launch_pingpong(const VerifyParams& p, bool two_pairs, gpuStream_t stream) {
  static std::atomic<uint64_t> done_one_pair{0}, done_two_pairs{0};
  if (two_pairs)
    return launch_with_smem(split_kernel_pingpong_two_pairs<64, kFp8, kBalanced>, done_two_pairs,
                            split_grid_two_pairs(p), 2 * kPpThreads,
                            pp_smem_bytes<64, kFp8>() + pp_pair_bytes<64, kFp8>(), p, stream);
  return launch_with_smem(split_kernel_pingpong<64, kFp8, kBalanced>, done_one_pair, split_grid(p),
                          kPpThreads, pp_smem_bytes<64, kFp8>(), p, stream);
}

}  // namespace
}  // namespace muse_attn::gpu
#endif  // MUSE_ATTN_CUDA

#endif  // MUSE_ATTN_GPU_PINGPONG_CTA_H_
