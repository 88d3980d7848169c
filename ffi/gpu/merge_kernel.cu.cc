// The merge: for each output row of each (request, KV head) group, combine the group's
// segment partials (m, l, o) with the max trick, divide by l and write bf16. One thread per
// (row, 4 consecutive d). Rows that saw no key (padding requests, qpos < 0, absent blocks) are
// written as exact zeros, so the whole output is defined whatever the split wrote.
#include <cstdint>

#include "gpu/kernels.h"
#include "gpu/vendor.h"
#include "muse_attn/geometry.h"
#include "muse_attn/partials.h"
#include "muse_attn/softmax_state.h"

namespace muse_attn::gpu {
namespace {

constexpr int kMergeThreads = 256;

template <int D>
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(VerifyParams p) {
  constexpr int kQuads = D / 4;
  constexpr int kRowsPerCta = kMergeThreads / kQuads;
  const int group = blockIdx.y;
  const int row = blockIdx.x * kRowsPerCta + threadIdx.x / kQuads;
  const int dq = threadIdx.x % kQuads;
  if (row >= p.rows) return;
  const int req = group / p.num_kv_heads;
  const int kvh = group % p.num_kv_heads;
  const int real = min_i(max_i(*p.num_reqs, 0), p.num_requests);
  const int raw_len = req < real ? p.seq_lens[req] : 0;
  const RequestGeometry g =
      request_geometry(raw_len, p.pages * kPageSize, p.tokens, p.window, p.num_splits);
  const PartialsLayout lay{p.num_splits, p.rows, D};

  MergeState ms{neg_inf()};
  for (int seg = 0; seg < g.num_segments; ++seg)
    ms.m_max = fmaxf(ms.m_max, p.part_ml[lay.ml_offset(group, seg, row)]);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float l_sum = 0.0f;
  if (ms.m_max != neg_inf()) {
    for (int seg = 0; seg < g.num_segments; ++seg) {
      const float2 ml = *reinterpret_cast<const float2*>(p.part_ml + lay.ml_offset(group, seg, row));
      const float w = ml.x == neg_inf() ? 0.0f : fast_exp2(ml.x - ms.m_max);
      if (w == 0.0f) continue;
      const float4 o = *reinterpret_cast<const float4*>(p.part_o + lay.o_offset(group, seg, row) + 4 * dq);
      l_sum += w * ml.y;
      acc.x += w * o.x;
      acc.y += w * o.y;
      acc.z += w * o.z;
      acc.w += w * o.w;
    }
  }
  const float inv = safe_inverse(l_sum);
  const int tok = row / p.qpk, head = kvh * p.qpk + row % p.qpk;
  uint16_t* dst = p.out + ((int64_t{p.tokens} * req + tok) * p.num_q_heads + head) * D + 4 * dq;
  *reinterpret_cast<uint2*>(dst) =
      make_uint2(pack_bf16x2(acc.x * inv, acc.y * inv), pack_bf16x2(acc.z * inv, acc.w * inv));
}

template <int D>
gpuError_t launch_merge_d(const VerifyParams& p, gpuStream_t stream) {
  constexpr int kRowsPerCta = kMergeThreads / (D / 4);
  const dim3 grid((p.rows + kRowsPerCta - 1) / kRowsPerCta, p.num_requests * p.num_kv_heads);
  merge_kernel<D><<<grid, kMergeThreads, 0, stream>>>(p);
  return gpuGetLastError();
}

}  // namespace

gpuError_t launch_merge(const VerifyParams& p, gpuStream_t stream) {
  return p.head_dim == 64 ? launch_merge_d<64>(p, stream) : launch_merge_d<128>(p, stream);
}

}  // namespace muse_attn::gpu
