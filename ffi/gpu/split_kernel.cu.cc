// The split kernels of a bf16 cache (split_cta.h: one CTA per (segment, request, KV head[,
// block of 64 rows]) and what it does). The variants (launch_plan.h SplitKernel picks one; one
// body, run_split_cta, for the first three):
//   split_kernel<D>             a segment tile by tile;
//   split_kernel_two_tile<64>   a segment of exactly two tiles as one 128-key step;
//   split_kernel_fill_ring<64>  a four-tile segment's copies all issued in the prologue;
//   split_kernel_pingpong<64>   two warpgroups a CTA taking alternate tiles (NVIDIA), and
//   split_kernel_pingpong_two_pairs<64>  the same as two pairs a CTA, each on its own segment.
// An FP8 cache's kernel is split_kernel_fp8.cu.cc's (a file of its own: beside these entry points
// it would change their code).
#include <atomic>
#include <cstdint>

#include "gpu/kernels.h"
#include "gpu/split_cta.h"

namespace muse_attn::gpu {
namespace {

// The entry points (launch_split picks one from the launch plan).
template <int D>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm<D>) split_kernel(VerifyParams p) {
  run_split_cta<D, false, false>(p);
}
template <int D>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm<D>) split_kernel_fill_ring(VerifyParams p) {
  run_split_cta<D, false, true>(p);
}
template <int D>
__global__ void MUSE_ATTN_TWO_TILE_BOUNDS split_kernel_two_tile(VerifyParams p) {
  static_assert(D == 64, "the two-tile step is tuned (and its cap written) for D = 64");
  run_split_cta<D, true, false>(p);
}

#if defined(MUSE_ATTN_CUDA)
// The ping-pong split kernel (NVIDIA, D = 64; the plan picks it where segments are long): two
// warpgroups ("teams") a CTA, each with the CTA's 64 query rows and its own query tile, stages,
// copy groups and barrier, take the segment's tiles t0 + team, t0 + team + 2, ... independently;
// their score MMAs are issued in turn (FA3's ping-pong, two named barriers), so one team's
// softmax runs under the other's MMAs. At the end team 1 hands its (m, l, O) to team 0 through
// its own stages, and team 0 writes the partial. 256 threads, 2 CTAs an SM.
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
// Stages a team (its own, not Stages<D>: two a team are faster than three where bytes rule),
// then the two teams' query tiles.
inline constexpr int kPpStagesPerTeam = 2;
// A pair's shared memory past the alignment slack, and a one-pair CTA's with it.
template <int D>
__host__ __device__ constexpr int pp_pair_bytes() {
  return 2 * kPpStagesPerTeam * KvTile<D>::kBytes + 2 * QTile<D, kMaxRows>::kBytes;
}
template <int D>
constexpr int pp_smem_bytes() {
  return pp_pair_bytes<D>() + kSmemAlign;
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
template <int D, int kBar, bool kPaired>
__device__ __forceinline__ void run_pp_pair(const VerifyParams& p, char* const smem, const int tid,
                                            const SplitCta c) {
  using Warp = WarpAttention<D>;
  constexpr int P = kPpStagesPerTeam;  // a team's stages
  constexpr int kStages = 2 * P;
  static_assert(P >= 2, "two stages a team at least");
  constexpr int R = Warp::kRowsPerLane;

  const int real = real_requests(p.num_reqs_static, p.num_reqs, p.num_requests);
  if (c.req >= real) return;
  const int raw_len = p.seq_lens[c.req];
  const int team = tid / kTeamThreads;
  const int ttid = tid % kTeamThreads;
  const int warp = ttid / kWarpSize;
  const int row0 = c.block_row0 + 16 * warp;
  const int lane = tid % kWarpSize;
  const QTile<D, kMaxRows> q_tile{smem + kStages * KvTile<D>::kBytes + team * QTile<D, kMaxRows>::kBytes};
  stage_query_rows<D, kTeamThreads>(p, c, q_tile, ttid, p.rows);  // each team its own copy
  Warp w(lane);
  const RequestGeometry g = request_geometry(raw_len, p.pages * kPageSize, p.tokens, p.window,
                                             p.num_splits);
  int t0, t1;
  segment_tiles(g, c.seg, &t0, &t1);
  if (t0 >= t1) {
    copy_wait<0>();
    return;
  }
  const int n_team = (t1 - t0 - team + 1) / 2;         // this team's tiles
  const int n_other = (t1 - t0) - n_team;             // the other team's
  auto team_tile = [&](int i) { return t0 + team + 2 * i; };
  const KvSource<D> src(static_cast<const uint16_t*>(p.kv), p.num_kv_heads.divisor(), c.kvh, p.table + c.req * p.table_stride, g, p.num_blocks);
  auto tile_at = [&](int slot) { return KvTile<D>{smem + (team * P + slot) * KvTile<D>::kBytes}; };
  unsigned present = 0;  // 4 bits a slot of this team
  auto stage = [&](int slot, int tile, const TileEntries& entries) {
    const TilePages pages = resolve(src, entries);
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
    const int slot = i % P;
    const KvTile<D> tile = tile_at(slot);
    w.load_q(q_tile, 16 * warp);  // every tile: 4 ldmatrix, and no registers held for Q between
    my_turn();
    w.scores(tile);
    if (i + team < n_other) their_turn();  // once this team's scores are in
    const unsigned pages_ok = (present >> (4 * slot)) & 0xFu;
    softmax_and_accumulate<true>(w, st, tile, t, pages_ok, mask.boundary(t, pages_ok), mask, p.scale_log2);
    team_bar();  // the team's stage is refilled next iteration
  }
  copy_wait<0>();

  if (t1 - t0 > 1) {  // team 1 saw tiles: its state to team 0 through team 1's stages
    constexpr int kOut = D / 8 * 4;
    constexpr int kSlots = 2 * R + kOut;
    static_assert(kSlots * kTeamThreads * 4 <= P * KvTile<D>::kBytes, "fits team 1's stages");
    float* const xfer = reinterpret_cast<float*>(smem + P * KvTile<D>::kBytes) + ttid;
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

  write_partials(p, w, st, c.group, c.seg, row0);
}

template <int D>
__device__ __forceinline__ char* pp_smem_aligned() {
  extern __shared__ __align__(16) char smem_raw[];
  return smem_raw + ((kSmemAlign - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) % kSmemAlign) %
                     kSmemAlign);
}

template <int D>
__global__ void __launch_bounds__(kPpThreads, kPpMinCtasPerSm) split_kernel_pingpong(VerifyParams p) {
  char* const smem = pp_smem_aligned<D>();
  grid_launch_dependents();
  run_pp_pair<D, 1, false>(p, smem, threadIdx.x, split_cta(p));
}

// Two pairs a CTA, one CTA an SM, each pair on its own segment (2 x, 2 x + 1): the work of
// split_kernel_pingpong's two CTAs an SM, without a CTA placed second on its SM (which runs
// slower than the first). Launched with grid x = ceil(S / 2); a pair whose segment is past the
// group's ends at once (each pair has its own barriers: 1-5, 6-10).
template <int D>
__global__ void __launch_bounds__(2 * kPpThreads, 1) split_kernel_pingpong_two_pairs(VerifyParams p) {
#if defined(MUSE_ATTN_WGMMA)
  grid_launch_dependents();
  SplitCta c = split_cta(p);
  const int pair = threadIdx.x / kPpThreads;
  c.seg = 2 * static_cast<int>(blockIdx.x) + pair;
  if (pair == 0)
    run_pp_pair<D, 1, true>(p, pp_smem_aligned<D>(), threadIdx.x, c);
  else
    run_pp_pair<D, 6, true>(p, pp_smem_aligned<D>() + pp_pair_bytes<D>(), threadIdx.x - kPpThreads, c);
#else
  // Only the warpgroup MMA's build has it (the mma.sync path spills at 128 registers). This stub
  // is never launched: its static shared word marks it for pingpong_two_pairs_loaded() (the real
  // kernel has dynamic shared memory only), which the device description asks.
  __shared__ int no_two_pairs_code;
  if (threadIdx.x == 0) *static_cast<volatile int*>(&no_two_pairs_code) = p.num_requests;
  __trap();
#endif
}
#endif  // MUSE_ATTN_CUDA (the ping-pong split kernel)

// Launches one of split_kernel's entry points (all take kThreads threads and the same shared
// memory); `done` is the entry point's own.
template <int D, typename Kernel>
gpuError_t launch_split_entry(Kernel kernel, std::atomic<uint64_t>& done, const VerifyParams& p,
                              gpuStream_t stream) {
  return launch_with_smem(kernel, done, split_grid(p), kThreads, split_smem_bytes<D>(), p, stream);
}

template <int D, bool kTwoTile = false, bool kFillRing = false>
gpuError_t launch_split_d(const VerifyParams& p, gpuStream_t stream) {
  static std::atomic<uint64_t> done{0};
  if constexpr (kTwoTile) {
    return launch_split_entry<D>(split_kernel_two_tile<D>, done, p, stream);
  } else if constexpr (kFillRing) {
    return launch_split_entry<D>(split_kernel_fill_ring<D>, done, p, stream);
  } else {
    return launch_split_entry<D>(split_kernel<D>, done, p, stream);
  }
}

#if defined(MUSE_ATTN_CUDA)
gpuError_t launch_split_pingpong(const VerifyParams& p, bool two_pairs, gpuStream_t stream) {
  static std::atomic<uint64_t> done_one_pair{0}, done_two_pairs{0};
  if (two_pairs)
    return launch_with_smem(split_kernel_pingpong_two_pairs<64>, done_two_pairs, split_grid_two_pairs(p),
                            2 * kPpThreads, pp_smem_bytes<64>() + pp_pair_bytes<64>(), p, stream);
  return launch_with_smem(split_kernel_pingpong<64>, done_one_pair, split_grid(p), kPpThreads,
                          pp_smem_bytes<64>(), p, stream);
}
#endif

}  // namespace

bool pingpong_two_pairs_loaded() {
#if defined(MUSE_ATTN_CUDA)
  cudaFuncAttributes attr = {};
  if (cudaFuncGetAttributes(&attr, split_kernel_pingpong_two_pairs<64>) != cudaSuccess) {
    (void)cudaGetLastError();  // not left for the next launch's error check
    return false;
  }
  return attr.sharedSizeBytes == 0;  // the stub has a static shared word, the kernel none
#else
  return false;
#endif
}

// The variants other than per_tile exist at D = 64 only, and the fill ring and ping-pong kernels
// on NVIDIA only (launch_plan.h never picks them elsewhere; here they fall back to per_tile). An
// FP8 cache has the per-tile kernel only (split_kernel_fp8.cu.cc).
gpuError_t launch_split(const VerifyParams& p, SplitKernel kernel, gpuStream_t stream) {
  if (p.kv_format != static_cast<int>(KvFormat::kBf16)) return launch_split_fp8(p, stream);
  const bool d64 = p.head_dim == 64;
#if defined(MUSE_ATTN_CUDA)
  if (d64 && (kernel == SplitKernel::kPingpong || kernel == SplitKernel::kPingpongTwoPairs))
    return launch_split_pingpong(p, kernel == SplitKernel::kPingpongTwoPairs, stream);
#endif
  if (d64 && kernel == SplitKernel::kTwoTile) return launch_split_d<64, true>(p, stream);
#if defined(MUSE_ATTN_CUDA)
  if (d64 && kernel == SplitKernel::kFillRing) return launch_split_d<64, false, true>(p, stream);
#endif
  return d64 ? launch_split_d<64>(p, stream) : launch_split_d<128>(p, stream);
}

}  // namespace muse_attn::gpu
