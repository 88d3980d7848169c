// The GPU handler of jax_muse_attn_device_clock ("CUDA" or "ROCM"): stores the device's clock
// (ns, as uint32 [low, high]) when the stream reaches it. Its operand is any array the read must
// follow (XLA orders the call after the op that produced it); it is not read. For benchmarks:
// benchmarks/bench.py times chains of calls between two reads. Command-buffer compatible (one
// kernel launch, no host synchronization).
#include <cstdint>
#include <string>

#include "gpu/device_clock.h"
#include "gpu/vendor.h"
#include "handlers.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace muse_attn::gpu {
namespace {

ffi::Error device_clock_gpu(gpuStream_t stream,
                            ffi::AnyBuffer after,                  // ordering only, not read
                            ffi::ResultBufferR1<ffi::U32> clock) {  // [2]: ns, low then high
  (void)after;
  if (clock->element_count() != 2)
    return ffi::Error::InvalidArgument("jax_muse_attn device_clock: the result must be uint32[2]");
  if (gpuError_t e = launch_device_clock(clock->typed_data(), stream); e != gpuSuccess)
    return ffi::Error::Internal(std::string("jax_muse_attn device_clock: ") + gpuGetErrorString(e));
  return ffi::Error::Success();
}

}  // namespace
}  // namespace muse_attn::gpu

XLA_FFI_DEFINE_HANDLER_SYMBOL(MUSE_GPU_HANDLER_SYMBOL(MuseDeviceClock), muse_attn::gpu::device_clock_gpu,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<muse_attn::gpu::gpuStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::BufferR1<xla::ffi::U32>>(),
                              {xla::ffi::Traits::kCmdBufferCompatible});
