// What a standalone GPU probe (read_floor_probe.cu) needs besides its kernels: a CUDA-call check
// that returns 1 from the calling function, and a launch that is plain or a programmatic
// dependent of the stream's previous kernel. A probe stays one nvcc command.
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

// kernel<<<grid, threads, 0, st>>>(args...), as a programmatic dependent launch of the kernel
// before it on st where `dependent` (its griddepcontrol.wait then waits for that kernel), plainly
// otherwise.
template <typename Kernel, typename... Args>
cudaError_t launch_maybe_dependent(cudaStream_t st, dim3 grid, dim3 threads, bool dependent, Kernel kernel,
                                   Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = threads;
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = dependent ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

#endif  // MUSE_ATTN_BENCHMARKS_PROBE_COMMON_H_
