// One kernel a helper of gpu/amd_ops.h, compiled for gfx942 and gfx950 by tests/test_amd_ops.py,
// which reads the instructions each lowers to.
#include "gpu/amd_ops.h"

using namespace muse_attn::gpu;

extern "C" __global__ void isa_lds_read_tr_b16(uint2* out, const uint32_t* off) {
  MUSE_DYNAMIC_SHARED(smem);
  out[threadIdx.x] = amd::lds_read_tr_b16(smem, off[threadIdx.x]);
}
extern "C" __global__ void isa_permlane16_swap(uint32_t* out, const uint32_t* in) {
  const amd::SwapPair r = amd::permlane_swap<16>(in[threadIdx.x], in[threadIdx.x + 64]);
  out[threadIdx.x] = r.first ^ (r.second << 1);
}
extern "C" __global__ void isa_permlane32_swap(uint32_t* out, const uint32_t* in) {
  const amd::SwapPair r = amd::permlane_swap<32>(in[threadIdx.x], in[threadIdx.x + 64]);
  out[threadIdx.x] = r.first ^ (r.second << 1);
}
extern "C" __global__ void isa_cvt_pk_bf16_f32(uint32_t* out, const float* in) {
  out[threadIdx.x] = amd::cvt_pk_bf16_f32(in[threadIdx.x], in[threadIdx.x + 64]);
}
extern "C" __global__ void isa_row_reduce16(float* out, const float* in) {
  out[threadIdx.x] = amd::row_reduce16(in[threadIdx.x], [](float a, float b) { return fmaxf(a, b); });
}
extern "C" __global__ void isa_row_shr1(uint32_t* out, const uint32_t* in) {
  out[threadIdx.x] = amd::dpp<amd::dpp_row_shr(1)>(in[threadIdx.x + 64], in[threadIdx.x]);
}
extern "C" __global__ void isa_load_nontemporal(amd::u32x4* out, const amd::u32x4* in) {
  out[threadIdx.x] = amd::global_load16<amd::CachePolicy::kNonTemporal>(in + threadIdx.x);
}
extern "C" __global__ void isa_load_cached(amd::u32x4* out, const amd::u32x4* in) {
  out[threadIdx.x] = amd::global_load16<amd::CachePolicy::kCached>(in + threadIdx.x);
}
extern "C" __global__ void isa_buffer_load16(amd::u32x4* out, const char* page, uint32_t first) {
  const uint32_t at = 16 * threadIdx.x;  // a predicated load without a branch
  const uint32_t offset = at >= first ? at : amd::kOutOfRange;
  out[threadIdx.x] = amd::buffer_load16<amd::CachePolicy::kNonTemporal>(page, 4096, offset);
}
extern "C" __global__ void isa_load_invariant(int* out, const int* table, int i) {
  out[threadIdx.x] = amd::load_invariant(table + i);  // the same address on every lane
}
extern "C" __global__ void isa_cvt_pk_f32_fp8(float* out, const uint32_t* in) {
  const amd::F32Pair r = amd::cvt_pk_f32_fp8<true>(in[threadIdx.x]);
  out[threadIdx.x] = r.lo + r.hi;
}
