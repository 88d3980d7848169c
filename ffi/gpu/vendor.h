// The vendor switch: one kernel source for CUDA (NVIDIA) and HIP (AMD), in the spirit of
// jaxlib's gpu/vendor.h. Everything that differs between the two lives here or in
// warp_mma.h (the matrix instructions); the kernels use only the gpu* names below.
#ifndef MUSE_ATTN_GPU_VENDOR_H_
#define MUSE_ATTN_GPU_VENDOR_H_

#include <cstdint>

#if defined(__HIPCC__) || defined(MUSE_ATTN_WITH_HIP)
#define MUSE_ATTN_HIP 1
#include <hip/hip_runtime.h>
#else
#define MUSE_ATTN_CUDA 1
#include <cuda_runtime.h>
#endif

namespace muse_attn::gpu {

#if defined(MUSE_ATTN_HIP)
using gpuStream_t = hipStream_t;
using gpuError_t = hipError_t;
inline constexpr gpuError_t gpuSuccess = hipSuccess;
inline constexpr gpuError_t gpuErrorInvalidValue = hipErrorInvalidValue;
inline const char* gpuGetErrorString(gpuError_t e) { return hipGetErrorString(e); }
inline gpuError_t gpuGetLastError() { return hipGetLastError(); }
inline constexpr int kWarpSize = 64;  // a wavefront on CDNA
#define MUSE_GPU_PLATFORM_NAME "ROCM"
// The exported name of a GPU handler: Base + the vendor (handlers.h declares both).
#define MUSE_GPU_HANDLER_SYMBOL(base) base##Rocm
#else
using gpuStream_t = cudaStream_t;
using gpuError_t = cudaError_t;
inline constexpr gpuError_t gpuSuccess = cudaSuccess;
inline constexpr gpuError_t gpuErrorInvalidValue = cudaErrorInvalidValue;
inline const char* gpuGetErrorString(gpuError_t e) { return cudaGetErrorString(e); }
inline gpuError_t gpuGetLastError() { return cudaGetLastError(); }
inline constexpr int kWarpSize = 32;
#define MUSE_GPU_PLATFORM_NAME "CUDA"
#define MUSE_GPU_HANDLER_SYMBOL(base) base##Cuda
#endif

// ---- launches and shared memory, as the AMD emulator (gpu/emu) stands in for them ----------
// Its stand-in HIP header defines its own forms of these first; a GPU build gets the plain ones.
#ifndef MUSE_GPU_LAUNCH
#define MUSE_GPU_LAUNCH(kernel, grid, threads, smem, stream, ...) \
  kernel<<<(grid), (threads), (smem), (stream)>>>(__VA_ARGS__)
#endif
// A kernel's dynamic shared-memory (LDS) array.
#ifndef MUSE_DYNAMIC_SHARED
#define MUSE_DYNAMIC_SHARED(name) extern __shared__ __align__(16) char name[]
#endif
#if !defined(MUSE_LDS_HOOKS)
// A shared-memory read / write the emulator checks (a read of bytes not written in the block is
// an error there); a plain load / store on a GPU.
template <typename T>
__device__ __forceinline__ T lds_read(const void* p) {
  return *static_cast<const T*>(p);
}
template <typename T>
__device__ __forceinline__ void lds_write(void* p, const T& v) {
  *static_cast<T*>(p) = v;
}
// A typed shared-memory variable, read (checked by the emulator like lds_read).
template <typename T>
__device__ __forceinline__ const T& lds_value(const T& x) {
  return x;
}
#endif

// Raises the dynamic shared-memory (LDS) limit of a kernel on the current device; host side.
// The attribute is per device: a process that drives several GPUs (one per TP rank) sets it on
// each of them.
template <typename Kernel>
inline gpuError_t set_max_dynamic_shared(Kernel kernel, int bytes) {
#if defined(MUSE_ATTN_HIP)
  return hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                             hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
#else
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
#endif
}

inline gpuError_t current_device(int* device) {
#if defined(MUSE_ATTN_HIP)
  return hipGetDevice(device);
#else
  return cudaGetDevice(device);
#endif
}

// Multiprocessors (SMs / CUs) of the current device; host side.
inline gpuError_t multiprocessor_count(int* count) {
  int dev = 0;
  if (gpuError_t e = current_device(&dev); e != gpuSuccess) return e;
#if defined(MUSE_ATTN_HIP)
  return hipDeviceGetAttribute(count, hipDeviceAttributeMultiprocessorCount, dev);
#else
  return cudaDeviceGetAttribute(count, cudaDevAttrMultiProcessorCount, dev);
#endif
}

// The current device's compute capability major (NVIDIA); 0 on AMD or when it cannot be asked.
inline int device_compute_major() {
#if defined(MUSE_ATTN_HIP)
  return 0;
#else
  int dev = 0, major = 0;
  if (current_device(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return 0;
  return major;
#endif
}

// Programmatic dependent launch (NVIDIA sm_90+): a kernel launched with it may start while the
// previous kernel on the stream still runs; it must call grid_dependency_wait() before it reads
// what that kernel wrote. Elsewhere (AMD, older GPUs) an ordinary launch, and the calls below
// do nothing.
inline bool device_supports_pdl() { return device_compute_major() >= 9; }

// ---- device helpers -------------------------------------------------------------------------

// PDL, device side (see device_supports_pdl): let the next kernel on the stream launch now /
// wait until the previous kernel has finished and its writes are visible.
__device__ __forceinline__ void grid_launch_dependents() {
#if defined(MUSE_ATTN_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(MUSE_ATTN_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Timeline marks: the points of a CTA's work that benchmarks/kernel_bench.cu's timeline build
// stamps (benchmarks/timeline_marks.h defines MUSE_ATTN_MARK there: thread 0 a CTA, the global
// timer); in the library's builds a mark is nothing.
enum class TimelineMark : int {
  kStart,          // the split CTA's first instruction
  kIssued,         // its prologue's copies issued
  kFirstTile,      // its first tile landed (Q and K/V in shared memory)
  kLoopEnd,        // its last tile's math done
  kEnd,            // its partials written
  kMergeStart,     // the merge CTA's first instruction
  kMergeReleased,  // the merge past its wait for the split kernel
  kMergeEnd,       // the merge CTA's row stored (thread 0's row)
};
#ifndef MUSE_ATTN_MARK
#define MUSE_ATTN_MARK(point) ((void)0)
#endif

// A hint: the global line at ptr into L2 (NVIDIA; nothing elsewhere). No value is returned, so
// it may run before the data is written (the line and its address translation are then warm).
__device__ __forceinline__ void prefetch_l2(const void* ptr) {
#if defined(MUSE_ATTN_CUDA)
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
#else
  (void)ptr;
#endif
}

// XOR shuffle within a warp / wavefront (a float or an int).
template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int mask) {
#if defined(MUSE_ATTN_HIP)
  return __shfl_xor(v, mask);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}

// Lane src's v, on every lane of the warp / wavefront.
template <typename T>
__device__ __forceinline__ T shfl_from(T v, int src) {
#if defined(MUSE_ATTN_HIP)
  return __shfl(v, src);
#else
  return __shfl_sync(0xffffffffu, v, src);
#endif
}
inline constexpr int kLaneBits = kWarpSize == 64 ? 6 : 5;  // log2(kWarpSize)

__device__ __forceinline__ float max_op(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ float add_op(float a, float b) { return a + b; }

// op over the lanes lane ^ (k * kFirstMask), k < 2^kSteps (butterfly): every one of them gets it
// (a float or an int).
template <int kFirstMask, int kSteps, typename T, typename Op>
__device__ __forceinline__ T xor_reduce(T x, Op op) {
#pragma unroll
  for (int i = 0; i < kSteps; ++i) x = op(x, shfl_xor(x, kFirstMask << i));
  return x;
}

// The max of x over the warp / wavefront, on every lane. NVIDIA sm_80+: one warp reduction
// (redux.sync) of the floats' order-preserving integer images (a negative float's magnitude bits
// flipped), instead of a butterfly of kLaneBits dependent shuffles; elsewhere the butterfly.
__device__ __forceinline__ float warp_max(float x) {
#if defined(MUSE_ATTN_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int i = __float_as_int(x);
  const int m = __reduce_max_sync(0xffffffffu, i >= 0 ? i : i ^ 0x7fffffff);
  return __int_as_float(m >= 0 ? m : m ^ 0x7fffffff);
#else
  return xor_reduce<1, kLaneBits>(x, max_op);
#endif
}

// Whether pred holds on any lane of the warp / wavefront (all lanes must call it).
__device__ __forceinline__ bool warp_any(bool pred) {
#if defined(MUSE_ATTN_HIP)
  return __any(pred);
#else
  return __any_sync(0xffffffffu, pred);
#endif
}

// 2^x on the fast hardware unit (v_exp_f32 / ex2.approx); exp2(-inf) = 0.
__device__ __forceinline__ float fast_exp2(float x) {
#if defined(MUSE_ATTN_HIP)
  return __builtin_amdgcn_exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

// Two floats -> packed bf16x2 (round to nearest even), low half = a.
__device__ __forceinline__ uint32_t pack_bf16x2(float a, float b) {
#if defined(MUSE_ATTN_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  return r;
#else
  auto rne = [](float f) -> uint32_t {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  };
  return rne(a) | (rne(b) << 16);
#endif
}

__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

// ---- global -> shared copies ----------------------------------------------------------------
// copy16(dst, src, valid): 16 bytes to shared memory; zeros when !valid, and then src is not
// read at all (a predicated, zero-filling copy). On NVIDIA an asynchronous cp.async (L2 only,
// completed by copy_commit / copy_wait); on AMD a load through registers.

__device__ __forceinline__ void copy16(void* smem_dst, const void* gmem_src, bool valid) {
#if defined(MUSE_ATTN_CUDA)
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src),
               "r"(src_bytes)
               : "memory");
#else
  typedef uint32_t u32x4 __attribute__((ext_vector_type(4)));
  u32x4 v = {0u, 0u, 0u, 0u};
  if (valid) v = __builtin_nontemporal_load(reinterpret_cast<const u32x4*>(gmem_src));
  lds_write(smem_dst, v);
#endif
}

// copy4(dst, src, valid): 4 bytes to shared memory, as copy16 (zeros when !valid, src unread).
__device__ __forceinline__ void copy4(void* smem_dst, const void* gmem_src, bool valid) {
#if defined(MUSE_ATTN_CUDA)
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem_src),
               "r"(src_bytes)
               : "memory");
#else
  lds_write(smem_dst, valid ? *static_cast<const uint32_t*>(gmem_src) : 0u);
#endif
}

// Makes this thread's shared-memory writes (st.shared, cp.async) visible to the async proxy
// (the warpgroup MMA reads its shared-memory operands through it; sm_90); before the barrier
// that precedes the reads. Elsewhere nothing.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(MUSE_ATTN_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void copy_commit() {
#if defined(MUSE_ATTN_CUDA)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most `pending` committed copy groups are still in flight.
template <int pending>
__device__ __forceinline__ void copy_wait() {
#if defined(MUSE_ATTN_CUDA)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
#endif
}

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_VENDOR_H_
