// The GPU library's description of a device for the launch plan (launch_plan.h Device), asked by
// the Python module (module.cc: gpu_device) at trace time. Plain C, so that the host-compiled
// module can call into the GPU library.
#ifndef MUSE_ATTN_GPU_DEVICE_QUERY_H_
#define MUSE_ATTN_GPU_DEVICE_QUERY_H_

// What out[] holds, in this order.
enum MuseDeviceField {
  kMuseDeviceMultiprocessors,  // SMs / CUs
  kMuseDeviceComputeMajor,     // NVIDIA compute capability major; 0 on AMD
  kMuseDeviceWarpSize,         // 32 or 64
  kMuseDeviceMergeCanWait,     // 1: the loaded merge code can be a dependent launch
  kMuseDeviceHasTwoPairs,      // 1: the loaded split code has the two-pair ping-pong kernel
  kMuseDeviceAmdGfx,           // AMD: the gfx target number (942, 950); 0 elsewhere or unknown
  kMuseNumDeviceFields
};

// Fills out for device `ordinal` (the runtime's numbering); returns 0, or -1 where the runtime
// cannot say. Leaves the calling thread's current device as it was.
#if defined(MUSE_ATTN_WITH_CUDA)
extern "C" int MuseDescribeGpuCuda(int ordinal, int out[kMuseNumDeviceFields]);
#endif
#if defined(MUSE_ATTN_WITH_HIP)
extern "C" int MuseDescribeGpuRocm(int ordinal, int out[kMuseNumDeviceFields]);
#endif

#endif  // MUSE_ATTN_GPU_DEVICE_QUERY_H_
