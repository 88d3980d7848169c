// How fast a kernel that only reads a verify call's K/V bytes runs at each config, kernels alone:
// an optimistic estimate of what any design of the call could reach there (the fastest of 18
// forms of one plain-load kernel, not a proven ceiling). It reads the same paged cache as
// kernel_bench (shuffled 16-key pages, block ids from the table, 16-byte loads; no seq_lens, no
// Q, no math, no partials, no output) and is timed as kernel_bench times ours (a CUDA graph of 20
// back-to-back calls launched 20 times, best of 5, per call; hot), beside the copy floor of the
// same run (1 GiB device-to-device cudaMemcpyAsync, read + write counted, as the bench's torch
// copy). "+dep" is the same read followed by a one-CTA-a-group dependent kernel (plain, and as a
// programmatic dependent launch released at the read's start): the least a split + merge design
// adds for its second launch. Ours pays the math, the partials and the merge besides.
//   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/read_floor benchmarks/read_floor_probe.cu
//   /tmp/read_floor [L R window] ...   (window 0: full; no arguments: the benchmark's grid)
// SWA reads the last ceil((window + 7) / 16) + 1 pages of a request (what a call touches at most),
// its bytes counted as kernel_bench counts them (window + 7 keys).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "probe_common.h"

constexpr int kHkv = 2, kD = 64, kNq = 8, kPage = 16;
constexpr int kBlockInt4 = kHkv * kPage * 2 * kD * 2 / 16;  // one cache block, both KV heads: 512 x 16 B
constexpr int kThreads = kBlockInt4;                         // one 16-byte load a thread a block
constexpr int kIdChunk = 512;                                // block ids staged a round

__device__ __forceinline__ int4 load_stream(const int4* p) {
  int4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// CTA c reads units [c * per_cta, (c + 1) * per_cta) of the call's R * npages blocks (request r's
// blocks first_page .. first_page + npages - 1), U blocks in flight a thread; the xor of every
// word goes to sink[c] only if it is a value no data here gives, so nothing is elided.
template <int U>
__global__ void __launch_bounds__(kThreads) paged_read(const int4* __restrict__ kv, const int* __restrict__ table,
                                                       int stride, int first_page, int npages, int total, int per_cta,
                                                       int* sink, int pdl_trigger) {
  if (pdl_trigger) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  __shared__ int ids[kIdChunk];
  const int u0 = blockIdx.x * per_cta, u1 = min(u0 + per_cta, total);
  int acc = 0;
  for (int c0 = u0; c0 < u1; c0 += kIdChunk) {
    const int n = min(kIdChunk, u1 - c0);
    if (c0 != u0) __syncthreads();
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const int u = c0 + i, r = u / npages;
      ids[i] = table[r * stride + first_page + (u - r * npages)];
    }
    __syncthreads();
    for (int i = 0; i < n; i += U) {
      int4 v[U];
#pragma unroll
      for (int k = 0; k < U; ++k)
        v[k] = i + k < n ? load_stream(kv + size_t(ids[i + k]) * kBlockInt4 + threadIdx.x) : int4{0, 0, 0, 0};
#pragma unroll
      for (int k = 0; k < U; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
  }
  if (acc == 0x7fffffff) sink[blockIdx.x] = acc;
}

// The second launch of a split + merge design at its least: one CTA a group reads one word.
__global__ void dependent(const int* sink, int* out, int wait) {
  if (wait) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0 && sink[blockIdx.x] == 0x7ffffffe) out[blockIdx.x] = 1;
}

struct Timer {
  cudaStream_t st;
  cudaEvent_t e0, e1;
  // Per call: a graph of n calls of f, launched n times back to back (after one launch to warm
  // up) between two events; best of 5 such rounds, as kernel_bench times its graph. (Timing one
  // graph launch instead adds that launch's own cost, spread over n calls rather than n * n.)
  template <class F>
  float graph_us(F f, int n = 20) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return -1;
    for (int i = 0; i < n; ++i) f();
    if (cudaStreamEndCapture(st, &g) != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) return -1;
    float best = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {
      cudaGraphLaunch(ge, st);
      cudaEventRecord(e0, st);
      for (int i = 0; i < n; ++i) cudaGraphLaunch(ge, st);
      cudaEventRecord(e1, st);
      cudaEventSynchronize(e1);
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      best = std::min(best, ms * 1e3f / (n * n));
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return cudaGetLastError() == cudaSuccess ? best : -1;
  }
};

int run(Timer& tm, int sms, double copy_gbps, int L, int R, int window) {
  const int stride = (L + kPage - 1) / kPage;  // table width: the context's pages
  const int keys = window ? std::min(L, window + kNq - 1) : L;
  const int npages = std::min(stride, (keys + kPage - 1) / kPage + (window ? 1 : 0));
  const int first_page = stride - npages;
  const int64_t blocks = int64_t{R} * stride;
  const int total = R * npages;
  int4* kv;
  int *table, *sink, *out;
  CHECK(cudaMalloc(&kv, blocks * kBlockInt4 * 16));
  CHECK(cudaMemset(kv, 0x3c, blocks * kBlockInt4 * 16));
  std::vector<int> h(blocks);
  std::iota(h.begin(), h.end(), 0);
  std::mt19937 rng(1);
  std::shuffle(h.begin(), h.end(), rng);  // as kernel_bench and the bench: shuffled block ids
  CHECK(cudaMalloc(&table, blocks * 4));
  CHECK(cudaMemcpy(table, h.data(), blocks * 4, cudaMemcpyHostToDevice));
  const int max_ctas = 16 * sms;
  CHECK(cudaMalloc(&sink, max_ctas * 4));
  CHECK(cudaMalloc(&out, max_ctas * 4));
  const double bytes = double(R) * keys * kHkv * kD * 2 * 2;  // what the call must read (kernel_bench's)
  struct Best { float us = 1e30f; int ctas = 0, u = 0; };
  Best plain, dep, pdl;
  for (int per_sm : {1, 2, 3, 4, 8, 16}) {
    const int ctas_want = per_sm * sms;
    const int per_cta = (total + ctas_want - 1) / ctas_want;
    const int ctas = (total + per_cta - 1) / per_cta;
    for (int u : {4, 8, 16}) {
      const auto kernel = u == 4 ? paged_read<4> : u == 8 ? paged_read<8> : paged_read<16>;
      auto read = [&](int trig) {
        kernel<<<ctas, kThreads, 0, tm.st>>>(kv, table, stride, first_page, npages, total, per_cta, sink, trig);
      };
      const float t = tm.graph_us([&] { read(0); });
      if (t > 0 && t < plain.us) plain = {t, ctas, u};
      // The read, then the dependent kernel plainly or as its programmatic dependent.
      auto read_then_dependent = [&](int programmatic) {
        return tm.graph_us([&] {
          read(programmatic);
          launch_maybe_dependent(tm.st, dim3(R * kHkv), dim3(32), programmatic != 0, dependent,
                                 (const int*)sink, out, programmatic);
        });
      };
      const float td = read_then_dependent(0);
      if (td > 0 && td < dep.us) dep = {td, ctas, u};
      const float tp = read_then_dependent(1);
      if (tp > 0 && tp < pdl.us) pdl = {tp, ctas, u};
    }
  }
  auto pct = [&](float us) { return 100.0 * bytes / (us * 1e-6) / 1e9 / copy_gbps; };
  std::printf("%-4s L=%-7d R=%-3d KV %7.1f MB | read %7.2f us %5.1f %% (%d CTAs, %d in flight) | "
              "+dep %7.2f us %5.1f %% | +dep pdl %7.2f us %5.1f %%\n",
              window ? "swa" : "full", L, R, bytes / 1e6, plain.us, pct(plain.us), plain.ctas, plain.u,
              dep.us, pct(dep.us), pdl.us, pct(pdl.us));
  CHECK(cudaFree(kv));
  CHECK(cudaFree(table));
  CHECK(cudaFree(sink));
  CHECK(cudaFree(out));
  return 0;
}

int main(int argc, char** argv) {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Timer tm;
  CHECK(cudaStreamCreateWithFlags(&tm.st, cudaStreamNonBlocking));
  CHECK(cudaEventCreate(&tm.e0));
  CHECK(cudaEventCreate(&tm.e1));
  // The copy floor: 1 GiB device to device, read + write counted (the bench's torch copy).
  const size_t n = size_t{1} << 30;
  void *a, *b;
  CHECK(cudaMalloc(&a, n));
  CHECK(cudaMalloc(&b, n));
  CHECK(cudaMemset(a, 1, n));
  float best = 1e30f;
  for (int rep = 0; rep < 6; ++rep) {
    CHECK(cudaEventRecord(tm.e0, tm.st));
    CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, tm.st));
    CHECK(cudaEventRecord(tm.e1, tm.st));
    CHECK(cudaEventSynchronize(tm.e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, tm.e0, tm.e1));
    if (rep) best = std::min(best, ms);
  }
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  const double copy_gbps = 2.0 * n / (best * 1e-3) / 1e9;
  std::printf("copy floor: 1 GiB device to device %.1f us, %.0f GB/s (read + write); %d SMs\n", best * 1e3,
              copy_gbps, sms);
  if (argc > 1 && (argc - 1) % 3 == 0) {
    for (int i = 1; i < argc; i += 3)
      if (run(tm, sms, copy_gbps, std::atoi(argv[i]), std::atoi(argv[i + 1]), std::atoi(argv[i + 2]))) return 1;
    return 0;
  }
  // The benchmark's grid: SWA 2048 at 32k, full 2k / 8k / 32k / 128k; R = 1, 2, 4, 8, 16.
  std::vector<std::array<int, 3>> grid;
  for (int L : {32768, 2048, 8192, 32768, 131072})
    for (int R : {1, 2, 4, 8, 16}) grid.push_back({L, R, grid.size() < 5 ? 2048 : 0});
  for (auto& c : grid)
    if (run(tm, sms, copy_gbps, c[0], c[1], c[2])) return 1;
  return 0;
}
