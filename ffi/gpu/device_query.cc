// The device description the launch plan needs (device_query.h, kernels.h
// describe_current_device): the runtime's attributes and what the loaded kernels' code can do.
#include "gpu/device_query.h"

#include "gpu/kernels.h"
#include "gpu/launch_plan.h"
#include "gpu/vendor.h"

namespace muse_attn::gpu {

bool describe_current_device(Device* out) {
  Device d;
  d.vendor = kVendor;
  d.warp_size = kWarpSize;
  if (multiprocessor_count(&d.multiprocessors) != gpuSuccess || d.multiprocessors < 1) {
    (void)gpuGetLastError();
    return false;
  }
  d.compute_major = device_compute_major();
  d.merge_can_wait = device_supports_pdl() && merge_waits_for_split();
  d.has_two_pairs = pingpong_two_pairs_loaded();
#if defined(MUSE_ATTN_HIP)
  int dev = 0;
  hipDeviceProp_t prop;
  if (current_device(&dev) == gpuSuccess && hipGetDeviceProperties(&prop, dev) == hipSuccess)
    d.amd_gfx = amd_gfx_number(prop.gcnArchName);  // "gfx950:sramecc+:xnack-" -> 950
  else
    (void)gpuGetLastError();
#endif
  *out = d;
  return true;
}

}  // namespace muse_attn::gpu

extern "C" int MUSE_GPU_HANDLER_SYMBOL(MuseDescribeGpu)(int ordinal, int out[kMuseNumDeviceFields]) {
  using namespace muse_attn::gpu;
  int previous = 0;
  if (current_device(&previous) != gpuSuccess) return -1;
#if defined(MUSE_ATTN_HIP)
  const bool switched = previous != ordinal && hipSetDevice(ordinal) == hipSuccess;
#else
  const bool switched = previous != ordinal && cudaSetDevice(ordinal) == cudaSuccess;
#endif
  if (previous != ordinal && !switched) {
    (void)gpuGetLastError();
    return -1;
  }
  Device d;
  const bool ok = describe_current_device(&d);
#if defined(MUSE_ATTN_HIP)
  if (switched) (void)hipSetDevice(previous);
#else
  if (switched) (void)cudaSetDevice(previous);
#endif
  if (!ok) return -1;
  out[kMuseDeviceMultiprocessors] = d.multiprocessors;
  out[kMuseDeviceComputeMajor] = d.compute_major;
  out[kMuseDeviceWarpSize] = d.warp_size;
  out[kMuseDeviceMergeCanWait] = d.merge_can_wait ? 1 : 0;
  out[kMuseDeviceHasTwoPairs] = d.has_two_pairs ? 1 : 0;
  out[kMuseDeviceAmdGfx] = d.amd_gfx;
  return 0;
}
