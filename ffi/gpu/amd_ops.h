// AMD device helpers for the gfx950 (CDNA4) design: the LDS transpose read, the permlane swaps,
// packed bf16 conversion, DPP row operations and global loads with a cache policy. Each lowers
// to its gfx950 instruction and has a gfx942 form that computes the same (tests/test_amd_ops.py
// checks both in the emulator against a model of the documented semantics, and checks what the
// compilers emit). Semantics and sources: gpu/emu/lane_ops.h. HIP only; all lanes of the wave
// must be live where a helper reads other lanes (1-D blocks: the lane is threadIdx.x % 64).
#ifndef MUSE_ATTN_GPU_AMD_OPS_H_
#define MUSE_ATTN_GPU_AMD_OPS_H_

#include "gpu/vendor.h"

#if defined(MUSE_ATTN_HIP)

namespace muse_attn::gpu::amd {

typedef uint32_t u32x4 __attribute__((ext_vector_type(4)));

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x) & 63; }

// ---- ds_read_b64_tr_b16 ----------------------------------------------------------------------
// Lane l's 4 16-bit elements (2 words, element 0 in the low half of word 0): element n is element
// (l & 3) of the 8 bytes at lds + offset of lane (l & ~15) + ((l >> 2) & 3) + 4 n. With lane
// 4 r + c (r, c < 4) of a 16-lane group addressing row r, columns 4 c .. 4 c + 3 of a row-major
// 4 x 16 block, lane j of the group gets column j, rows 0..3: the transpose of the block, the
// operand order of a 16x16x32 MFMA. offset: 8-byte aligned; lds: the same on every lane.
__device__ __forceinline__ uint2 lds_read_tr_b16(const char* lds, uint32_t offset) {
#if defined(__gfx950__)
  typedef short s16x4 __attribute__((ext_vector_type(4)));
  const s16x4 v = __builtin_amdgcn_ds_read_tr16_b64_v4i16(
      (__attribute__((address_space(3))) s16x4*)(lds + offset));
  uint2 r;
  r.x = static_cast<uint16_t>(v[0]) | static_cast<uint32_t>(static_cast<uint16_t>(v[1])) << 16;
  r.y = static_cast<uint16_t>(v[2]) | static_cast<uint32_t>(static_cast<uint16_t>(v[3])) << 16;
  return r;
#else
  // gfx942: the source lanes' offsets by shuffle, then one 16-bit LDS read an element.
  const int l = lane_id();
  uint16_t h[4];
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    const int src = (l & ~15) + ((l >> 2) & 3) + 4 * n;
    const uint32_t off = static_cast<uint32_t>(__shfl(static_cast<int>(offset), src));
    h[n] = lds_read<uint16_t>(lds + off + 2 * (l & 3));
  }
  uint2 r;
  r.x = h[0] | static_cast<uint32_t>(h[1]) << 16;
  r.y = h[2] | static_cast<uint32_t>(h[3]) << 16;
  return r;
#endif
}

// ---- v_permlane16_swap_b32 / v_permlane32_swap_b32 -------------------------------------------
// (first, second) after the swap: rows of 16 lanes; permlane16: the first's odd rows trade with
// the second's even rows (row 2k + 1 of first <-> row 2k of second); permlane32: the first's
// lanes 32..63 trade with the second's lanes 0..31. With first = second = x, a lane holds its own
// x and its partner's (lane ^ 16 / lane ^ 32) in some order: a symmetric op of the two is the
// butterfly step without a lane select.
struct SwapPair {
  uint32_t first, second;
};

template <int kRows>  // 16 or 32 lanes
__device__ __forceinline__ SwapPair permlane_swap(uint32_t first, uint32_t second) {
  static_assert(kRows == 16 || kRows == 32, "permlane16_swap or permlane32_swap");
#if defined(__gfx950__)
  const auto r = kRows == 16 ? __builtin_amdgcn_permlane16_swap(first, second, false, false)
                             : __builtin_amdgcn_permlane32_swap(first, second, false, false);
  return SwapPair{r[0], r[1]};
#else
  // gfx942: one shuffle; the upper lane of a pair sends its first, the lower its second.
  const bool upper = (lane_id() & kRows) != 0;
  const uint32_t got = static_cast<uint32_t>(
      __shfl_xor(static_cast<int>(upper ? first : second), kRows));
  return upper ? SwapPair{got, second} : SwapPair{first, got};
#endif
}

// op(x, x of lane ^ kRows) on every lane (kRows 16 or 32); op symmetric (max, +).
template <int kRows, typename Op>
__device__ __forceinline__ float xor_step(float x, Op op) {
  const SwapPair p = permlane_swap<kRows>(__float_as_uint(x), __float_as_uint(x));
  return op(__uint_as_float(p.first), __uint_as_float(p.second));
}

// ---- v_cvt_pk_bf16_f32 -----------------------------------------------------------------------
// bf16(a) | bf16(b) << 16, round to nearest even; a NaN becomes a quiet NaN of the same sign.
__device__ __forceinline__ uint32_t cvt_pk_bf16_f32(float a, float b) {
#if defined(__gfx950__) && defined(MUSE_EMU_CVT_PK_BF16_F32)
  return MUSE_EMU_CVT_PK_BF16_F32(a, b);
#elif defined(__gfx950__)
  typedef float f32x2 __attribute__((ext_vector_type(2)));
  typedef __bf16 bf16x2 __attribute__((ext_vector_type(2)));
  return __builtin_bit_cast(uint32_t, __builtin_convertvector((f32x2{a, b}), bf16x2));
#else
  auto one = [](float f) -> uint32_t {
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u | 0x400000u) >> 16;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  };
  return one(a) | one(b) << 16;
#endif
}

// ---- DPP (gfx942 and gfx950) -----------------------------------------------------------------
// The lane's value from another lane of its row of 16 (DPP_CTRL numbers); where the source lane
// is out of the row, the lane keeps `old` (or reads 0 with kBoundZero). Rows outside kRowMask
// keep `old`.
inline constexpr int dpp_quad_perm(int a, int b, int c, int d) { return a | b << 2 | c << 4 | d << 6; }
inline constexpr int dpp_row_shl(int n) { return 0x100 + n; }  // lane i <- i + n
inline constexpr int dpp_row_shr(int n) { return 0x110 + n; }  // lane i <- i - n
inline constexpr int dpp_row_ror(int n) { return 0x120 + n; }  // lane i <- (i - n) mod 16
inline constexpr int kDppRowMirror = 0x140;                    // lane i <- 15 - i
inline constexpr int kDppRowHalfMirror = 0x141;                // lane i <- 7 - i (in 8)

template <int kCtrl, int kRowMask = 0xf, bool kBoundZero = false>
__device__ __forceinline__ uint32_t dpp(uint32_t old, uint32_t src) {
  return static_cast<uint32_t>(__builtin_amdgcn_update_dpp(
      static_cast<int>(old), static_cast<int>(src), kCtrl, kRowMask, 0xf, kBoundZero));
}

// op over the 16 lanes of the lane's row, on every lane of it: xor 1, xor 2 (quad_perm), then
// the half-row and row mirrors (GFX9 has no row_xmask). op symmetric and associative. Every
// source lane is in the row: bound_ctrl's zero is never read, and it spares a move of `old`.
template <typename Op>
__device__ __forceinline__ float row_reduce16(float x, Op op) {
  x = op(x, __uint_as_float(dpp<dpp_quad_perm(1, 0, 3, 2), 0xf, true>(0u, __float_as_uint(x))));
  x = op(x, __uint_as_float(dpp<dpp_quad_perm(2, 3, 0, 1), 0xf, true>(0u, __float_as_uint(x))));
  x = op(x, __uint_as_float(dpp<kDppRowHalfMirror, 0xf, true>(0u, __float_as_uint(x))));
  return op(x, __uint_as_float(dpp<kDppRowMirror, 0xf, true>(0u, __float_as_uint(x))));
}

// ---- global loads with a cache policy --------------------------------------------------------
// kNonTemporal: a stream read once (full attention's K/V: the `nt` bit, so it does not push the
// rest out of the caches); kCached: reread data (a window's keys by the next tokens' calls).
// The emulator reads both as ordinary loads.
enum class CachePolicy { kCached, kNonTemporal };

template <CachePolicy kPolicy>
__device__ __forceinline__ u32x4 global_load16(const void* p) {
  const u32x4* q = static_cast<const u32x4*>(p);
  if constexpr (kPolicy == CachePolicy::kNonTemporal) return __builtin_nontemporal_load(q);
  else return *q;
}

// ---- v_cvt_pk_f32_fp8 ---------------------------------------------------------------------------
// Bytes 2 kHigh and 2 kHigh + 1 of `word` as fp32, exactly (every e4m3 value is an fp32; a NaN
// byte gives a NaN). The format is the target's own: e4m3fnuz on gfx942 (CDNA3), OCP e4m3fn on
// gfx950 (CDNA4); a cache in the other format is decoded in software.
#if defined(__gfx950__)
inline constexpr bool kNativeFp8IsFnuz = false;
#else
inline constexpr bool kNativeFp8IsFnuz = true;
#endif
struct F32Pair {
  float lo, hi;
};
template <bool kHigh>
__device__ __forceinline__ F32Pair cvt_pk_f32_fp8(uint32_t word) {
#if defined(MUSE_EMU_CVT_PK_F32_FP8)
  return F32Pair{MUSE_EMU_CVT_PK_F32_FP8(word, 2 * kHigh, kNativeFp8IsFnuz),
                 MUSE_EMU_CVT_PK_F32_FP8(word, 2 * kHigh + 1, kNativeFp8IsFnuz)};
#else
  typedef float f32x2 __attribute__((ext_vector_type(2)));
  const f32x2 v = __builtin_amdgcn_cvt_pk_f32_fp8(static_cast<int>(word), kHigh);
  return F32Pair{v[0], v[1]};
#endif
}

// ---- s_load_dword: a uniform load from memory that the kernel never writes -----------------
// Read through the constant address space, which the compiler may read with scalar loads (the
// SMEM pipe, its own counter, no VGPR) where the address is the same on every lane; a plain
// global load of a uniform value becomes a vector load and an immediate wait. For inputs only
// (block table, lengths): the constant space promises no writes while the kernel runs.
template <typename T>
__device__ __forceinline__ T load_invariant(const T* p) {
#if defined(MUSE_EMU_LOAD_INVARIANT)
  return MUSE_EMU_LOAD_INVARIANT(p);
#else
  return *reinterpret_cast<const __attribute__((address_space(4))) T*>(reinterpret_cast<uintptr_t>(p));
#endif
}

// ---- buffer_load_dwordx4 (raw buffer, offen) --------------------------------------------------
// The 16 bytes at base + offset where offset + 16 <= num_records; zeros, with no memory access,
// where offset >= num_records (the buffer's range check; both targets). So a predicated load
// needs no branch: an absent chunk passes an offset past the range. base and num_records the same
// on every lane (a scalar resource); a load straddling num_records is not used (the emulator
// refuses it).
inline constexpr uint32_t kOutOfRange = 0x80000000u;
inline constexpr int kBufferRsrcWord3 = 0x00020000;  // gfx9 raw-buffer DATA_FORMAT (as CK sets it)

template <CachePolicy kPolicy>
__device__ __forceinline__ u32x4 buffer_load16(const void* base, uint32_t num_records, uint32_t offset) {
#if defined(MUSE_EMU_BUFFER_LOAD16)
  return MUSE_EMU_BUFFER_LOAD16(base, num_records, offset);
#else
  const __amdgpu_buffer_rsrc_t rsrc = __builtin_amdgcn_make_buffer_rsrc(
      const_cast<void*>(base), 0, static_cast<int>(num_records), kBufferRsrcWord3);
  constexpr int kAux = kPolicy == CachePolicy::kNonTemporal ? 2 : 0;  // the nt bit
  return __builtin_amdgcn_raw_buffer_load_b128(rsrc, static_cast<int>(offset), 0, kAux);
#endif
}

}  // namespace muse_attn::gpu::amd

#endif  // MUSE_ATTN_HIP
#endif  // MUSE_ATTN_GPU_AMD_OPS_H_
