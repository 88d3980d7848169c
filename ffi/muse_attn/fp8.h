// FP8 KV cache: the formats, their exact decoding and the dequantization rule every backend
// applies (README, Semantics: FP8 KV cache):
//   K = bf16(fp32(scale_k * decode(k8))), V = bf16(fp32(scale_v * decode(v8)))
// decode() is exact (every e4m3 value is an fp32), the product is rounded to fp32 and then to
// bf16, both to nearest even; from there the computation is the bf16 cache's.
//   e4m3fn   (OCP; NVIDIA, gfx950): bias 7, max 448, NaN = S.1111.111, no infinities.
//   e4m3fnuz (gfx942):              bias 8, max 240, NaN = 1.0000.000 (no -0), no infinities.
// Decoding stays in normal fp32 values (a subnormal e4m3 is m * 2^(-bias - 2) formed as an
// integer times a power of two), so flush-to-zero arithmetic decodes it exactly too.
#ifndef MUSE_ATTN_FP8_H_
#define MUSE_ATTN_FP8_H_

#include <cstdint>
#include <cstring>

#include "muse_attn/host_device.h"

namespace muse_attn {

enum class KvFormat : int { kBf16 = 0, kFp8E4m3fn = 1, kFp8E4m3fnuz = 2 };
enum class ScaleKind : int { kNone = 0, kTensor = 1, kToken = 2 };

MUSE_HD float fp8_bits_as_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
MUSE_HD uint32_t fp8_float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

// The value of an e4m3 byte (fnuz: the gfx942 variant), exactly.
MUSE_HD float fp8_decode(uint32_t b, bool fnuz) {
  const uint32_t sign = (b & 0x80u) << 24;
  const uint32_t e = (b >> 3) & 0xFu, m = b & 7u;
  const int bias = fnuz ? 8 : 7;
  const float normal = fp8_bits_as_float(sign | ((e + 127u - bias) << 23) | (m << 20));
  // m * 2^(1 - bias - 3): 2^-9 (fn) or 2^-10 (fnuz), an integer times a power of two.
  const float sub = fp8_bits_as_float(sign | fp8_float_bits(static_cast<float>(m) *
                                                             (fnuz ? 0.0009765625f : 0.001953125f)));
  const bool nan = fnuz ? b == 0x80u : (b & 0x7Fu) == 0x7Fu;
  return nan ? fp8_bits_as_float(0x7fc00000u) : (e != 0 ? normal : sub);
}

// fp32 -> bf16 bits, round to nearest even; NaN stays NaN.
MUSE_HD uint32_t fp8_round_bf16(float f) {
  const uint32_t u = fp8_float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// The dequantization rule: bf16 bits of fp32(scale * decode(b)).
MUSE_HD uint32_t fp8_dequantize_bf16(uint32_t b, float scale, bool fnuz) {
  return fp8_round_bf16(scale * fp8_decode(b, fnuz));
}

}  // namespace muse_attn

#endif  // MUSE_ATTN_FP8_H_
