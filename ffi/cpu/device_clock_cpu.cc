// The CPU handler of jax_muse_attn_device_clock: the host's steady clock (ns, as uint32 [low,
// high]) when XLA runs the call, after the op that produced its operand (not read). Lets the
// benchmark's device-clock column and its tests run on a machine without a GPU.
#include <chrono>
#include <cstdint>

#include "handlers.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace muse_attn {
namespace {

ffi::Error device_clock_cpu(ffi::AnyBuffer after,                  // ordering only, not read
                            ffi::ResultBufferR1<ffi::U32> clock) {  // [2]: ns, low then high
  (void)after;
  if (clock->element_count() != 2)
    return ffi::Error::InvalidArgument("jax_muse_attn device_clock: the result must be uint32[2]");
  const uint64_t t = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch()).count());
  clock->typed_data()[0] = static_cast<uint32_t>(t);
  clock->typed_data()[1] = static_cast<uint32_t>(t >> 32);
  return ffi::Error::Success();
}

}  // namespace
}  // namespace muse_attn

XLA_FFI_DEFINE_HANDLER_SYMBOL(MuseDeviceClockCpu, muse_attn::device_clock_cpu,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::BufferR1<xla::ffi::U32>>());
