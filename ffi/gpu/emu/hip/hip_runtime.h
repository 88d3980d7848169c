// Stand-in for <hip/hip_runtime.h> under the wave64 emulator (gpu/emu/emulator.h): what the
// split and merge kernels use of HIP, on the host. Compiled as C++ for the host with
// -D__HIP_DEVICE_COMPILE__ and -D__gfx942__ or -D__gfx950__ (the kernels' device branches), this
// directory first on the include path. Cross-lane operations, barriers, MFMA and LDS accesses
// go to the emulator; the rest is plain host code.
#ifndef MUSE_ATTN_GPU_EMU_HIP_RUNTIME_H_
#define MUSE_ATTN_GPU_EMU_HIP_RUNTIME_H_

#include <math.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gpu/emu/emulator.h"
#include "gpu/emu/lane_ops.h"

#if !defined(__HIP_DEVICE_COMPILE__)
#error "the emulator runs the kernels' device code: compile with -D__HIP_DEVICE_COMPILE__"
#endif

// ---- qualifiers ------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Static LDS: one copy for all blocks (they run one after another), in a section of its own so
// that the emulator can poison it and check its reads (muse_emu_lds, emulator.cc).
#define __shared__ static __attribute__((section("muse_emu_lds")))

// ---- types -----------------------------------------------------------------------------------
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct float2 {
  float x, y;
};
struct uint2 {
  unsigned x, y;
};
struct uint4 {
  unsigned x, y, z, w;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

#define threadIdx (::muse_emu::ids().thread)
#define blockIdx (::muse_emu::ids().block)
#define blockDim (::muse_emu::ids().block_dim)
#define gridDim (::muse_emu::ids().grid_dim)

// ---- host API --------------------------------------------------------------------------------
typedef struct ihipStream_t* hipStream_t;
enum hipError_t { hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorLaunchFailure = 719 };
enum hipFuncAttribute { hipFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum hipDeviceAttribute_t { hipDeviceAttributeMultiprocessorCount = 63 };

namespace muse_emu {
// The host side of the stand-in (emulator.cc).
hipError_t take_last_error();
void set_last_error(hipError_t e);
hipError_t set_max_dynamic_lds(const void* kernel, int bytes);
size_t max_dynamic_lds(const void* kernel);  // 65536 unless raised
int multiprocessors();

template <typename P>
void launch_kernel(const char* name, void (*kernel)(P), dim3 grid, dim3 block, size_t smem,
                   const P& params) {
  struct Call {
    void (*kernel)(P);
    P params;
  };
  const Call call{kernel, params};
  const void* fn = reinterpret_cast<const void*>(kernel);
  const int rc = launch(
      name, fn, [](const void* c) { static_cast<const Call*>(c)->kernel(static_cast<const Call*>(c)->params); },
      &call, Dim3{grid.x, grid.y, grid.z}, Dim3{block.x, block.y, block.z}, smem, max_dynamic_lds(fn));
  set_last_error(rc == 0 ? hipSuccess : hipErrorLaunchFailure);
}
}  // namespace muse_emu

inline const char* hipGetErrorString(hipError_t e) {
  return e == hipSuccess ? "hipSuccess"
         : e == hipErrorInvalidValue ? "hipErrorInvalidValue"
                                     : ::muse_emu::last_error();
}
inline hipError_t hipGetLastError() { return ::muse_emu::take_last_error(); }
inline hipError_t hipGetDevice(int* device) {
  *device = 0;
  return hipSuccess;
}
inline hipError_t hipSetDevice(int device) { return device == 0 ? hipSuccess : hipErrorInvalidValue; }
inline hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t attr, int) {
  if (attr != hipDeviceAttributeMultiprocessorCount) return hipErrorInvalidValue;
  *value = ::muse_emu::multiprocessors();
  return hipSuccess;
}
inline hipError_t hipFuncSetAttribute(const void* kernel, hipFuncAttribute attr, int value) {
  if (attr != hipFuncAttributeMaxDynamicSharedMemorySize) return hipErrorInvalidValue;
  return ::muse_emu::set_max_dynamic_lds(kernel, value);
}

// The kernels' launches (gpu/vendor.h), synchronous; the kernel's name goes in its errors.
#define MUSE_GPU_LAUNCH(kernel, grid, threads, smem, stream, ...) \
  ((void)(stream), ::muse_emu::launch_kernel(#kernel, kernel, dim3(grid), dim3(threads), (smem), __VA_ARGS__))
#define MUSE_DYNAMIC_SHARED(name) char* const name = ::muse_emu::dynamic_lds()

// ---- device functions ------------------------------------------------------------------------
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::muse_emu::syncthreads(file, line);
}
inline float __shfl(float v, int src, int width = ::muse_emu::kWaveSize,
                    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (width != ::muse_emu::kWaveSize) ::muse_emu::fail("__shfl with a width other than 64", file, line);
  return ::muse_emu::shfl(v, src, file, line);
}
inline float __shfl_xor(float v, int mask, int width = ::muse_emu::kWaveSize,
                        const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (width != ::muse_emu::kWaveSize) ::muse_emu::fail("__shfl_xor with a width other than 64", file, line);
  return ::muse_emu::shfl_xor(v, mask, file, line);
}
inline int __shfl(int v, int src, int width = ::muse_emu::kWaveSize,
                  const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  float f;
  std::memcpy(&f, &v, sizeof f);  // the bits travel unchanged
  f = __shfl(f, src, width, file, line);
  std::memcpy(&v, &f, sizeof v);
  return v;
}
inline int __shfl_xor(int v, int mask, int width = ::muse_emu::kWaveSize,
                      const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  float f;
  std::memcpy(&f, &v, sizeof f);
  f = __shfl_xor(f, mask, width, file, line);
  std::memcpy(&v, &f, sizeof v);
  return v;
}
inline int __any(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::muse_emu::any(pred, file, line);
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<uint64_t>(a) * b) >> 32);
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// v_exp_f32: 2^x to 1 ulp; the host's exp2f stands in.
inline float __builtin_amdgcn_exp2f(float x) { return exp2f(x); }

// The MFMA builtins, as clang declares them (BuiltinsAMDGPU.def): A, B, C, then the CBSZ / ABID /
// BLGP modifiers, which the kernels leave 0 (anything else is refused here).
typedef short muse_emu_short4 __attribute__((ext_vector_type(4)));
typedef __bf16 muse_emu_bf16x8 __attribute__((ext_vector_type(8)));
typedef float muse_emu_float4 __attribute__((ext_vector_type(4)));
namespace muse_emu {
template <int K, typename AB>
inline muse_emu_float4 mfma_builtin(AB a, AB b, muse_emu_float4 c, int cbsz, int abid, int blgp,
                                     const char* file, int line) {
  static_assert(sizeof(AB) == K / 8 * 4, "K / 16 words an operand a lane");
  if (cbsz != 0 || abid != 0 || blgp != 0) fail("MFMA with CBSZ / ABID / BLGP modifiers", file, line);
  uint32_t aw[K / 8], bw[K / 8];
  float cf[4], df[4];
  std::memcpy(aw, &a, sizeof aw);
  std::memcpy(bw, &b, sizeof bw);
  std::memcpy(cf, &c, sizeof cf);
  mfma_16x16_bf16(K, aw, bw, cf, df, file, line);
  muse_emu_float4 d;
  std::memcpy(&d, df, sizeof d);
  return d;
}
}  // namespace muse_emu
inline muse_emu_float4 __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(
    muse_emu_short4 a, muse_emu_short4 b, muse_emu_float4 c, int cbsz, int abid, int blgp,
    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::muse_emu::mfma_builtin<16>(a, b, c, cbsz, abid, blgp, file, line);
}
inline muse_emu_float4 __builtin_amdgcn_mfma_f32_16x16x32_bf16(
    muse_emu_bf16x8 a, muse_emu_bf16x8 b, muse_emu_float4 c, int cbsz, int abid, int blgp,
    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::muse_emu::mfma_builtin<32>(a, b, c, cbsz, abid, blgp, file, line);
}

// ---- gfx950 cross-lane and conversion instructions (gpu/amd_ops.h), as clang declares the
// builtins (BuiltinsAMDGPU.def); their semantics: gpu/emu/lane_ops.h.
#if defined(__gfx950__)
typedef unsigned muse_emu_uint2 __attribute__((ext_vector_type(2)));
inline muse_emu_short4 __builtin_amdgcn_ds_read_tr16_b64_v4i16(
    __attribute__((address_space(3))) muse_emu_short4* p, const char* file = __builtin_FILE(),
    int line = __builtin_LINE()) {
  uint32_t w[2];
  ::muse_emu::ds_read_b64_tr_b16((const void*)p, w, file, line);
  muse_emu_short4 v;
  std::memcpy(&v, w, sizeof v);
  return v;
}
inline muse_emu_uint2 muse_emu_permlane_swap(::muse_emu::LaneOp op, unsigned vdst_old, unsigned src0,
                                             const char* file, int line) {
  const uint32_t in[4] = {vdst_old, src0, 0, 0};
  uint32_t out[4];
  ::muse_emu::lane_op(static_cast<int>(op), 0, in, out, file, line);
  return muse_emu_uint2{out[0], out[1]};
}
inline muse_emu_uint2 __builtin_amdgcn_permlane16_swap(unsigned vdst_old, unsigned src0, bool fi,
                                                      bool bound_ctrl,
                                                      const char* file = __builtin_FILE(),
                                                      int line = __builtin_LINE()) {
  (void)fi, (void)bound_ctrl;  // every lane is live: neither changes the result
  return muse_emu_permlane_swap(::muse_emu::LaneOp::kPermlane16Swap, vdst_old, src0, file, line);
}
inline muse_emu_uint2 __builtin_amdgcn_permlane32_swap(unsigned vdst_old, unsigned src0, bool fi,
                                                      bool bound_ctrl,
                                                      const char* file = __builtin_FILE(),
                                                      int line = __builtin_LINE()) {
  (void)fi, (void)bound_ctrl;
  return muse_emu_permlane_swap(::muse_emu::LaneOp::kPermlane32Swap, vdst_old, src0, file, line);
}
// v_cvt_pk_bf16_f32 has no builtin: gpu/amd_ops.h converts a float pair with
// __builtin_convertvector, which the host would lower its own way; this hook is the model.
#define MUSE_EMU_CVT_PK_BF16_F32(a, b) ::muse_emu::cvt_pk_bf16_f32((a), (b))
#endif
// buffer_load_dwordx4 of a raw buffer (gpu/amd_ops.h buffer_load16), the range check as the
// helper uses it: all 16 bytes inside num_records, read; offset >= num_records, zeros and nothing
// read; a load straddling num_records is refused.
typedef unsigned muse_emu_uint4 __attribute__((ext_vector_type(4)));
namespace muse_emu {
inline muse_emu_uint4 buffer_load16(const void* base, uint32_t num_records, uint32_t offset,
                                    const char* file, int line) {
  muse_emu_uint4 v = {0u, 0u, 0u, 0u};
  if (offset >= num_records) return v;
  if (num_records - offset < 16) fail("a buffer load straddling num_records", file, line);
  std::memcpy(&v, static_cast<const char*>(base) + offset, 16);
  return v;
}
}  // namespace muse_emu
#define MUSE_EMU_BUFFER_LOAD16(base, n, off) ::muse_emu::buffer_load16((base), (n), (off), __FILE__, __LINE__)
// v_cvt_pk_f32_fp8 (gpu/amd_ops.h cvt_pk_f32_fp8): byte `byte` of word as an e4m3 value of the
// target's format, written from the formats' definitions: OCP e4m3fn (bias 7, NaN S.1111.111)
// and e4m3fnuz (bias 8, NaN 0x80 alone); a subnormal is m * 2^(1 - bias - 3).
namespace muse_emu {
inline float cvt_fp8_byte(uint32_t word, int byte, bool fnuz) {
  const uint32_t b = (word >> (8 * byte)) & 0xFFu;
  if (fnuz ? b == 0x80u : (b & 0x7Fu) == 0x7Fu) return std::nanf("");
  const int bias = fnuz ? 8 : 7, e = static_cast<int>((b >> 3) & 0xFu), m = static_cast<int>(b & 7u);
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), 1 - bias - 3)
                         : std::ldexp(static_cast<float>(8 + m), e - bias - 3);
  return (b & 0x80u) ? -v : v;
}
}  // namespace muse_emu
#define MUSE_EMU_CVT_PK_F32_FP8(word, byte, fnuz) ::muse_emu::cvt_fp8_byte((word), (byte), (fnuz))
// A load through the constant address space (gpu/amd_ops.h load_invariant): a plain load here.
#define MUSE_EMU_LOAD_INVARIANT(p) (*(p))
// DPP exists on gfx942 and gfx950 alike.
inline int __builtin_amdgcn_update_dpp(int old, int src, int dpp_ctrl, int row_mask, int bank_mask,
                                       bool bound_ctrl, const char* file = __builtin_FILE(),
                                       int line = __builtin_LINE()) {
  const uint32_t in[4] = {static_cast<uint32_t>(old), static_cast<uint32_t>(src), 0, 0};
  uint32_t out[4];
  ::muse_emu::lane_op(static_cast<int>(::muse_emu::LaneOp::kDpp),
                      ::muse_emu::dpp_param(dpp_ctrl, row_mask, bank_mask, bound_ctrl), in, out, file,
                      line);
  return static_cast<int>(out[0]);
}

// ---- the kernels' LDS accesses (gpu/vendor.h lds_read / lds_write / lds_value), checked ------
#define MUSE_LDS_HOOKS 1
namespace muse_attn::gpu {
template <typename T>
inline T lds_read(const void* p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::muse_emu::lds_check_read(p, sizeof(T), file, line);
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
inline void lds_write(void* p, const T& v, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  std::memcpy(p, &v, sizeof v);
  ::muse_emu::lds_note_write(p, sizeof v, file, line);
}
template <typename T>
inline const T& lds_value(const T& x, const char* file = __builtin_FILE(),
                          int line = __builtin_LINE()) {
  ::muse_emu::lds_check_read(&x, sizeof x, file, line);
  return x;
}
}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_EMU_HIP_RUNTIME_H_
