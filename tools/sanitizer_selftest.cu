// Checks that compute-sanitizer works on this machine at all: memcheck must report the
// out-of-bounds write below (exit code != 0 under --error-exitcode 1), racecheck the race.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void oob_write(int* p, int n) { p[threadIdx.x + n] = 1; }  // writes past the end
__global__ void smem_race(int* out) {
  volatile __shared__ int s;  // volatile: the read below really reads shared memory
  s = threadIdx.x;  // every thread writes, no barrier
  out[threadIdx.x] = s;
}

int main() {
  int* p;
  cudaMalloc(&p, 32 * sizeof(int));
  oob_write<<<1, 32>>>(p, 16);
  smem_race<<<1, 64>>>(p);
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("sanitizer_selftest: kernels ran (%s)\n", cudaGetErrorString(e));
  cudaFree(p);
  return 0;
}
