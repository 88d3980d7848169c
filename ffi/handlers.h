// The XLA FFI handlers this extension exports, one per platform. module.cc hands them to
// Python (registrations()), which registers them under one target name for "cpu", "CUDA" and
// "ROCM". All take the same operands, results and attributes (muse_attn/problem.h:
// bind_verify_attention).
#ifndef MUSE_ATTN_HANDLERS_H_
#define MUSE_ATTN_HANDLERS_H_

#include "xla/ffi/api/api.h"

XLA_FFI_DECLARE_HANDLER_SYMBOL(MuseVerifyAttentionCpu);
// The drafts target (problem.h: bind_verify_attention_drafts): ragged drafts, trees, lse.
XLA_FFI_DECLARE_HANDLER_SYMBOL(MuseVerifyAttentionDraftsCpu);
#if defined(MUSE_ATTN_WITH_CUDA)
XLA_FFI_DECLARE_HANDLER_SYMBOL(MuseVerifyAttentionCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MuseVerifyAttentionDraftsCuda);
#endif
#if defined(MUSE_ATTN_WITH_HIP)
XLA_FFI_DECLARE_HANDLER_SYMBOL(MuseVerifyAttentionRocm);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MuseVerifyAttentionDraftsRocm);
#endif

// The device clock for benchmarks (cpu/device_clock_cpu.cc, gpu/device_clock_gpu.cc): operand
// any array (ordering only), result uint32[2], the clock in ns (low, high).
XLA_FFI_DECLARE_HANDLER_SYMBOL(MuseDeviceClockCpu);
#if defined(MUSE_ATTN_WITH_CUDA)
XLA_FFI_DECLARE_HANDLER_SYMBOL(MuseDeviceClockCuda);
#endif
#if defined(MUSE_ATTN_WITH_HIP)
XLA_FFI_DECLARE_HANDLER_SYMBOL(MuseDeviceClockRocm);
#endif

#endif  // MUSE_ATTN_HANDLERS_H_
