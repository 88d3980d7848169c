// The timeline build of kernel_bench.cu: each CTA's thread 0 stamps the global timer at the
// points gpu/vendor.h's TimelineMark names (MUSE_ATTN_MARK, nothing in the library's builds).
// Forced into every translation unit of that build:
//   nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -I ffi -include benchmarks/timeline_marks.h \
//        -o /tmp/kernel_timeline -x cu benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc \
//        ffi/gpu/split_kernel_fp8.cu.cc ffi/gpu/split_kernel_balanced.cu.cc ffi/gpu/merge_kernel.cu.cc \
//        ffi/gpu/device_query.cc
// A row of kTimelineSlots words a CTA (blockIdx linearised): a stamp a mark (0: not reached;
// thread 0 of a ping-pong CTA is its first pair's), then the SM it ran on. Each translation unit
// has its own pointers to the rows (relocatable device code would share one, but serialises the
// kernels' warpgroup MMAs), set all at once by muse_timeline::set_rows.
#ifndef MUSE_BENCH_TIMELINE_MARKS_H_
#define MUSE_BENCH_TIMELINE_MARKS_H_

#include <cuda_runtime.h>

#include <vector>

#define MUSE_KB_TIMELINE 1

namespace muse_timeline {
inline constexpr int kMarks = 8;  // TimelineMark's values (kernel_bench checks)
inline constexpr int kSlots = kMarks + 1;

static __device__ unsigned long long* split_rows = nullptr;  // this translation unit's
static __device__ unsigned long long* merge_rows = nullptr;

using Setter = cudaError_t (*)(unsigned long long*, unsigned long long*);
inline std::vector<Setter>& setters() {
  static std::vector<Setter> s;
  return s;
}
static cudaError_t set_here(unsigned long long* split, unsigned long long* merge) {
  if (cudaError_t e = cudaMemcpyToSymbol(split_rows, &split, sizeof split); e != cudaSuccess) return e;
  return cudaMemcpyToSymbol(merge_rows, &merge, sizeof merge);
}
[[maybe_unused]] static const bool registered = (setters().push_back(&set_here), true);

// Every translation unit's rows (null: no stamps).
inline cudaError_t set_rows(unsigned long long* split, unsigned long long* merge) {
  for (Setter f : setters())
    if (cudaError_t e = f(split, merge); e != cudaSuccess) return e;
  return cudaSuccess;
}

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ void mark(int point, bool merge) {
  unsigned long long* const rows = merge ? merge_rows : split_rows;
  if (threadIdx.x != 0 || rows == nullptr) return;
  unsigned long long t;
  unsigned sm;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  const unsigned long long cta =
      blockIdx.x + static_cast<unsigned long long>(gridDim.x) * (blockIdx.y + gridDim.y * blockIdx.z);
  rows[cta * kSlots + point] = t;
  rows[cta * kSlots + kMarks] = sm;
}
#endif
}  // namespace muse_timeline

#if defined(__CUDA_ARCH__)
#define MUSE_ATTN_MARK(point) \
  ::muse_timeline::mark(static_cast<int>(point), (point) >= ::muse_attn::gpu::TimelineMark::kMergeStart)
#endif

#endif  // MUSE_BENCH_TIMELINE_MARKS_H_
