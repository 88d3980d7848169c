// The Python extension module: registrations() maps an XLA platform name to the capsule of the
// handler built for it. jax_muse_attn/_ffi.py registers each under one target name.
// clock_registrations(): the same for the benchmarks' device clock (jax_muse_attn_device_clock).
#include <nanobind/nanobind.h>

#include "handlers.h"

namespace nb = nanobind;

namespace {

template <typename T>
nb::capsule encapsulate_handler(T* fn) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, T, XLA_FFI_CallFrame*>,
                "an XLA FFI handler must be a function taking XLA_FFI_CallFrame*");
  return nb::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace

NB_MODULE(_muse_attn, m) {
  m.doc() = "XLA FFI handlers of jax_muse_attn (verify attention over a paged KV cache)";
  m.def("registrations", []() {
    nb::dict d;
    d["cpu"] = encapsulate_handler(MuseVerifyAttentionCpu);
#if defined(MUSE_ATTN_WITH_CUDA)
    d["CUDA"] = encapsulate_handler(MuseVerifyAttentionCuda);
#endif
#if defined(MUSE_ATTN_WITH_HIP)
    d["ROCM"] = encapsulate_handler(MuseVerifyAttentionRocm);
#endif
    return d;
  });
  m.def("clock_registrations", []() {
    nb::dict d;
    d["cpu"] = encapsulate_handler(MuseDeviceClockCpu);
#if defined(MUSE_ATTN_WITH_CUDA)
    d["CUDA"] = encapsulate_handler(MuseDeviceClockCuda);
#endif
#if defined(MUSE_ATTN_WITH_HIP)
    d["ROCM"] = encapsulate_handler(MuseDeviceClockRocm);
#endif
    return d;
  });
}
