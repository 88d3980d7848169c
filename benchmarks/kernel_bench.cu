// The CUDA kernels alone, without JAX: the split kernel, the merge and both, per call, timed as
// N launches back to back and as a CUDA graph of N calls (how FlashInfer is timed). For kernel
// work, profilers (ncu) and compute-sanitizer. The launch plan is the library's
// (gpu/launch_plan.h: plan_launch on describe_current_device()), with the same override as a call
// through JAX: MUSE_ATTN_LAUNCH="split_kernel=pingpong,merge_pdl=0,..." (parse_overrides).
//   nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -I ffi -o /tmp/kernel_bench -x cu \
//        benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc ffi/gpu/split_kernel_fp8.cu.cc \
//        ffi/gpu/merge_kernel.cu.cc ffi/gpu/device_query.cc
//   /tmp/kernel_bench [L R window splits] ...   (window 0: full; splits 0: the plan's count)
// The workload is the benchmark's (benchmarks/bench.py): 16/2 heads, D 64, 8 tokens a request,
// shuffled 16-key pages, every request at L keys; no arguments: eight configs of its grid.
// Environment:
//   MUSE_KB_CHECK=1   check each config's output against a naive float64 attention
//                     (kb_check.h) before and after the timed calls; exit 1 on a failure
//   MUSE_KB_COLD=1    add a cold figure: one call right after a kernel read 256 MiB of another
//                     buffer (events around the call), median of 15
//   MUSE_KB_ONCE=1    run each config once, untimed (for compute-sanitizer)
//   MUSE_KB_POISON=1  bad block ids in live entries, varied lengths, a padding request, and
//                     num_reqs read from device memory (as a traced num_reqs)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  bool once = false, poison = false, check = false, cold = false;
};

bool g_check_failed = false;

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
  const gpu::CallShape shape{kD, kNq, kHq, kHkv, R, pages, window};
  gpu::Plan plan;
  if (std::string err = gpu::plan_launch(shape, device, splits, overrides, &plan); !err.empty()) {
    std::fprintf(stderr, "kernel_bench: L=%d R=%d window=%d splits=%d: %s\n", L, R, window, splits, err.c_str());
    std::exit(2);
  }
  splits = plan.num_splits;

  const size_t kv_elems = blocks * kHkv * kPage * 2 * kD;
  std::vector<uint16_t> h_kv(kv_elems), h_q(size_t{kNq} * R * kHq * kD);
  std::mt19937 rng(1);
  for (auto& v : h_kv) v = 0x3c00 + (rng() & 0x3ff) - 0x200;  // bf16 around 0.0078
  for (auto& v : h_q) v = 0x3f00 + (rng() & 0x7f);
  if (opt.check) {  // signed values of both magnitudes, so that a wrong key or row shows
    auto bf16_of = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return uint16_t(u >> 16); };
    std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
    for (auto& v : h_kv) v = bf16_of(uni(rng));
    for (auto& v : h_q) v = bf16_of(uni(rng));
  }
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<int32_t> lens(R, L);
  int32_t nreq = R;
  if (opt.poison) {
    for (size_t i = 0; i < table.size(); i += 7) table[i] = (i / 7) % 2 ? -3 : (1 << 30);
    for (int r = 0; r < R; ++r) lens[r] = r % 3 == 2 ? 5 : L - 37 * r;
    nreq = R > 1 ? R - 1 : R;
  }
  // num_reqs static (R), as verify_attention with num_reqs=None; poisoned runs read it.
  gpu::VerifyParams p = gpu::sized_params(R, kNq, kHq, kHkv, kD, pages, window, splits, opt.poison ? -1 : R);
  uint16_t *kv, *q, *out, *po;
  int32_t *bt, *sl, *nr;
  float* pml;
  const size_t states = static_cast<size_t>(R) * kHkv * splits * rows;
  CHECK(cudaMalloc(&kv, kv_elems * 2));
  CHECK(cudaMalloc(&q, h_q.size() * 2));
  CHECK(cudaMalloc(&out, h_q.size() * 2));
  CHECK(cudaMalloc(&bt, blocks * 4));
  CHECK(cudaMalloc(&sl, R * 4));
  CHECK(cudaMalloc(&nr, 4));
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

  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  auto split = [&] {
    CHECK(plan.balance_segments ? gpu::launch_split_balanced(p, plan.split_kernel, st)
                                : gpu::launch_split(p, plan.split_kernel, st));
  };
  auto merge = [&] { CHECK(gpu::launch_merge(p, plan, st)); };
  auto both = [&] { split(); merge(); };
  char what[160];
  std::snprintf(what, sizeof what, "%-4s L=%-7d R=%-3d splits=%-4d %-18s merge %dw%s%s", window ? "swa" : "full",
                L, R, splits, gpu::kSplitKernelNames[static_cast<int>(plan.split_kernel)], plan.merge_warps,
                plan.merge_pdl ? " pdl" : "", plan.merge_by_lane ? " by-lane" : "");

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
    const double bytes = double(R) * keys * kHkv * kD * 2 * 2;  // K and V that must be read
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
  }
  for (void* ptr : {(void*)kv, (void*)q, (void*)out, (void*)bt, (void*)sl, (void*)nr, (void*)po, (void*)pml})
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
