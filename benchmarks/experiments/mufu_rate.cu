// exp2 throughput on the SFU (MUFU) by operand type: f32, f16x2, bf16x2 (sm_90). Each thread
// runs kChains independent chains of kIters dependent ex2 ops; elements/clock/SM from clock64.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
constexpr int kIters = 4096, kChains = 8;
template <int kind>
__global__ void rate(unsigned* out, long long* cycles) {
  unsigned x[kChains];
  for (int c = 0; c < kChains; ++c) x[c] = 0x3c003c00u ^ (threadIdx.x + c);  // ~1.0 halves
  float f[kChains];
  for (int c = 0; c < kChains; ++c) f[c] = -0.001f * (threadIdx.x + c);
  __syncthreads();
  long long t0 = clock64();
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (kind == 0) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(f[c]));
      if constexpr (kind == 1) asm volatile("ex2.approx.f16x2 %0, %0;" : "+r"(x[c]));
      if constexpr (kind == 2) asm volatile("ex2.approx.ftz.bf16x2 %0, %0;" : "+r"(x[c]));
    }
  }
  __syncthreads();
  long long t1 = clock64();
  unsigned acc = 0;
  for (int c = 0; c < kChains; ++c) acc ^= x[c] ^ __float_as_uint(f[c]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}
int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int threads = 1024;
  unsigned* out; long long* cyc;
  cudaMalloc(&out, sms * threads * 4); cudaMalloc(&cyc, sms * 8);
  const char* names[3] = {"ex2.approx.ftz.f32", "ex2.approx.f16x2", "ex2.approx.ftz.bf16x2"};
  for (int k = 0; k < 3; ++k) {
    for (int rep = 0; rep < 2; ++rep) {
      if (k == 0) rate<0><<<sms, threads>>>(out, cyc);
      if (k == 1) rate<1><<<sms, threads>>>(out, cyc);
      if (k == 2) rate<2><<<sms, threads>>>(out, cyc);
      cudaDeviceSynchronize();
    }
    long long c[1024]; cudaMemcpy(c, cyc, sms * 8, cudaMemcpyDeviceToHost);
    long long mx = 0; for (int i = 0; i < sms; ++i) mx = c[i] > mx ? c[i] : mx;
    const double instr = double(threads) * kIters * kChains;  // a CTA (one an SM)
    const double elems = instr * (k == 0 ? 1 : 2);
    printf("%-24s %8lld cycles  %.2f instr/clk/SM  %.2f elements/clk/SM\n", names[k], mx, instr / mx, elems / mx);
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
