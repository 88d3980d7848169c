// The Python extension module (nanobind), as jax_muse_attn/_ffi.py uses it:
//   registrations()        XLA platform name -> capsule of the verify-attention handler built for it
//   drafts_registrations() the same for the drafts target (jax_muse_attn_verify_attention_drafts)
//   clock_registrations()  the same for the benchmarks' device clock (jax_muse_attn_device_clock)
//   launch_plan(...)       the launch plan of a call on a described device (gpu/launch_plan.h)
//   gpu_device(ordinal)    the description of a GPU, from its runtime (builds with a GPU handler)
//   cuda_architectures     what the CUDA code was built for (CMake builds with the CUDA handler)
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "gpu/device_query.h"
#include "gpu/launch_plan.h"
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
  using namespace muse_attn::gpu;
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
  // The drafts target (ragged drafts, trees, lse).
  m.def("drafts_registrations", []() {
    nb::dict d;
    d["cpu"] = encapsulate_handler(MuseVerifyAttentionDraftsCpu);
#if defined(MUSE_ATTN_WITH_CUDA)
    d["CUDA"] = encapsulate_handler(MuseVerifyAttentionDraftsCuda);
#endif
#if defined(MUSE_ATTN_WITH_HIP)
    d["ROCM"] = encapsulate_handler(MuseVerifyAttentionDraftsRocm);
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
  m.def(
      "launch_plan",
      [](int head_dim, int tokens, int num_q_heads, int num_kv_heads, int num_requests, int pages,
         int window, const std::string& vendor, int multiprocessors, int compute_major,
         int warp_size, bool merge_can_wait, bool has_two_pairs, int num_splits,
         const std::string& overrides, bool kv_fp8, bool drafts, int amd_gfx) {
        const CallShape shape{head_dim, tokens, num_q_heads, num_kv_heads, num_requests, pages,
                              window, kv_fp8, drafts};
        Device device;
        if (vendor == "cpu") device.vendor = Vendor::kCpu;
        else if (vendor == "nvidia") device.vendor = Vendor::kNvidia;
        else if (vendor == "amd") device.vendor = Vendor::kAmd;
        else throw nb::value_error(("launch_plan: vendor must be cpu, nvidia or amd, got " + vendor).c_str());
        device.multiprocessors = multiprocessors;
        device.compute_major = compute_major;
        device.warp_size = warp_size;
        device.merge_can_wait = merge_can_wait;
        device.has_two_pairs = has_two_pairs;
        device.amd_gfx = amd_gfx;
        Overrides o;
        if (std::string err = parse_overrides(overrides, &o); !err.empty())
          throw nb::value_error(("MUSE_ATTN_LAUNCH: " + err).c_str());
        Plan plan;
        if (std::string err = plan_launch(shape, device, num_splits, o, &plan); !err.empty())
          throw nb::value_error(("launch_plan: " + err).c_str());
        nb::dict d;
        d["num_splits"] = plan.num_splits;
        d["split_kernel"] = kSplitKernelNames[static_cast<int>(plan.split_kernel)];
        d["merge_warps"] = plan.merge_warps;
        d["merge_pdl"] = plan.merge_pdl;
        d["merge_by_lane"] = plan.merge_by_lane;
        d["balance_segments"] = plan.balance_segments;
        return d;
      },
      nb::arg("head_dim"), nb::arg("tokens"), nb::arg("num_q_heads"), nb::arg("num_kv_heads"),
      nb::arg("num_requests"), nb::arg("pages"), nb::arg("window"), nb::arg("vendor"),
      nb::arg("multiprocessors"), nb::arg("compute_major"), nb::arg("warp_size"),
      nb::arg("merge_can_wait"), nb::arg("has_two_pairs"), nb::arg("num_splits"),
      nb::arg("overrides"), nb::arg("kv_fp8") = false, nb::arg("drafts") = false,
      nb::arg("amd_gfx") = 0);
  // The AMD plan's table (gpu/amd_targets.h), one dict a target, with the values it derives.
  m.def("amd_targets", []() {
    nb::list rows;
    for (const AmdTarget& t : kAmdTargets) {
      nb::dict d;
      d["gfx"] = t.gfx;
      d["name"] = t.name;
      d["cus"] = t.cus;
      d["lds_bytes"] = t.lds_bytes;
      d["lds_granule"] = t.lds_granule;
      d["vgprs_per_simd"] = t.vgprs_per_simd;
      d["vgpr_granule"] = t.vgpr_granule;
      d["max_waves_per_simd"] = t.max_waves_per_simd;
      d["simds_per_cu"] = t.simds_per_cu;
      d["split_vgprs_d64"] = t.split_vgprs_d64;
      d["split_vgprs_d128"] = t.split_vgprs_d128;
      d["split_ctas_per_cu_d64"] = t.split_ctas_per_cu_d64;
      d["split_ctas_per_cu_d128"] = t.split_ctas_per_cu_d128;
      d["cache_window_kv"] = t.cache_window_kv;
      d["split_lds_bytes_d64"] = amd_split_lds_bytes(64);
      d["split_lds_bytes_d128"] = amd_split_lds_bytes(128);
      rows.append(d);
    }
    return rows;
  });
  m.def("amd_gfx_number", [](const std::string& arch) { return amd_gfx_number(arch.c_str()); },
        nb::arg("arch"));
#if defined(MUSE_ATTN_WITH_CUDA) || defined(MUSE_ATTN_WITH_HIP)
  m.def(
      "gpu_device",
      [](int ordinal) {
        int f[kMuseNumDeviceFields] = {};
#if defined(MUSE_ATTN_WITH_CUDA)
        const int rc = MuseDescribeGpuCuda(ordinal, f);
        const char* vendor = "nvidia";
#else
        const int rc = MuseDescribeGpuRocm(ordinal, f);
        const char* vendor = "amd";
#endif
        if (rc != 0) throw nb::value_error(("gpu_device: the GPU runtime cannot describe device " +
                                            std::to_string(ordinal)).c_str());
        nb::dict d;
        d["vendor"] = vendor;
        d["multiprocessors"] = f[kMuseDeviceMultiprocessors];
        d["compute_major"] = f[kMuseDeviceComputeMajor];
        d["warp_size"] = f[kMuseDeviceWarpSize];
        d["merge_can_wait"] = f[kMuseDeviceMergeCanWait] != 0;
        d["has_two_pairs"] = f[kMuseDeviceHasTwoPairs] != 0;
        d["amd_gfx"] = f[kMuseDeviceAmdGfx];
        return d;
      },
      nb::arg("ordinal"));
#endif
#if defined(MUSE_ATTN_CUDA_ARCHITECTURES)
  // CMake's CUDA architectures of this build, comma-separated (gpu/cuda.cmake).
  m.attr("cuda_architectures") = MUSE_ATTN_CUDA_ARCHITECTURES;
#endif
}
