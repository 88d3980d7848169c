// Stand-alone timing of the CUDA kernels, without JAX: the split kernel, the merge and both,
// each launched N times back to back and as a CUDA graph of N calls (as FlashInfer is timed in
// the anchors). For kernel work and profilers (ncu runs it where it may not run JAX):
//   nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -I ffi -o /tmp/kernel_bench -x cu \
//        benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc ffi/gpu/merge_kernel.cu.cc
//   /tmp/kernel_bench [L R window splits] ...   (window 0: full; splits 0: the library's default)
// MUSE_KB_SEQUENTIAL=1 keeps the block ids in order; -DMUSE_ATTN_SPLIT_STAGES_D64=N sets the stages;
// -DMUSE_ATTN_MERGE_BY_LANE_SEGMENTS=N the most segments a merge warp weighs by one lane (0: every
// lane everywhere; the default, 16, gives one lane at every split count of the grid; gpu/launch_plan.h);
// MUSE_KB_ONCE=1 runs each config once untimed (compute-sanitizer), MUSE_KB_POISON=1 poisons ids
// (and reads num_reqs from device memory, as a traced num_reqs; otherwise it is static, R);
// MUSE_ATTN_PDL=0 launches the merge plainly instead of as a programmatic dependent launch
// (gpu/launch_plan.h; default: PDL where the split grid has at most 2 CTAs an SM, sm_90+);
// MUSE_ATTN_PDL=1 always. MUSE_ATTN_PINGPONG, MUSE_ATTN_PP_TWO_PAIRS, MUSE_ATTN_PAIRS and
// MUSE_ATTN_FILL_RING force the split kernel as in the library (gpu/launch_plan.h); the plan
// column names it: +pp ping-pong, +pp2 ping-pong as two pairs a CTA, +pairs two-tile steps.
// Same workload as jax_muse_attn.bench: 16/2 heads, D 64, 8 tokens, shuffled 16-key pages.
// Built with -DMUSE_ATTN_TIMELINE (kb step `kbtl`), it also prints where the last call of a graph
// spends its time (gpu/timeline.h): per stamp, min / median / max over CTAs, us after the first
// split CTA started (%globaltimer: ~0.26 us ticks on an H200); then exact SM-cycle spans: the
// split's first tile in shared memory to its tiles done, the merge's release to its rows folded
// and written. MUSE_KB_TL_CSV=FILE appends every split CTA's stamps (its SM, start, first tile,
// tiles done, partials) to FILE, a block a config (benchmarks/NOTES.md version 41 reads them).
// With -DMUSE_ATTN_TIMELINE_LEAN as well only start, tiles done and partials are stamped (and the
// SM): the full build spills in split_kernel_pp2, the lean one does not and costs it ~0.2-0.5 us
// (benchmarks/experiments/lean_timeline_check.sh; its per-pair ends: experiments/pair_ends.py).
// MUSE_KB_CHECK=1 also checks each config's output (benchmarks/kb_check.h: a naive float64
// attention from the spec, on requests 0, R/2 and R-1) with signed random data instead of the
// timing data, once before the timed calls and once after them (the output poisoned before each),
// prints PASS / FAIL and exits 1 on a failure: a quick check of kernel variants (KB_FLAGS) without
// JAX. Otherwise no output check: the bench and the tests check the kernels.
// MUSE_KB_COLD=1 adds a cold figure: the median over 15 calls of one call (split + merge, plain
// launches from the stream, timed by events) right after a kernel read 256 MiB of another buffer
// (the L2 then holds clean lines of that buffer, as in the anchors' cold method).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "../benchmarks/kb_check.h"
#include "../benchmarks/kb_policy.h"
#include "gpu/kernels.h"
#include "gpu/launch_plan.h"
#include "gpu/timeline.h"
#include "muse_attn/geometry.h"

using muse_attn::gpu::VerifyParams;

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

constexpr int kHq = 16, kHkv = 2, kD = 64, kNq = 8, kPage = 16;

bool g_check_failed = false;
bool g_pingpong_policy = false;  // the split count as on a GPU with the ping-pong kernel (kb_policy.h)

// Reads n int4 (the L2 flush of MUSE_KB_COLD); the sum goes to *sink so nothing is elided.
__global__ void read_through(const int4* p, size_t n, int* sink) {
  int acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const int4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7fffffff) *sink = acc;
}

void run(int L, int R, int window, int splits, int sms, bool shuffle, bool once, bool poison,
         bool check) {
  const int pages = (L + kPage - 1) / kPage;
  const int64_t blocks = int64_t{R} * pages;
  const int rows = kNq * (kHq / kHkv);
  const int max_tiles = window ? std::min((L + 63) / 64, (window + kNq - 1 + 63) / 64 + 1) : (L + 63) / 64;
  if (splits <= 0) {  // as the library: two pairs where the plan runs the 2-an-SM count so
    const int two = 2 * sms / (R * kHkv);
    const bool two_pairs =
        g_pingpong_policy && two > 0 &&
        muse_attn::gpu::plan_launch(muse_attn::gpu::sized_params(R, kNq, kHq, kHkv, kD, pages, window, two, R))
            .split_pp_two_pairs;
    splits = kb_policy::default_splits(R * kHkv, sms, max_tiles, g_pingpong_policy, two_pairs);
  }
  const size_t kv_elems = blocks * kHkv * kPage * 2 * kD;
  std::vector<uint16_t> h_kv(kv_elems), h_q(size_t{kNq} * R * kHq * kD);
  std::mt19937 rng(1);
  for (auto& v : h_kv) v = 0x3c00 + (rng() & 0x3ff) - 0x200;  // bf16 around 0.0078..
  for (auto& v : h_q) v = 0x3f00 + (rng() & 0x7f);
  if (check) {  // signed values of both magnitudes, so that a wrong key or row shows
    auto bf16_of = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return uint16_t(u >> 16); };
    std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
    for (auto& v : h_kv) v = bf16_of(uni(rng));
    for (auto& v : h_q) v = bf16_of(uni(rng));
  }
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  if (shuffle) std::shuffle(table.begin(), table.end(), rng);
  std::vector<int32_t> lens(R, L);
  int32_t nreq = R;
  if (poison) {  // bad ids in live entries, varied lengths, a padding request
    for (size_t i = 0; i < table.size(); i += 7) table[i] = (i / 7) % 2 ? -3 : (1 << 30);
    for (int r = 0; r < R; ++r) lens[r] = r % 3 == 2 ? 5 : L - 37 * r;
    nreq = R > 1 ? R - 1 : R;
  }
  // As verify_attention with num_reqs=None (static R); poisoned runs read a padded count from nr.
  VerifyParams p = muse_attn::gpu::sized_params(R, kNq, kHq, kHkv, kD, pages, window, splits,
                                                poison ? -1 : R);
  uint16_t *kv, *q, *out;
  int32_t *bt, *sl, *nr;
  uint16_t* po;  // partial o, bf16
  float* pml;
  CHECK(cudaMalloc(&kv, kv_elems * 2));
  CHECK(cudaMalloc(&q, h_q.size() * 2));
  CHECK(cudaMalloc(&out, h_q.size() * 2));
  CHECK(cudaMalloc(&bt, blocks * 4));
  CHECK(cudaMalloc(&sl, R * 4));
  CHECK(cudaMalloc(&nr, 4));
  const size_t states = static_cast<size_t>(R) * kHkv * splits * rows;
  CHECK(cudaMalloc(&po, states * kD * 2));
  CHECK(cudaMalloc(&pml, states * 2 * 4));
  CHECK(cudaMemcpy(kv, h_kv.data(), kv_elems * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(q, h_q.data(), h_q.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(bt, table.data(), blocks * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(sl, lens.data(), R * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(nr, &nreq, 4, cudaMemcpyHostToDevice));
  p.q = q; p.kv = kv; p.table = bt; p.seq_lens = sl; p.num_reqs = nr; p.out = out;
  p.part_o = po; p.part_ml = pml; p.num_blocks = blocks; p.table_stride = pages;
  p.scale_log2 = 0.125f * 1.4426950408889634f;

#if defined(MUSE_ATTN_TIMELINE)
  using muse_attn::gpu::kTimelineEvents;
  using muse_attn::gpu::kTimelineMergeBase;
  const size_t tl_elems = size_t{2} * kTimelineMergeBase * kTimelineEvents;
  CHECK(cudaMalloc(&p.timeline, tl_elems * 8));
  CHECK(cudaMemset(p.timeline, 0, tl_elems * 8));
#endif
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  const int N = 20;
  const muse_attn::gpu::LaunchPlan plan = muse_attn::gpu::plan_launch(p);
  auto both = [&] {
    CHECK(muse_attn::gpu::launch_split(p, plan, st));
    CHECK(muse_attn::gpu::launch_merge(p, plan, st));
  };
  // One call, its output against kb_check.h's reference on a sample of requests: before the
  // timing and after it (so that state one call could leave for the next is checked too, as
  // the chunk counters of benchmarks/experiments' pool_steal kernel were, session 41).
  auto check_once = [&](const char* when) {
    CHECK(cudaMemsetAsync(out, 0xFF, h_q.size() * 2, st));  // no earlier call's output left to pass
    both();
    CHECK(cudaStreamSynchronize(st));
    std::vector<uint16_t> h_out(h_q.size());
    CHECK(cudaMemcpy(h_out.data(), out, h_out.size() * 2, cudaMemcpyDeviceToHost));
    kb_check::Problem cp{R, kNq, kHq, kHkv, kD, pages, window, blocks, nreq, 0.125,
                         h_kv.data(), h_q.data(), table.data(), lens.data()};
    std::vector<int> sample = {0, R / 2, R - 1};
    std::sort(sample.begin(), sample.end());
    sample.erase(std::unique(sample.begin(), sample.end()), sample.end());
    const kb_check::Result res = kb_check::check(cp, h_out.data(), sample);
    std::printf("check %s L=%d R=%d splits=%d%s%s: %s, %lld of %lld elements out of tolerance, "
                "max err %.3g\n", window ? "swa" : "full", L, R, splits,
                poison ? " (poisoned ids, padding)" : "", when, res.bad ? "FAIL" : "PASS",
                (long long)res.bad, (long long)res.checked, res.max_err);
    if (res.bad) g_check_failed = true;
  };
  if (check) check_once("");
  if (once) {  // for compute-sanitizer: one call, no timing
    both();
    CHECK(cudaStreamSynchronize(st));
    std::printf("%s L=%d R=%d splits=%d%s: ran\n", window ? "swa" : "full", L, R, splits,
                poison ? " (poisoned ids, padding)" : "");
  } else {
  auto time_loop = [&](auto f) {  // per call, N back-to-back launches, best of 5
    float best = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {
      f();
      CHECK(cudaEventRecord(e0, st));
      for (int i = 0; i < N; ++i) f();
      CHECK(cudaEventRecord(e1, st));
      CHECK(cudaEventSynchronize(e1));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      best = std::min(best, ms * 1e3f / N);
    }
    return best;
  };
  const float t_split = time_loop([&] { CHECK(muse_attn::gpu::launch_split(p, plan, st)); });
  const float t_merge = time_loop([&] { CHECK(muse_attn::gpu::launch_merge(p, plan, st)); });
  const float t_both = time_loop(both);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < N; ++i) both();
  CHECK(cudaStreamEndCapture(st, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  const float t_graph = time_loop([&] { CHECK(cudaGraphLaunch(ge, st)); }) / N;
  float t_cold = -1.0f;
  if (std::getenv("MUSE_KB_COLD") != nullptr) {
    const size_t flush_bytes = size_t{256} << 20;
    int4* flush = nullptr;
    int* sink = nullptr;
    CHECK(cudaMalloc(&flush, flush_bytes));
    CHECK(cudaMalloc(&sink, sizeof(int)));
    CHECK(cudaMemset(flush, 1, flush_bytes));
    std::vector<float> v;
    for (int rep = 0; rep < 15; ++rep) {
      read_through<<<4 * sms, 512, 0, st>>>(flush, flush_bytes / sizeof(int4), sink);
      CHECK(cudaGetLastError());
      CHECK(cudaEventRecord(e0, st));
      both();
      CHECK(cudaEventRecord(e1, st));
      CHECK(cudaEventSynchronize(e1));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      v.push_back(ms * 1e3f);
    }
    std::sort(v.begin(), v.end());
    t_cold = v[v.size() / 2];
    CHECK(cudaFree(flush));
    CHECK(cudaFree(sink));
  }
  const double keys = window ? std::min(L, window + kNq - 1) : L;
  const double bytes = double(R) * keys * kHkv * kD * 2 * 2;
  // The launch plan in one token: the merge's launch, then the split kernel where it is not the
  // plain one (+pp: the ping-pong kernel, +pairs: two-tile segments as one step).
  char launch[32];
  std::snprintf(launch, sizeof launch, "%s%s", plan.merge_pdl ? "pdl" : "plain",
                plan.split_pingpong ? (plan.split_pp_two_pairs ? "+pp2" : "+pp") : plan.split_pairs ? "+pairs" : "");
  std::printf("%-6s%s L=%-7d R=%-3d splits=%-4d %-11s KV %8.1f MB | split %8.2f us  merge %6.2f us  "
              "both %8.2f us  graph %8.2f us/call  %7.0f GB/s\n",
              window ? "swa" : "full", shuffle ? "" : "(seq)", L, R, splits,
              launch, bytes / 1e6, t_split,
              t_merge, t_both, t_graph, bytes / (t_graph * 1e-6) / 1e9);
  if (t_cold >= 0) std::printf("    cold (after a 256 MiB read, one call, events): %.2f us\n", t_cold);
  if (check) check_once(" after the timed calls");
#if defined(MUSE_ATTN_TIMELINE)
  // The last call of one more graph run (the calls before it leave the same stamps).
  CHECK(cudaMemset(p.timeline, 0, tl_elems * 8));
  CHECK(cudaGraphLaunch(ge, st));
  CHECK(cudaStreamSynchronize(st));
  std::vector<uint64_t> tl(tl_elems);
  CHECK(cudaMemcpy(tl.data(), p.timeline, tl_elems * 8, cudaMemcpyDeviceToHost));
  uint64_t t0 = ~uint64_t{0};
  for (int c = 0; c < kTimelineMergeBase; ++c)
    if (tl[size_t(c) * kTimelineEvents]) t0 = std::min(t0, tl[size_t(c) * kTimelineEvents]);
  const char* names[2][10] = {{"start", "seq_lens", "ids+copies", "tile0 in", "tiles done", "partials",
                               "own tile0", "", "q issued", "pre-wait"},
                              {"start", "dep wait", "folded", "written", "", "", "", "", "", ""}};
  // A CTA's stamp k in us after t0, or -1 where it was not stamped (the lean build stamps few).
  auto stamp_us = [&](const uint64_t* e, int k) { return e[k] ? (double(e[k]) - double(t0)) * 1e-3 : -1.0; };
  if (const char* csv = std::getenv("MUSE_KB_TL_CSV")) {  // every split CTA's stamps, for a closer look
    if (FILE* f = std::fopen(csv, "a")) {
      std::fprintf(f, "# L=%d R=%d window=%d splits=%d: cta,segment,group,sm,start_us,seq_lens_us,"
                   "ids_copies_us,tile0_us,tiles_done_us,partials_us\n", L, R, window, splits);
      for (int c = 0; c < kTimelineMergeBase; ++c) {
        const uint64_t* e = &tl[size_t(c) * kTimelineEvents];
        if (!e[0]) continue;
        std::fprintf(f, "%d,%d,%d,%llu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", c, c % splits, c / splits,
                     (unsigned long long)e[12], stamp_us(e, 0), stamp_us(e, 1), stamp_us(e, 2), stamp_us(e, 3),
                     stamp_us(e, 4), stamp_us(e, 5));
      }
      std::fclose(f);
    }
  }
  std::vector<double> mhz;  // split CTAs: SM cycles (stamp 7) over ns (stamps 0 to 5)
  for (int c = 0; c < kTimelineMergeBase; ++c) {
    const uint64_t* e = &tl[size_t(c) * kTimelineEvents];
    if (e[0] && e[5] > e[0] && e[7]) mhz.push_back(double(e[7]) / double(e[5] - e[0]) * 1e3);
  }
  std::sort(mhz.begin(), mhz.end());
  if (!mhz.empty()) std::printf("    SM clock (split CTAs, cycles / ns): median %.0f MHz\n", mhz[mhz.size() / 2]);
  {  // the split CTA that finished its tiles last: which segment (x) and group (y)
    int worst = -1;
    for (int c = 0; c < kTimelineMergeBase; ++c)
      if (tl[size_t(c) * kTimelineEvents + 4] &&
          (worst < 0 || tl[size_t(c) * kTimelineEvents + 4] > tl[size_t(worst) * kTimelineEvents + 4]))
        worst = c;
    if (worst >= 0) {
      const uint64_t* e = &tl[size_t(worst) * kTimelineEvents];
      std::printf("    last split CTA: segment %d group %d of %d segments: ids+copies %.2f tile0 %.2f "
                  "tiles done %.2f us\n", worst % splits, worst / splits, splits, stamp_us(e, 2),
                  stamp_us(e, 3), stamp_us(e, 4));
    }
  }
  for (int k = 0; k < 2; ++k) {
    for (int e = 0; e < (k ? 4 : 10); ++e) {
      if (!*names[k][e]) continue;
      std::vector<double> v;
      for (int c = 0; c < kTimelineMergeBase; ++c) {
        const uint64_t t = tl[(size_t(k) * kTimelineMergeBase + c) * kTimelineEvents + e];
        if (t) v.push_back((double(t) - double(t0)) * 1e-3);
      }
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      std::printf("    %s %-10s n=%-5zu min %6.2f  med %6.2f  max %6.2f us\n", k ? "merge" : "split",
                  names[k][e], v.size(), v.front(), v[v.size() / 2], v.back());
    }
  }
  {  // SM cycles (exact, against the ~0.26 us ticks above): the split's first tile to its last
     // tile done (stamps 10 -> 11), the merge from its release (stamps 7 / 4 / 5 / 6)
    auto cycles = [&](int base, int e, int from) {
      std::vector<double> v;
      for (int c = 0; c < kTimelineMergeBase; ++c) {
        const uint64_t* s = &tl[(size_t(base) + c) * kTimelineEvents];
        if (s[e] && (from < 0 || s[from])) v.push_back(double(s[e]) - (from < 0 ? 0.0 : double(s[from])));
      }
      std::sort(v.begin(), v.end());
      return v;
    };
    const double ghz = mhz.empty() ? 1.7 : mhz[mhz.size() / 2] * 1e-3;
    auto show = [&](const char* what, const std::vector<double>& v) {
      if (v.empty()) return;
      std::printf("    %-34s n=%-5zu min %6.0f  med %6.0f  max %6.0f cycles (med %.2f us)\n", what, v.size(),
                  v.front(), v[v.size() / 2], v.back(), v[v.size() / 2] / ghz * 1e-3);
    };
    show("split tile0 in -> tiles done", cycles(0, 11, 10));
    show("merge release -> first loads landed", cycles(kTimelineMergeBase, 7, -1));  // one lane a segment only
    show("merge release -> own segments in", cycles(kTimelineMergeBase, 4, -1));
    show("merge release -> row folded", cycles(kTimelineMergeBase, 5, -1));
    show("merge release -> row written", cycles(kTimelineMergeBase, 6, -1));
  }
  {  // Split CTAs that shared an SM (stamp 12: %smid, 13: clock64() at the start; one SM, one
     // clock): how far apart their first tiles landed and their last were done, against how long
     // a CTA's tiles took. Two CTAs whose tiles start within a small part of a tile of each other
     // use the tensor cores and the SFU at the same times (in step) rather than in turn.
    std::map<uint64_t, std::vector<int>> by_sm;
    for (int c = 0; c < kTimelineMergeBase; ++c) {
      const uint64_t* e = &tl[size_t(c) * kTimelineEvents];
      if (e[0] && e[10] && e[11]) by_sm[e[12]].push_back(c);
    }
    std::vector<double> d_first, d_last, span;
    int alone = 0;
    for (const auto& kv : by_sm) {
      if (kv.second.size() == 1) ++alone;
      if (kv.second.size() != 2) continue;
      const uint64_t* a = &tl[size_t(kv.second[0]) * kTimelineEvents];
      const uint64_t* b = &tl[size_t(kv.second[1]) * kTimelineEvents];
      d_first.push_back(std::abs(double(a[13] + a[10]) - double(b[13] + b[10])));
      d_last.push_back(std::abs(double(a[13] + a[11]) - double(b[13] + b[11])));
      span.push_back(double(a[11] - a[10]));
      span.push_back(double(b[11] - b[10]));
    }
    if (!d_first.empty()) {
      std::sort(d_first.begin(), d_first.end());
      std::sort(d_last.begin(), d_last.end());
      std::sort(span.begin(), span.end());
      std::printf("    SMs with 2 split CTAs: %zu (with 1: %d); their first tiles in: %.0f cycles apart "
                  "(median; min %.0f, max %.0f), last tiles done: %.0f apart; a CTA's first tile in "
                  "-> tiles done: median %.0f cycles\n",
                  d_first.size(), alone, d_first[d_first.size() / 2], d_first.front(), d_first.back(),
                  d_last[d_last.size() / 2], span[span.size() / 2]);
    }
  }
#endif
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  }
#if defined(MUSE_ATTN_TIMELINE)
  CHECK(cudaFree(p.timeline));
#endif
  for (void* ptr : {(void*)kv, (void*)q, (void*)out, (void*)bt, (void*)sl, (void*)nr, (void*)po, (void*)pml})
    CHECK(cudaFree(ptr));
  CHECK(cudaStreamDestroy(st));
}

int main(int argc, char** argv) {
  // MUSE_KB_SEQUENTIAL=1: block ids in order (no shuffle), to see what the access pattern costs.
  const bool shuffle = !std::getenv("MUSE_KB_SEQUENTIAL");
  // MUSE_KB_ONCE=1: each config once, untimed (for compute-sanitizer); MUSE_KB_POISON=1: bad
  // block ids in live entries, varied lengths and a padding request.
  const bool once = std::getenv("MUSE_KB_ONCE") != nullptr;
  const bool poison = std::getenv("MUSE_KB_POISON") != nullptr;
  const bool check = std::getenv("MUSE_KB_CHECK") != nullptr;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  {  // as jax_muse_attn.attention.pingpong_split_kernel at D = 64 (and launch_plan.h's switch)
    const int forced = muse_attn::gpu::env_force("MUSE_ATTN_PINGPONG");
    g_pingpong_policy = forced == 1 || (forced == -1 && muse_attn::gpu::device_compute_major() == 9);
  }
  if (argc > 1 && (argc - 1) % 4 == 0) {
    for (int i = 1; i < argc; i += 4)
      run(std::atoi(argv[i]), std::atoi(argv[i + 1]), std::atoi(argv[i + 2]), std::atoi(argv[i + 3]), sms, shuffle, once, poison, check);
    return g_check_failed ? 1 : 0;
  }
  const int grid[][3] = {{32768, 1, 2048}, {32768, 16, 2048}, {2048, 1, 0}, {8192, 4, 0},
                         {32768, 1, 0},   {32768, 4, 0},     {131072, 4, 0}, {131072, 16, 0}};
  for (auto& c : grid) run(c[0], c[1], c[2], 0, sms, shuffle, once, poison, check);
  return g_check_failed ? 1 : 0;
}
