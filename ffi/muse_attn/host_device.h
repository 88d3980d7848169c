// MUSE_HD marks a function that compiles for the host (the CPU handler) and, under nvcc or
// HIP-clang, for the device too. The geometry, page table, mask and softmax-state headers use
// it so that the CPU handler and the GPU kernels share one definition of each rule.
#ifndef MUSE_ATTN_HOST_DEVICE_H_
#define MUSE_ATTN_HOST_DEVICE_H_

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MUSE_HD __host__ __device__ __forceinline__
#define MUSE_HD_CONSTEXPR __host__ __device__ constexpr  // usable before the HIP headers
#else
#define MUSE_HD inline
#define MUSE_HD_CONSTEXPR constexpr
#endif

#endif  // MUSE_ATTN_HOST_DEVICE_H_
