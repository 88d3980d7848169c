// The device's clock, for benchmarks: a one-thread kernel that stores the GPU's nanosecond
// clock when the stream reaches it (NVIDIA %globaltimer; AMD wall_clock64 scaled by its rate).
// The custom call jax_muse_attn_device_clock (device_clock_gpu.cc) puts it inside a jit, so a
// chain of calls can be timed on the device between two reads, without the host's dispatch.
#ifndef MUSE_ATTN_GPU_DEVICE_CLOCK_H_
#define MUSE_ATTN_GPU_DEVICE_CLOCK_H_

#include <cstdint>

#include "gpu/vendor.h"

namespace muse_attn::gpu {

// Stores the clock, in ns, as two uint32 (low, high) at out[0], out[1].
gpuError_t launch_device_clock(uint32_t* out, gpuStream_t stream);

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_DEVICE_CLOCK_H_
