// The device clock kernel and its launcher (device_clock.h).
#include <cstdint>

#include "gpu/device_clock.h"
#include "gpu/vendor.h"

namespace muse_attn::gpu {
namespace {

// ns_per_tick: 1 on NVIDIA (%globaltimer counts ns); on AMD 1e6 / the wall clock's kHz.
__global__ void device_clock_kernel(uint32_t* out, double ns_per_tick) {
  uint64_t t;
#if defined(MUSE_ATTN_HIP)
#if defined(__HIP_DEVICE_COMPILE__)  // wall_clock64 is declared for the device pass only
  t = static_cast<uint64_t>(static_cast<double>(wall_clock64()) * ns_per_tick);
#else
  t = 0;
  (void)ns_per_tick;
#endif
#else
  (void)ns_per_tick;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
#endif
  out[0] = static_cast<uint32_t>(t);
  out[1] = static_cast<uint32_t>(t >> 32);
}

}  // namespace

gpuError_t launch_device_clock(uint32_t* out, gpuStream_t stream) {
  double ns_per_tick = 1.0;
#if defined(MUSE_ATTN_HIP)
  // wall_clock64 counts the constant 100 MHz reference clock on gfx90a / gfx942 / gfx950; ROCm 6
  // reports its rate (older headers, e.g. Debian's HIP 5.2, lack the attribute).
  int khz = 100000;
#if HIP_VERSION_MAJOR >= 6
  int dev = 0;
  if (gpuError_t e = current_device(&dev); e != gpuSuccess) return e;
  if (gpuError_t e = hipDeviceGetAttribute(&khz, hipDeviceAttributeWallClockRate, dev); e != gpuSuccess)
    return e;
#endif
  ns_per_tick = khz > 0 ? 1e6 / khz : 1.0;
#endif
  device_clock_kernel<<<1, 1, 0, stream>>>(out, ns_per_tick);
  return gpuGetLastError();
}

}  // namespace muse_attn::gpu
