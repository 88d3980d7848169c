// What the first loads after a programmatic dependent launch's wait cost, against the same loads
// in a plainly launched kernel: the merge of a latency-bound call takes ~1300-1600 SM cycles from
// its release (griddepcontrol.wait returning) to its own segments' partials in (benchmarks/NOTES.md
// versions 13, 19 and 20), far more than an L2 hit. Is that the wait's, or the merge's?
//   nvcc -O3 -arch=sm_90a -o /tmp/pdl_probe benchmarks/pdl_probe.cu && /tmp/pdl_probe
// A writer grid (2 CTAs an SM, like the split kernel at 2 CTAs an SM) lets its dependents launch
// at once, spins ~5 us (2000 dependent FMAs), writes an 8 MiB buffer (like a call's partials) and
// exits. The reader (one CTA an SM, one timing thread each) is launched plainly after it or as
// its programmatic dependent; after the wait it times, one at a time, dependent 4-byte loads of
//   written: a line of the writer's buffer (the merge's first load; always loaded first, so it
//            also carries whatever a first touch costs);
//   written again: another such line (the merge's next batch);
//   untouched: a line of a buffer read into L2 before the writer ran (a plain L2 hit);
//   L1 hit: the first line again (the chain's own cost a step).
// With "prefetched", the reader prefetches its first written line to L2 before the wait, as the
// merge does. Each figure: SM cycles, median [min - max] over reader CTAs and 20 launches; the
// release: ns from the writer's last store to the reader's wait returning (globaltimer).
// Then the merge's burst of loads (burst, below), plainly launched and as a dependent.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_common.h"

// A 4-byte load whose address depends on `after` (times a runtime zero, so the compiler cannot
// drop the dependence): it issues only once `after` has landed.
__device__ __forceinline__ uint32_t load_after(const uint32_t* p, uint32_t after, uint32_t zero) {
  uint32_t v;
  asm volatile("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(p + after * zero) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t sm_clock() {
  uint64_t c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
  return c;
}

constexpr int kWords = 1 << 21;  // 8 MiB of uint32
constexpr int kLineWords = 32;   // 128 B

__global__ void writer(uint32_t* buf, uint64_t* last_store_ns, int spin) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  float v = threadIdx.x;
  for (int k = 0; k < spin; ++k) v = v * 0.9999f + 1.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kWords; i += gridDim.x * blockDim.x)
    buf[i] = static_cast<uint32_t>(i) + (v == -1.0f);  // (v keeps the spin alive)
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned long long*>(last_store_ns), gtimer());
}

// out[blockIdx.x * kFigures + k]: cycles of written / written again / untouched / an L1 hit (the
// chain's own cost); ns of the release.
constexpr int kFigures = 5;
template <bool kPrefetch>
__global__ void reader(const uint32_t* buf, const uint32_t* other, const uint64_t* last_store_ns,
                       uint64_t* out, uint32_t zero) {
  if (threadIdx.x != 0) return;
  const int lines = kWords / kLineWords;
  // two lines of the writer's buffer (written by some writer CTA), and a line of `other`
  const uint32_t* a = buf + size_t((blockIdx.x * 7919 + lines / 2) % lines) * kLineWords;
  const uint32_t* b = buf + size_t((blockIdx.x * 104729 + lines / 3) % lines) * kLineWords;
  const uint32_t* c = other + size_t((blockIdx.x * 613) % lines) * kLineWords;
  if (kPrefetch) asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const uint64_t released = gtimer();
  // A clock read right after a load issues is read once the load before it has landed.
  const uint64_t c0 = sm_clock();
  const uint32_t x1 = load_after(a, 0, zero);
  const uint32_t x2 = load_after(b, x1, zero);
  const uint64_t c1 = sm_clock();  // a landed
  const uint32_t x3 = load_after(c, x2, zero);
  const uint64_t c2 = sm_clock();  // b landed
  const uint32_t x4 = load_after(a, x3, zero);  // a again: an L1 hit, the chain's own cost
  const uint64_t c3 = sm_clock();  // c landed
  const uint32_t x5 = load_after(b, x4, zero);
  const uint64_t c4 = sm_clock();  // a (L1) landed
  uint64_t* o = out + blockIdx.x * kFigures;
  o[0] = c1 - c0;
  o[1] = c2 - c1;
  o[2] = c3 - c2;
  o[3] = c4 - c3 + (x5 == 0xFFFFFFFFu);
  o[4] = released - *last_store_ns;  // plain launch: the reader starts after the writer ends
}

// The merge's burst: every thread of every CTA (4 warps, one CTA an SM) loads N 16-byte pieces of
// the written buffer, one segment (sms x 128 x 16 B) apart, right after the wait: N = 1 / 8 / 16
// read 0.27 / 2.2 / 4.3 MB at once on an H200, about what the merge of a latency-bound call
// reads (a full 8k R=1 call's partials: 2.1 MB). out[blockIdx.x]: SM cycles from the wait
// returning to the CTA's last thread having all of its pieces.
template <int N>
__global__ void burst(const uint4* buf, uint64_t* out, uint32_t zero) {
  __shared__ unsigned long long last;
  if (threadIdx.x == 0) last = 0;
  __syncthreads();
  const size_t seg = size_t(gridDim.x) * blockDim.x;
  const uint4* p = buf + size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const uint64_t c0 = sm_clock();
  uint32_t sum = 0;
  uint4 v[N];
#pragma unroll
  for (int k = 0; k < N; ++k)
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v[k].x), "=r"(v[k].y), "=r"(v[k].z), "=r"(v[k].w)
                 : "l"(p + k * seg)
                 : "memory");
#pragma unroll
  for (int k = 0; k < N; ++k) sum += v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  const uint32_t x = load_after(reinterpret_cast<const uint32_t*>(p), sum, zero);  // an L1 hit
  const uint64_t c1 = sm_clock();  // every piece landed
  atomicMax(&last, static_cast<unsigned long long>(c1 - c0) + (x == 0xFFFFFFFFu));
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = last;
}

__global__ void touch(const uint32_t* p, uint32_t* sink) {  // `other` into L2
  uint32_t s = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kWords; i += gridDim.x * blockDim.x)
    s += p[i];
  if (s == 0xFFFFFFFFu) *sink = s;
}

// The writer, then `kernel` (grid: one CTA an SM) on the same stream, plainly or as the
// writer's programmatic dependent.
template <typename Kernel, typename... Args>
cudaError_t writer_then(cudaStream_t st, int sms, uint32_t* buf, uint64_t* last, bool dependent,
                        int threads, Kernel kernel, Args... args) {
  if (cudaError_t e = cudaMemsetAsync(last, 0, 8, st); e != cudaSuccess) return e;
  writer<<<2 * sms, 128, 0, st>>>(buf, last, 2000);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return launch_maybe_dependent(st, dim3(sms), dim3(threads), dependent, kernel, args...);
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint32_t *buf, *other, *sink;
  uint64_t *last, *out;
  CHECK(cudaMalloc(&buf, kWords * 4));
  CHECK(cudaMalloc(&other, kWords * 4));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMalloc(&last, 8));
  CHECK(cudaMalloc(&out, static_cast<size_t>(sms) * kFigures * 8));
  CHECK(cudaMemset(other, 0, kWords * 4));
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));
  const char* names[] = {"plain", "PDL", "PDL, prefetched"};
  for (int mode = 0; mode < 3; ++mode) {
    std::vector<uint64_t> fig[kFigures];
    for (int rep = 0; rep < 22; ++rep) {
      touch<<<sms, 256, 0, st>>>(other, sink);
      CHECK(cudaGetLastError());
      const uint32_t *rbuf = buf, *rother = other;  // as the reader takes them
      const uint64_t* rlast = last;
      const bool dependent = mode != 0;
      CHECK(mode == 2
                ? writer_then(st, sms, buf, last, dependent, 32, reader<true>, rbuf, rother, rlast,
                              out, 0u)
                : writer_then(st, sms, buf, last, dependent, 32, reader<false>, rbuf, rother, rlast,
                              out, 0u));
      std::vector<uint64_t> h(static_cast<size_t>(sms) * kFigures);
      CHECK(cudaMemcpyAsync(h.data(), out, h.size() * 8, cudaMemcpyDeviceToHost, st));
      CHECK(cudaStreamSynchronize(st));
      if (rep < 2) continue;  // warm-up
      for (int b = 0; b < sms; ++b)
        for (int k = 0; k < kFigures; ++k)
          fig[k].push_back(h[static_cast<size_t>(b) * kFigures + k]);
    }
    std::printf("%-16s", names[mode]);
    const char* what[] = {"written", "written again", "untouched", "L1 hit", "release ns"};
    for (int k = 0; k < kFigures; ++k) {
      std::sort(fig[k].begin(), fig[k].end());
      std::printf("  %s %5llu [%llu - %llu]", what[k],
                  (unsigned long long)fig[k][fig[k].size() / 2],
                  (unsigned long long)fig[k].front(), (unsigned long long)fig[k].back());
    }
    std::printf("\n");
  }
  for (int pdl = 0; pdl < 2; ++pdl) {
    std::printf("burst, %-9s", pdl ? "PDL" : "plain");
    for (int n : {1, 8, 16}) {
      std::vector<uint64_t> fig;
      for (int rep = 0; rep < 22; ++rep) {
        const uint4* b4 = reinterpret_cast<const uint4*>(buf);
        const bool dep = pdl == 1;
        if (n == 1) CHECK(writer_then(st, sms, buf, last, dep, 128, burst<1>, b4, out, 0u));
        if (n == 8) CHECK(writer_then(st, sms, buf, last, dep, 128, burst<8>, b4, out, 0u));
        if (n == 16) CHECK(writer_then(st, sms, buf, last, dep, 128, burst<16>, b4, out, 0u));
        std::vector<uint64_t> h(sms);
        CHECK(cudaMemcpyAsync(h.data(), out, h.size() * 8, cudaMemcpyDeviceToHost, st));
        CHECK(cudaStreamSynchronize(st));
        if (rep >= 2) fig.insert(fig.end(), h.begin(), h.end());
      }
      std::sort(fig.begin(), fig.end());
      std::printf("  N=%-2d %.1f MB %5llu [%llu - %llu]", n, double(sms) * 128 * 16 * n / 1e6,
                  (unsigned long long)fig[fig.size() / 2], (unsigned long long)fig.front(),
                  (unsigned long long)fig.back());
    }
    std::printf("   cycles\n");
  }
  return 0;
}
