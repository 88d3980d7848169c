// The Python extension module: registrations() maps an XLA platform name to the capsule of the
// handler built for it. jax_muse_attn/_ffi.py registers each under one target name.
// clock_registrations(): the same for the benchmarks' device clock (jax_muse_attn_device_clock).
// gpu_launch_plan(): the GPU handler's launch plan; cuda_architectures: what the CUDA code was
// built for.
#include <nanobind/nanobind.h>

#include <stdexcept>

#include "gpu/launch_plan_query.h"
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
#if defined(MUSE_ATTN_WITH_CUDA) || defined(MUSE_ATTN_WITH_HIP)
  // The GPU handler's launch plan for a call of these static sizes on the current device
  // (gpu/launch_plan_query.cc); Python: jax_muse_attn.launch_plan.
  m.def(
      "gpu_launch_plan",
      [](int head_dim, int tokens, int num_q_heads, int num_kv_heads, int num_requests, int pages,
         int window, int num_splits) {
        const int sizes[kMuseNumSizes] = {head_dim,     tokens, num_q_heads, num_kv_heads,
                                          num_requests, pages,  window,      num_splits};
        int plan[kMuseNumPlanFields] = {};
#if defined(MUSE_ATTN_WITH_CUDA)
        const int rc = MuseLaunchPlanCuda(sizes, plan);
#else
        const int rc = MuseLaunchPlanRocm(sizes, plan);
#endif
        if (rc != 0) throw nb::value_error("gpu_launch_plan: sizes the GPU handler would refuse");
        static const char* const kSplitKernels[] = {"per_tile", "two_tile", "pingpong",
                                                    "pingpong_two_pairs"};
        const int kernel = plan[kMuseSplitKernel];
        if (kernel < 0 || kernel > 3) throw std::runtime_error("gpu_launch_plan: unknown split kernel");
        nb::dict d;
        d["split_kernel"] = kSplitKernels[kernel];
        d["merge_warps"] = plan[kMuseMergeWarps];
        d["merge_pdl"] = plan[kMuseMergePdl] != 0;
        d["merge_by_lane"] = plan[kMuseMergeByLane] != 0;
        d["split_fill_ring"] = plan[kMuseSplitFillRing] != 0;
        return d;
      },
      nb::arg("head_dim"), nb::arg("tokens"), nb::arg("num_q_heads"), nb::arg("num_kv_heads"),
      nb::arg("num_requests"), nb::arg("pages"), nb::arg("window"), nb::arg("num_splits"));
#endif
#if defined(MUSE_ATTN_CUDA_ARCHITECTURES)
  // CMake's CUDA architectures of this build, comma-separated (gpu/cuda.cmake); absent from
  // builds that do not say (Bazel's).
  m.attr("cuda_architectures") = MUSE_ATTN_CUDA_ARCHITECTURES;
#endif
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
