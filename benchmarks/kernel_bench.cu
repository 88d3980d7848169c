// The CUDA kernels alone, without JAX: the split kernel, the merge and both, per call, timed as
// N launches back to back and as a CUDA graph of N calls (how FlashInfer is timed). For kernel
// work, profilers (ncu) and compute-sanitizer. The launch plan is the library's
// (gpu/launch_plan.h: plan_launch on describe_current_device()), with the same override as a call
// through JAX: MUSE_ATTN_LAUNCH="split_kernel=pingpong,merge_pdl=0,..." (parse_overrides).
//   nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -I ffi -o /tmp/kernel_bench -x cu \
//        benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc ffi/gpu/split_kernel_fp8.cu.cc \
//        ffi/gpu/split_kernel_balanced.cu.cc ffi/gpu/merge_kernel.cu.cc ffi/gpu/device_query.cc
//   /tmp/kernel_bench [L R window splits] ...   (window 0: full; splits 0: the plan's count)
// The workload is the benchmark's (benchmarks/bench.py): 16/2 heads, D 64, 8 tokens a request,
// shuffled 16-key pages, every request at L keys; no arguments: eight configs of its grid.
// Environment:
//   MUSE_KB_CHECK=1   check each config's output against a naive float64 attention
//                     (kb_check.h) before and after the timed calls; exit 1 on a failure
//   MUSE_KB_COLD=1    add a cold figure: one call right after a kernel read 256 MiB of another
//                     buffer (events around the call), median of 15
//   MUSE_KB_MERGE=1   the merge launched where the split kernel would write the output
//                     (kernels.h split_writes_output)
//   MUSE_KB_ONCE=1    run each config once, untimed (for compute-sanitizer)
//   MUSE_KB_POISON=1  bad block ids in live entries, varied lengths, a padding request, and
//                     num_reqs read from device memory (as a traced num_reqs)
//   MUSE_KB_FP8=1     a float8_e4m3fn cache with per-tensor scales 1 (the benchmark's FP8 form):
//                     the plan and kernels of an FP8 call; the check reads its values as bf16
//   MUSE_KB_L2=1      every table entry one of 512 blocks (a few MiB, resident in L2): the call's
//                     time without the memory's bandwidth, what its instruction stream allows
// Built with benchmarks/timeline_marks.h (its header says how), each config also prints a
// timeline of one hot call: where a CTA's time goes, how its starts and the SMs' ends spread.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kb_check.h"
#include "gpu/kernels.h"
#include "gpu/launch_plan.h"

namespace gpu = muse_attn::gpu;

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

constexpr int kHq = 16, kHkv = 2, kD = 64, kNq = 8, kPage = 16;

struct Options {
  bool once = false, poison = false, check = false, cold = false, merge = false, fp8 = false, l2 = false;
};

bool g_check_failed = false;

#if defined(MUSE_KB_TIMELINE)
// min / p10 / p50 / p90 / max of v, each times `unit` (ns to µs by default).
std::string spread(std::vector<double> v, double unit = 1e-3) {
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  auto q = [&](double f) { return v[static_cast<size_t>(f * (v.size() - 1) + 0.5)] * unit; };
  char b[128];
  std::snprintf(b, sizeof b, "%.2f / %.2f / %.2f / %.2f / %.2f", q(0.0), q(0.1), q(0.5), q(0.9), q(1.0));
  return b;
}

// One call (after an untimed one) with every CTA's marks stamped (timeline_marks.h), summarised;
// ns from the global timer, printed in µs as min / p10 / p50 / p90 / max.
template <typename F>
void print_timeline(F both, cudaStream_t st) {
  constexpr size_t kRows = size_t{1} << 20;  // CTAs a kernel at most here
  constexpr int kSlots = muse_timeline::kSlots, kSm = muse_timeline::kMarks;
  const size_t bytes = kRows * kSlots * sizeof(unsigned long long);
  unsigned long long *split_rows, *merge_rows;
  CHECK(cudaMalloc(&split_rows, bytes));
  CHECK(cudaMalloc(&merge_rows, bytes));
  both();
  CHECK(cudaMemsetAsync(split_rows, 0, bytes, st));
  CHECK(cudaMemsetAsync(merge_rows, 0, bytes, st));
  CHECK(cudaStreamSynchronize(st));
  CHECK(muse_timeline::set_rows(split_rows, merge_rows));
  both();
  CHECK(cudaStreamSynchronize(st));
  CHECK(muse_timeline::set_rows(nullptr, nullptr));
  std::vector<unsigned long long> s(kRows * kSlots), m(kRows * kSlots);
  CHECK(cudaMemcpy(s.data(), split_rows, bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(m.data(), merge_rows, bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(split_rows));
  CHECK(cudaFree(merge_rows));

  using gpu::TimelineMark;
  static_assert(muse_timeline::kMarks == static_cast<int>(TimelineMark::kMergeEnd) + 1, "a slot a mark");
  auto at = [](const std::vector<unsigned long long>& v, size_t r, TimelineMark k) {
    return v[r * kSlots + static_cast<int>(k)];
  };
  constexpr TimelineMark kStart = TimelineMark::kStart, kIssued = TimelineMark::kIssued,
                         kFirst = TimelineMark::kFirstTile, kLoopEnd = TimelineMark::kLoopEnd,
                         kEnd = TimelineMark::kEnd, kMStart = TimelineMark::kMergeStart,
                         kMReleased = TimelineMark::kMergeReleased, kMEnd = TimelineMark::kMergeEnd;
  // A split CTA's end: its partials written, else (a CTA with no segment) its loop's end.
  auto cta_end = [&](size_t r) { return at(s, r, kEnd) ? at(s, r, kEnd) : at(s, r, kLoopEnd); };
  unsigned long long t0 = ~0ull, t_end = 0;
  std::vector<size_t> ctas;
  std::vector<unsigned long long> stamps;
  for (size_t r = 0; r < kRows; ++r) {
    if (!at(s, r, kStart)) continue;
    ctas.push_back(r);
    t0 = std::min(t0, at(s, r, kStart));
    t_end = std::max(t_end, cta_end(r));
    for (TimelineMark k : {kStart, kIssued, kFirst, kLoopEnd, kEnd})
      if (at(s, r, k)) stamps.push_back(at(s, r, k));
  }
  if (ctas.empty()) {
    std::printf("    timeline: no split CTA stamped\n");
    return;
  }
  std::sort(stamps.begin(), stamps.end());
  unsigned long long tick = ~0ull;  // the timer's step, as the stamps show it
  for (size_t i = 1; i < stamps.size(); ++i)
    if (stamps[i] > stamps[i - 1]) tick = std::min(tick, stamps[i] - stamps[i - 1]);
  std::vector<double> starts, issued, first, loop, tail, ends;
  std::map<unsigned long long, std::vector<std::pair<unsigned long long, unsigned long long>>> by_sm;
  for (size_t r : ctas) {
    const unsigned long long st0 = at(s, r, kStart), end = cta_end(r);
    starts.push_back(double(st0 - t0));
    if (at(s, r, kIssued)) issued.push_back(double(at(s, r, kIssued) - st0));
    if (at(s, r, kFirst)) first.push_back(double(at(s, r, kFirst) - st0));
    if (at(s, r, kFirst) && at(s, r, kLoopEnd)) loop.push_back(double(at(s, r, kLoopEnd) - at(s, r, kFirst)));
    if (at(s, r, kLoopEnd) && at(s, r, kEnd)) tail.push_back(double(at(s, r, kEnd) - at(s, r, kLoopEnd)));
    if (end) {
      ends.push_back(double(end - t0));
      by_sm[s[r * kSlots + kSm]].push_back({st0, end});
    }
  }
  std::vector<double> sm_last, sm_idle;  // an SM's last end; the span's share with no CTA of it
  size_t most = 0;
  for (auto& [sm, iv] : by_sm) {
    std::sort(iv.begin(), iv.end());
    unsigned long long busy = 0, cur_lo = iv[0].first, cur_hi = iv[0].second, last = 0;
    for (auto& [lo, hi] : iv) {
      if (lo > cur_hi) {
        busy += cur_hi - cur_lo;
        cur_lo = lo;
        cur_hi = hi;
      } else {
        cur_hi = std::max(cur_hi, hi);
      }
      last = std::max(last, hi);
    }
    busy += cur_hi - cur_lo;
    sm_last.push_back(double(last - t0));
    sm_idle.push_back(100.0 * (1.0 - double(busy) / double(t_end - t0)));
    std::vector<std::pair<unsigned long long, int>> ev;
    for (auto& [lo, hi] : iv) ev.push_back({lo, 1}), ev.push_back({hi, -1});
    std::sort(ev.begin(), ev.end());  // at one time an end (-1) before a start
    int n = 0;
    for (auto& e : ev) most = std::max(most, size_t(n += e.second));
  }
  std::printf("    timeline (timer step %.0f ns): %zu split CTAs on %zu SMs, at most %zu at once on one; "
              "first start to last end %.2f us\n", double(tick), ctas.size(), by_sm.size(), most,
              double(t_end - t0) * 1e-3);
  std::printf("      CTA starts after the first      %s us\n", spread(starts).c_str());
  std::printf("      start -> prologue issued        %s us\n", spread(issued).c_str());
  std::printf("      start -> first tile landed      %s us\n", spread(first).c_str());
  std::printf("      first tile -> last tile's math  %s us\n", spread(loop).c_str());
  std::printf("      last tile -> partials written   %s us\n", spread(tail).c_str());
  std::printf("      CTA ends                        %s us\n", spread(ends).c_str());
  std::printf("      an SM's last end                %s us\n", spread(sm_last).c_str());
  std::printf("      an SM's idle share of the span  %s %%\n", spread(sm_idle, 1.0).c_str());
  std::vector<double> m_start, m_released, m_end;
  for (size_t r = 0; r < kRows; ++r) {
    if (!at(m, r, kMStart)) continue;
    m_start.push_back(double(at(m, r, kMStart)) - double(t0));
    if (at(m, r, kMReleased)) m_released.push_back(double(at(m, r, kMReleased)) - double(t_end));
    if (at(m, r, kMEnd)) m_end.push_back(double(at(m, r, kMEnd)) - double(t_end));
  }
  if (!m_start.empty()) {
    std::printf("      merge: %zu CTAs; starts after the split's first start %s us\n", m_start.size(),
                spread(m_start).c_str());
    std::printf("      merge released after the split's last end  %s us\n", spread(m_released).c_str());
    std::printf("      merge rows stored after the split's last end %s us\n", spread(m_end).c_str());
  }
}
#endif

// Reads n int4 (the L2 flush of MUSE_KB_COLD); the xor goes to *sink so nothing is elided.
__global__ void read_through(const int4* p, size_t n, int* sink) {
  int acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const int4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7fffffff) *sink = acc;
}

void run(int L, int R, int window, int splits, const gpu::Device& device, const gpu::Overrides& overrides,
         const Options& opt) {
  const int pages = (L + kPage - 1) / kPage;
  const int64_t blocks = int64_t{R} * pages;
  const int rows = kNq * (kHq / kHkv);
  gpu::CallShape shape{kD, kNq, kHq, kHkv, R, pages, window};
  shape.kv_fp8 = opt.fp8;
  gpu::Plan plan;
  if (std::string err = gpu::plan_launch(shape, device, splits, overrides, &plan); !err.empty()) {
    std::fprintf(stderr, "kernel_bench: L=%d R=%d window=%d splits=%d: %s\n", L, R, window, splits, err.c_str());
    std::exit(2);
  }
  splits = plan.num_splits;

  const size_t kv_elems = blocks * kHkv * kPage * 2 * kD;
  std::vector<uint16_t> h_kv(kv_elems), h_q(size_t{kNq} * R * kHq * kD);
  std::vector<uint8_t> h_kv8(opt.fp8 ? kv_elems : 0);
  std::mt19937 rng(1);
  // FP8: h_kv is written below from the FP8 values, so the bf16 fills skip it.
  if (!opt.fp8)
    for (auto& v : h_kv) v = 0x3c00 + (rng() & 0x3ff) - 0x200;  // bf16 around 0.0078
  for (auto& v : h_q) v = 0x3f00 + (rng() & 0x7f);
  auto bf16_of = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return uint16_t(u >> 16); };
  if (opt.check) {  // signed values of both magnitudes, so that a wrong key or row shows
    std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
    if (!opt.fp8)
      for (auto& v : h_kv) v = bf16_of(uni(rng));
    for (auto& v : h_q) v = bf16_of(uni(rng));
  }
  if (opt.fp8) {  // e4m3fn bytes of exponent field 4-8 (2^-3 up to 3.75), either sign; h_kv their
                  // values, exact in bf16 (the check's cache: the scales are 1)
    for (size_t i = 0; i < kv_elems; ++i) {
      const uint32_t r = rng(), e = 4 + r % 5, m = (r >> 8) & 7, sign = (r >> 12) & 1;
      h_kv8[i] = uint8_t(sign << 7 | e << 3 | m);
      h_kv[i] = bf16_of((sign ? -1.0f : 1.0f) * std::ldexp(1.0f + m / 8.0f, int(e) - 7));
    }
  }
  const size_t kv_bytes = kv_elems * (opt.fp8 ? 1 : 2);
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  if (opt.l2)
    for (auto& b : table) b %= 512;
  std::vector<int32_t> lens(R, L);
  int32_t nreq = R;
  if (opt.poison) {
    for (size_t i = 0; i < table.size(); i += 7) table[i] = (i / 7) % 2 ? -3 : (1 << 30);
    for (int r = 0; r < R; ++r) lens[r] = r % 3 == 2 ? 5 : L - 37 * r;
    nreq = R > 1 ? R - 1 : R;
  }
  // num_reqs static (R), as verify_attention with num_reqs=None; poisoned runs read it.
  gpu::VerifyParams p = gpu::sized_params(R, kNq, kHq, kHkv, kD, pages, window, splits, opt.poison ? -1 : R);
  void* kv;
  uint16_t *q, *out, *po;
  int32_t *bt, *sl, *nr;
  float *pml, *scales;
  const size_t states = static_cast<size_t>(R) * kHkv * splits * rows;
  CHECK(cudaMalloc(&kv, kv_bytes));
  CHECK(cudaMalloc(&scales, 2 * sizeof(float)));
  CHECK(cudaMalloc(&q, h_q.size() * 2));
  CHECK(cudaMalloc(&out, h_q.size() * 2));
  CHECK(cudaMalloc(&bt, blocks * 4));
  CHECK(cudaMalloc(&sl, R * 4));
  CHECK(cudaMalloc(&nr, 4));
  CHECK(cudaMalloc(&po, states * kD * 2));
  CHECK(cudaMalloc(&pml, states * 2 * 4));
  CHECK(cudaMemcpy(kv, opt.fp8 ? static_cast<const void*>(h_kv8.data()) : h_kv.data(), kv_bytes,
                   cudaMemcpyHostToDevice));
  const float unit_scales[2] = {1.0f, 1.0f};
  CHECK(cudaMemcpy(scales, unit_scales, sizeof unit_scales, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(q, h_q.data(), h_q.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(bt, table.data(), blocks * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(sl, lens.data(), R * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(nr, &nreq, 4, cudaMemcpyHostToDevice));
  p.q = q; p.kv = kv; p.table = bt; p.seq_lens = sl; p.num_reqs = nr; p.out = out;
  p.part_o = po; p.part_ml = pml; p.num_blocks = blocks; p.table_stride = pages;
  p.scale_log2 = 0.125f * 1.4426950408889634f;
  if (opt.fp8) {
    p.kv_format = static_cast<int>(muse_attn::KvFormat::kFp8E4m3fn);
    p.scale_kind = static_cast<int>(muse_attn::ScaleKind::kTensor);
    p.k_scale = scales;
    p.v_scale = scales + 1;
  }

  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  auto split = [&] {
    CHECK(plan.balance_segments ? gpu::launch_split_balanced(p, plan.split_kernel, st)
          : opt.fp8             ? gpu::launch_split_fp8(p, plan.split_kernel, st)
                                : gpu::launch_split(p, plan.split_kernel, st));
  };
  // At one split by the one-pair ping-pong kernel the split kernel writes the output (no merge), as in
  // the handler; MUSE_KB_MERGE=1 keeps the partials and the merge there (the two compared).
  p.split_writes_output = gpu::split_writes_output(plan, p) && !opt.merge;
  auto merge = [&] {
    if (!p.split_writes_output) CHECK(gpu::launch_merge(p, plan, st));
  };
  auto both = [&] { split(); merge(); };
  char merge_form[48] = "no merge", what[160];
  if (!p.split_writes_output)
    std::snprintf(merge_form, sizeof merge_form, "merge %dw%s%s", plan.merge_warps, plan.merge_pdl ? " pdl" : "",
                  plan.merge_by_lane ? " by-lane" : "");
  std::snprintf(what, sizeof what, "%-4s%s%s L=%-7d R=%-3d splits=%-4d %-18s %s", window ? "swa" : "full",
                opt.fp8 ? "-fp8" : "", opt.l2 ? "-l2" : "", L, R, splits,
                gpu::kSplitKernelNames[static_cast<int>(plan.split_kernel)], merge_form);

  // One call, its output against kb_check.h on a sample of requests, the output poisoned first.
  auto check_once = [&](const char* when) {
    CHECK(cudaMemsetAsync(out, 0xFF, h_q.size() * 2, st));
    both();
    CHECK(cudaStreamSynchronize(st));
    std::vector<uint16_t> h_out(h_q.size());
    CHECK(cudaMemcpy(h_out.data(), out, h_out.size() * 2, cudaMemcpyDeviceToHost));
    kb_check::Problem cp{R, kNq, kHq, kHkv, kD, pages, window, blocks, nreq, 0.125,
                         h_kv.data(), h_q.data(), table.data(), lens.data()};
    std::vector<int> sample = {0, R / 2, R - 1};
    sample.erase(std::unique(sample.begin(), sample.end()), sample.end());
    const kb_check::Result res = kb_check::check(cp, h_out.data(), sample);
    std::printf("check %s%s%s: %s, %lld of %lld elements out of tolerance, max err %.3g\n", what,
                opt.poison ? " (poisoned)" : "", when, res.bad ? "FAIL" : "PASS", (long long)res.bad,
                (long long)res.checked, res.max_err);
    if (res.bad) g_check_failed = true;
  };
  if (opt.check) check_once("");
  if (opt.once) {
    both();
    CHECK(cudaStreamSynchronize(st));
    std::printf("%s%s: ran\n", what, opt.poison ? " (poisoned)" : "");
  } else {
    const int N = 20;
    auto time_loop = [&](auto f) {  // per call of f, N back to back, best of 5
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
    const float t_split = time_loop(split), t_merge = time_loop(merge), t_both = time_loop(both);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < N; ++i) both();
    CHECK(cudaStreamEndCapture(st, &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    const float t_graph = time_loop([&] { CHECK(cudaGraphLaunch(ge, st)); }) / N;
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));
    const double keys = window ? std::min(L, window + kNq - 1) : L;
    const double bytes = double(R) * keys * kHkv * kD * 2 * (opt.fp8 ? 1 : 2);  // K and V that must be read
    std::printf("%s KV %8.1f MB | split %8.2f us  merge %6.2f us  both %8.2f us  graph %8.2f us/call  %7.0f GB/s\n",
                what, bytes / 1e6, t_split, t_merge, t_both, t_graph, bytes / (t_graph * 1e-6) / 1e9);
    if (opt.cold) {
      const size_t flush_bytes = size_t{256} << 20;
      int4* flush = nullptr;
      int* sink = nullptr;
      CHECK(cudaMalloc(&flush, flush_bytes));
      CHECK(cudaMalloc(&sink, sizeof(int)));
      CHECK(cudaMemset(flush, 1, flush_bytes));
      std::vector<float> v;
      for (int rep = 0; rep < 15; ++rep) {
        read_through<<<4 * device.multiprocessors, 512, 0, st>>>(flush, flush_bytes / sizeof(int4), sink);
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
      std::printf("    cold (one call after a 256 MiB read, events): %.2f us\n", v[v.size() / 2]);
      CHECK(cudaFree(flush));
      CHECK(cudaFree(sink));
    }
    if (opt.check) check_once(" after the timed calls");
#if defined(MUSE_KB_TIMELINE)
    print_timeline(both, st);
#endif
  }
  for (void* ptr : {kv, (void*)scales, (void*)q, (void*)out, (void*)bt, (void*)sl, (void*)nr, (void*)po, (void*)pml})
    CHECK(cudaFree(ptr));
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  CHECK(cudaStreamDestroy(st));
}

int main(int argc, char** argv) {
  auto env = [](const char* name) { return std::getenv(name) != nullptr; };
  Options opt;
  opt.once = env("MUSE_KB_ONCE");
  opt.poison = env("MUSE_KB_POISON");
  opt.check = env("MUSE_KB_CHECK");
  opt.cold = env("MUSE_KB_COLD");
  opt.merge = env("MUSE_KB_MERGE");
  opt.fp8 = env("MUSE_KB_FP8");
  opt.l2 = env("MUSE_KB_L2");
  gpu::Device device;
  if (!gpu::describe_current_device(&device)) {
    std::fprintf(stderr, "kernel_bench: the CUDA runtime cannot describe device 0\n");
    return 1;
  }
  gpu::Overrides overrides;
  const char* launch = std::getenv("MUSE_ATTN_LAUNCH");
  if (std::string err = gpu::parse_overrides(launch ? launch : "", &overrides); !err.empty()) {
    std::fprintf(stderr, "kernel_bench: MUSE_ATTN_LAUNCH: %s\n", err.c_str());
    return 2;
  }
  std::printf("device: %d SMs, compute %d, merge can wait %d, two pairs %d%s%s\n", device.multiprocessors,
              device.compute_major, device.merge_can_wait, device.has_two_pairs,
              launch && *launch ? "; MUSE_ATTN_LAUNCH=" : "", launch && *launch ? launch : "");
  if (argc > 1 && (argc - 1) % 4 == 0) {
    for (int i = 1; i < argc; i += 4)
      run(std::atoi(argv[i]), std::atoi(argv[i + 1]), std::atoi(argv[i + 2]), std::atoi(argv[i + 3]), device,
          overrides, opt);
  } else if (argc > 1) {
    std::fprintf(stderr, "usage: %s [L R window splits] ...   (window 0: full; splits 0: the plan's)\n", argv[0]);
    return 2;
  } else {
    const int grid[][3] = {{32768, 1, 2048}, {32768, 16, 2048}, {2048, 1, 0},   {8192, 4, 0},
                           {32768, 1, 0},    {32768, 4, 0},     {131072, 4, 0}, {131072, 16, 0}};
    for (auto& c : grid) run(c[0], c[1], c[2], 0, device, overrides, opt);
  }
  return g_check_failed ? 1 : 0;
}
