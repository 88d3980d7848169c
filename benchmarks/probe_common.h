// What the standalone GPU probes (latency_probe.cu, pdl_probe.cu, read_floor_probe.cu) share: a
// CUDA-call check that ends main with 1, and the device's global timer. Each probe is still one
// nvcc command.
#ifndef MUSE_ATTN_BENCHMARKS_PROBE_COMMON_H_
#define MUSE_ATTN_BENCHMARKS_PROBE_COMMON_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#define CHECK(x)                                                             \
  do {                                                                       \
    cudaError_t e_ = (x);                                                    \
    if (e_ != cudaSuccess) {                                                 \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      return 1;                                                              \
    }                                                                        \
  } while (0)

// %globaltimer, ns (in ~0.26 us steps on an H200).
__device__ __forceinline__ uint64_t gtimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

#endif  // MUSE_ATTN_BENCHMARKS_PROBE_COMMON_H_
