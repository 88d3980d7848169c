// How many FP8 values an SM dequantizes a clock by each instruction sequence that gives the FP8
// rule's bits (muse_attn/fp8.h: bf16(fp32(scale * decode(x))), e4m3fn): the figure that bounds an
// FP8 tile's conversion in the split kernels (kv_tile.h, e4m3fn_x16_to_bf16) apart from its
// shared-memory traffic. Registers only: every thread converts 16 bytes a step for 4096 steps,
// 8 CTAs of 256 threads an SM, timed by events over 5 launches; the parts of a sequence alone
// beside it. No NaN handling in the integer decodes (they would need more).
//   nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -o /tmp/fp8_decode benchmarks/fp8_decode_probe.cu
//   /tmp/fp8_decode
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "probe_common.h"

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// Without .ftz: the integer decode's fp32 denormals (FP8 subnormals scaled by 2^-120) kept.
__device__ __forceinline__ float mul_keep_denormals(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t word, int half) {
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(static_cast<uint16_t>(word >> (16 * half))));
  return h2;
}
__device__ __forceinline__ float f16_to_f32(uint32_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<uint16_t>(h)));
  return f;
}
// The FP8 byte `byte` (0..3) of x as fp32 times 2^-120 (its bits moved into the fp32 fields).
__device__ __forceinline__ float e4m3_scaled_down(uint32_t x, int byte) {
  const uint32_t b = __byte_perm(x, 0, (byte << 12) | 0x444);  // the byte on top, zeros below
  return __uint_as_float(static_cast<uint32_t>(static_cast<int32_t>(b) >> 4) & 0x87F00000u);
}

enum Seq { kOverhead, kCvt, kIntDecode, kCvtIntWiden, kPackOnly, kUnpackOnly, kWidenOnly };

template <Seq S>
__device__ __forceinline__ void convert16(const uint32_t (&in)[4], float scale, uint32_t (&out)[8]) {
#pragma unroll
  for (int w = 0; w < 8; ++w) {
    const uint32_t x = in[w / 2];
    if constexpr (S == kOverhead) {
      out[w] = x >> (w % 2);
    } else if constexpr (S == kCvt) {  // the kernels' sequence
      const uint32_t h2 = e4m3x2_to_f16x2(x, w % 2);
      out[w] = pack_bf16x2(scale * f16_to_f32(h2), scale * f16_to_f32(h2 >> 16));
    } else if constexpr (S == kIntDecode) {
      out[w] = pack_bf16x2(scale * mul_keep_denormals(e4m3_scaled_down(x, 2 * (w % 2)), 0x1p120f),
                           scale * mul_keep_denormals(e4m3_scaled_down(x, 2 * (w % 2) + 1), 0x1p120f));
    } else if constexpr (S == kCvtIntWiden) {  // f16 -> f32 by moving the bits (times 2^-112)
      const uint32_t h2 = e4m3x2_to_f16x2(x, w % 2);
      const uint32_t lo = ((h2 & 0x7FFFu) << 13) | ((h2 & 0x8000u) << 16);
      const uint32_t hi = (h2 & 0x80000000u) | ((h2 >> 3) & 0x0FFFE000u);
      out[w] = pack_bf16x2(scale * mul_keep_denormals(__uint_as_float(lo), 0x1p112f),
                           scale * mul_keep_denormals(__uint_as_float(hi), 0x1p112f));
    } else if constexpr (S == kPackOnly) {
      out[w] = pack_bf16x2(__uint_as_float(x), __uint_as_float(x + w));
    } else if constexpr (S == kUnpackOnly) {
      out[w] = e4m3x2_to_f16x2(x, w % 2);
    } else {
      out[w] = __float_as_uint(f16_to_f32(x >> w)) ^ __float_as_uint(f16_to_f32(x >> (16 + w)));
    }
  }
}

template <Seq S>
__global__ void __launch_bounds__(256) convert_steps(const uint4* in, uint32_t* out, float scale, int steps) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const uint4 v = in[i];
  uint32_t x[4] = {v.x, v.y, v.z, v.w};
  uint32_t acc = 0;
  for (int s = 0; s < steps; ++s) {
    uint32_t o[8];
    convert16<S>(x, scale, o);
    acc ^= (o[0] ^ o[1] ^ o[2]) ^ (o[3] ^ o[4] ^ o[5]) ^ (o[6] ^ o[7]);
    x[s & 3] += 0x01010101u;  // new bytes every step: nothing is hoisted
  }
  out[i] = acc;
}

template <Seq S>
int run(const char* name, const uint4* in, uint32_t* out, int sms, int clock_khz) {
  constexpr int kSteps = 4096, kLaunches = 5;
  const int blocks = 8 * sms;
  convert_steps<S><<<blocks, 256>>>(in, out, 0.7f, kSteps);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventRecord(a));
  for (int r = 0; r < kLaunches; ++r) convert_steps<S><<<blocks, 256>>>(in, out, 0.7f, kSteps);
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  const double per_s = double{kLaunches} * blocks * 256 * kSteps * 16 / (ms * 1e-3);
  std::printf("%-52s %9.1f Gvalues/s  %6.2f values/clk/SM (at %d MHz)\n", name, per_s / 1e9,
              per_s / sms / (clock_khz * 1e3), clock_khz / 1000);
  return 0;
}

int main() {
  int sms = 0, clk = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0));
  const size_t threads = size_t{8} * sms * 256;
  uint4* in = nullptr;
  uint32_t* out = nullptr;
  CHECK(cudaMalloc(&in, threads * 16));
  CHECK(cudaMalloc(&out, threads * 4));
  CHECK(cudaMemset(in, 0x35, threads * 16));
  int bad = 0;
  bad |= run<kOverhead>("the loop alone (shift, xor)", in, out, sms, clk);
  bad |= run<kCvt>("cvt e4m3x2->f16x2, cvt f16->f32 x2, fmul x2, pack", in, out, sms, clk);
  bad |= run<kIntDecode>("integer decode, mul 2^120, fmul, pack", in, out, sms, clk);
  bad |= run<kCvtIntWiden>("cvt e4m3x2->f16x2, integer widen, mul 2^112, fmul, pack", in, out, sms, clk);
  bad |= run<kPackOnly>("pack (cvt.rn.bf16x2.f32) alone", in, out, sms, clk);
  bad |= run<kUnpackOnly>("cvt e4m3x2->f16x2 alone", in, out, sms, clk);
  bad |= run<kWidenOnly>("cvt f16->f32 alone", in, out, sms, clk);
  CHECK(cudaDeviceSynchronize());
  return bad;
}
