// A probe of XLA's FFI record stage (jaxlib >= 0.11: xla/ffi/api/record_c_api.h), kept out of the
// product: does a handler that records its kernel as a node of XLA's own command buffer, with
// `uses_pdl`, start that kernel as a programmatic dependent of the kernel before it (what
// benchmarks/experiments/split_pdl.patch, in git at b1e199d, needed to act through JAX), and what
// does it save?
//
// One kernel, y = x + 1 over n floats, its first instruction griddepcontrol.wait (a no-op for a
// plain launch). Two FFI handler sets over it (probe.py registers them as two targets and calls
// the second with uses_pdl 0 and 1):
//   ProbeExecute: the execute stage only; XLA traces it into a child graph (as the product does).
//   ProbeRecord:  execute + record; the record stage creates / updates one launch command through
//                 the record extension, `uses_pdl` from the attribute of the same name.
// The record stage needs the kernel as a binary: probe.py compiles this file a second time with
// -cubin and hands the bytes over through probe_set_cubin() before the first call.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "xla/ffi/api/ffi.h"
#include "xla/ffi/api/record_c_api.h"

namespace ffi = xla::ffi;

extern "C" __global__ void probe_add(const float* x, float* y, int32_t n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}

#ifndef PROBE_KERNEL_ONLY
namespace {

std::string g_cubin;  // the kernel's binary for the record stage (probe_set_cubin)
int64_t g_creates = 0, g_updates = 0;  // record-stage calls (probe_record_calls)
int64_t g_executes = 0;  // execute-stage calls (probe_record_calls(2)): one a capture under
                         // command buffers, one a step without
constexpr int kThreads = 128;

int32_t blocks_for(int64_t n) { return static_cast<int32_t>((n + kThreads - 1) / kThreads); }

ffi::Error execute(cudaStream_t stream, ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y,
                   int32_t /*uses_pdl: the record stage's*/) {
  ++g_executes;
  const int32_t n = static_cast<int32_t>(x.element_count());
  probe_add<<<blocks_for(n), kThreads, 0, stream>>>(x.typed_data(), y->typed_data(), n);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return ffi::Error::Internal(cudaGetErrorString(err));
  return ffi::Error::Success();
}

// The record extension, decoded as the raw frame (record_api.h's C++ wrapper needs an
// absl-style error policy; the C struct is all the probe needs).
struct RecordFrame {
  const XLA_FFI_Api* api;
  const XLA_FFI_RecordFrame* frame;
};
struct RecordExt {
  using Type = RecordFrame;
  using CExtension = XLA_FFI_Record_Extension;
  static constexpr auto kName = "RecordExtension";
  static constexpr int32_t kExtensionType = XLA_FFI_Extension_Record;
  static constexpr int32_t kMajorVersion = XLA_FFI_Extension_Record_MajorVersion;
  static constexpr int32_t kMinorVersion = XLA_FFI_Extension_Record_MinorVersion;
  static Type Create(const XLA_FFI_Api* api, const CExtension* ext) {
    return RecordFrame{api, ext->record_frame};
  }
};

ffi::Error take(const XLA_FFI_Api* api, XLA_FFI_Error* err, const char* what) {
  if (err == nullptr) return ffi::Error::Success();
  std::string msg = std::string(what) + ": " + ffi::internal::GetErrorMessage(api, err);
  ffi::internal::DestroyError(api, err);
  return ffi::Error::Internal(msg);
}

ffi::Error record(RecordFrame rf, ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y,
                  int32_t uses_pdl) {
  const XLA_FFI_RecordFrame* f = rf.frame;
  if (g_cubin.empty()) return ffi::Error::Internal("probe_set_cubin was not called");
  const int32_t n = static_cast<int32_t>(x.element_count());
  void* xp = x.untyped_data();
  void* yp = y->untyped_data();
  XLA_FFI_KernelArg raw[3] = {
      {xp, 0, XLA_FFI_KernelArgType_DevicePtr},
      {yp, 0, XLA_FFI_KernelArgType_DevicePtr},
      {&n, sizeof(n), XLA_FFI_KernelArgType_HostValue},
  };
  XLA_FFI_KernelArgs args{raw, 3};
  if (f->action == XLA_FFI_RecordAction_Create) {
    ++g_creates;
    XLA_FFI_LaunchDims dims{{blocks_for(n), 1, 1}, {kThreads, 1, 1}, {0, 0, 0}};
    const XLA_FFI_Command* cmd = nullptr;
    ffi::Error e = take(rf.api,
                        f->api->create_launch(f->record_ctx, "probe_add", g_cubin.data(),
                                              static_cast<int64_t>(g_cubin.size()),
                                              XLA_FFI_SourceFormat_CUBIN, dims, 0, uses_pdl,
                                              &args, nullptr, 0, &cmd),
                        "create_launch");
    if (e.failure()) return e;
    if (*f->num_commands >= f->max_commands) return ffi::Error::Internal("no room for a command");
    f->commands[(*f->num_commands)++] = cmd;
    return ffi::Error::Success();
  }
  ++g_updates;
  if (*f->num_commands < 1) return ffi::Error::Internal("update without a recorded command");
  return take(rf.api, f->api->update_launch(f->record_ctx, f->commands[0], &args),
              "update_launch");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ProbeExecute, execute,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int32_t>("uses_pdl"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(ProbeRecord, record,
                              ffi::Ffi::BindRecord()
                                  .Ctx<ffi::Extension<RecordExt>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int32_t>("uses_pdl"),
                              {ffi::Traits::kCmdBufferCompatible});

extern "C" void probe_set_cubin(const char* data, int64_t size) { g_cubin.assign(data, size); }
// 0: record creates, 1: record updates, 2: execute calls.
extern "C" int64_t probe_record_calls(int32_t which) {
  return which == 0 ? g_creates : which == 1 ? g_updates : g_executes;
}
#endif  // PROBE_KERNEL_ONLY
