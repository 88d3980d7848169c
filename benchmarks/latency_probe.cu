// Memory latencies on this GPU as one thread sees them (dependent chains, in-kernel clocks):
// what the dependent chain of a small verify call (seq_lens -> block ids -> K/V tile ->
// partials -> merge) costs a step. Run cold (right after start) and after a warm-up.
//   nvcc -O3 -arch=sm_90 -o /tmp/latency_probe benchmarks/latency_probe.cu && /tmp/latency_probe
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_common.h"

// mode 0: ld.global.cg chase; 1: cp.async 16 B chase through shared memory; 2: atomicAdd chain;
// 3: store + __threadfence chain.
__global__ void probe(uint32_t* buf, int steps, int mode, uint64_t* out) {
  __shared__ __align__(16) uint32_t s[4];
  uint32_t i = 0;
  const uint64_t c0 = clock64(), t0 = gtimer();
  for (int k = 0; k < steps; ++k) {
    if (mode == 0) {
      asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(i) : "l"(buf + i) : "memory");
    } else if (mode == 1) {
      const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(s));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(buf + (i & ~3u)) : "memory");
      asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
      i = s[0];
    } else if (mode == 2) {
      i = atomicAdd(buf + (i & 1023u), 0u) & ~3u;
    } else {
      buf[(i & 1023u) + 4096] = k;
      __threadfence();
      i = (i + 64) & 0xfffffu;
    }
  }
  const uint64_t c1 = clock64(), t1 = gtimer();
  out[0] = c1 - c0;
  out[1] = t1 - t0;
  out[2] = i;
}

__global__ void spin(float* x, int n) {  // keeps the SMs busy so the clocks rise
  float v = threadIdx.x;
  for (int k = 0; k < n; ++k) v = v * 0.9999f + 1.0f;
  x[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

int main() {
  const size_t words = size_t{64} << 20;  // 256 MiB
  uint32_t* buf;
  uint64_t* out;
  float* junk;
  CHECK(cudaMalloc(&buf, words * 4));
  CHECK(cudaMalloc(&out, 64));
  CHECK(cudaMalloc(&junk, 132 * 1024 * 4));
  const int steps = 2000;
  for (int warm = 0; warm < 2; ++warm) {
    if (warm) {  // ~0.3 s of busy SMs
      for (int r = 0; r < 30; ++r) spin<<<132, 1024>>>(junk, 20000);
      CHECK(cudaDeviceSynchronize());
    }
    for (uint64_t span : {uint64_t{1} << 18, uint64_t{1} << 22, uint64_t{1} << 26}) {  // words
      // a random cyclic chain over `span` words, 64 words (256 B) apart: every hop a new line
      const uint32_t n = static_cast<uint32_t>(span / 64);
      std::vector<uint32_t> order(n), h(span, 0);
      for (uint32_t k = 0; k < n; ++k) order[k] = k;
      uint64_t x = 88172645463325252ull;
      for (uint32_t k = n - 1; k > 0; --k) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        std::swap(order[k], order[x % (k + 1)]);
      }
      for (uint32_t k = 0; k < n; ++k) h[order[k] * 64] = order[(k + 1) % n] * 64;
      CHECK(cudaMemcpy(buf, h.data(), span * 4, cudaMemcpyHostToDevice));
      for (int mode = 0; mode < 4; ++mode) {
        if (mode >= 2 && span != (uint64_t{1} << 18)) continue;
        uint64_t r[3];
        for (int rep = 0; rep < 2; ++rep) {  // the second run: the chain's lines are in L2
          probe<<<1, 1>>>(buf, steps, mode, out);
          CHECK(cudaMemcpy(r, out, 24, cudaMemcpyDeviceToHost));
        }
        const char* names[] = {"ld.global.cg", "cp.async 16B", "atomicAdd", "st+threadfence"};
        std::printf("%s %-15s span %7.1f MiB: %6.0f cycles %6.0f ns a step (SM clock %4.0f MHz)\n",
                    warm ? "warm" : "cold", names[mode], span * 4.0 / (1 << 20), double(r[0]) / steps,
                    double(r[1]) / steps, double(r[0]) / double(r[1]) * 1e3);
      }
    }
  }
  return 0;
}
