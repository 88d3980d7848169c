// The CPU handler of verify attention. Not a fallback toy: it runs the GPU kernels' scheme
// step for step, so every CI run on a machine without a GPU exercises the same geometry.
//   split: for each (request, KV head) group and each segment of whole 64-key tiles
//          (muse_attn/geometry.h), an online softmax over the segment's tiles gives fp32
//          partials (m, l, o) for the group's NQ * qpk rows (muse_attn/softmax_state.h), o
//          rounded to bf16 as the GPU stores it (muse_attn/partials.h);
//   merge: each output row combines its group's segments with the max trick, divides by l
//          and is rounded to bf16.
// It reads only the memory the spec allows (README.md, Semantics): live block-table entries (muse_attn/page_table.h),
// key slots in [key_lo, seq_len) of valid blocks, nothing of a padding request.
#include <cstdint>
#include <cstring>
#include <vector>

#include "handlers.h"
#include "muse_attn/geometry.h"
#include "muse_attn/mask.h"
#include "muse_attn/page_table.h"
#include "muse_attn/partials.h"
#include "muse_attn/problem.h"
#include "muse_attn/softmax_state.h"
#include "xla/ffi/api/ffi.h"

namespace muse_attn {
namespace {

float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t f32_to_bf16(float f) {  // round to nearest even, as the GPU's conversions do
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

struct Inputs {
  const uint16_t* q;         // [NQ*R, Hq, D]
  const uint16_t* kv;        // [blocks, Hkv, 16, 2D]
  const int32_t* table;      // [>=R, P]
  uint16_t* part_o;          // [groups, S, rows, D] bf16
  float* part_ml;            // [groups, S, rows, 2]
};

// One segment of group (r, kvh): tiles [t0, t1) -> partials of the group's rows.
void split_segment(const Problem& p, const Inputs& in, const RequestGeometry& g, int r, int kvh,
                   int seg) {
  int t0, t1;
  segment_tiles(g, seg, &t0, &t1);
  const int rows = p.rows(), d_dim = p.head_dim, qpk = p.qpk;
  const QueryLayout ql{p.tokens, p.num_q_heads, FastDiv(qpk), d_dim};
  const int32_t* table_row = in.table + r * p.table_row_stride;

  std::vector<float> q(rows * d_dim), k(kTileKeys * d_dim), v(kTileKeys * d_dim);
  std::vector<float> o(rows * d_dim, 0.0f), s(kTileKeys);
  std::vector<SoftmaxState> st(rows, SoftmaxState::empty());
  for (int row = 0; row < rows; ++row) {
    const uint16_t* src = in.q + ql.row_offset(r, kvh, row);
    for (int d = 0; d < d_dim; ++d) q[row * d_dim + d] = bf16_to_f32(src[d]);
  }

  bool present[kTileKeys];
  const LivePages live = LivePages::of(g, p.num_blocks);
  int whole_lo, whole_hi;  // tiles every token sees whole: no mask there (as on the GPU)
  whole_tiles(g.ctx, p.tokens, p.window, &whole_lo, &whole_hi);
  for (int tile = t0; tile < t1; ++tile) {
    // Stage the tile: keys of valid blocks inside [key_lo, seq_len); the rest zero and absent.
    bool all_pages = true;
    for (int pg = 0; pg < kPagesPerTile; ++pg) {
      const int page = tile * kPagesPerTile + pg;
      const int32_t block = live.lookup(table_row, page);
      all_pages &= block >= 0;
      for (int slot = 0; slot < kPageSize; ++slot) {
        const int i = pg * kPageSize + slot, key = page * kPageSize + slot;
        present[i] = block >= 0 && key >= g.key_lo && key < g.seq_len;
        if (!present[i]) {
          std::fill_n(&k[i * d_dim], d_dim, 0.0f);
          std::fill_n(&v[i * d_dim], d_dim, 0.0f);
          continue;
        }
        const uint16_t* kv_row =
            in.kv + ((int64_t{block} * p.num_kv_heads + kvh) * kPageSize + slot) * 2 * d_dim;
        for (int d = 0; d < d_dim; ++d) {
          k[i * d_dim + d] = bf16_to_f32(kv_row[d]);
          v[i * d_dim + d] = bf16_to_f32(kv_row[d_dim + d]);
        }
      }
    }
    // A whole tile with every page present has every key present and visible to every row
    // (keys of [key_lo, seq_len) by construction): the GPU kernel skips the mask there, and so
    // does this handler, so the tests check whole_tiles() against the oracle.
    const bool whole = all_pages && tile >= whole_lo && tile < whole_hi;
    for (int row = 0; row < rows; ++row) {
      const int qpos = token_position(g, row / qpk);
      float block_max = neg_inf();
      for (int i = 0; i < kTileKeys; ++i) {
        const int key = tile * kTileKeys + i;
        if (!whole && (!present[i] || !key_is_visible(key, qpos, p.window))) {
          s[i] = neg_inf();
          continue;
        }
        float dot = 0.0f;
        for (int d = 0; d < d_dim; ++d) dot += q[row * d_dim + d] * k[i * d_dim + d];
        s[i] = dot * p.scale_log2;
        block_max = s[i] > block_max ? s[i] : block_max;
      }
      SoftmaxState& state = st[row];
      const float factor = state.absorb_max(block_max);
      if (block_max == neg_inf()) continue;  // nothing visible in this tile
      float* o_row = &o[row * d_dim];
      for (int d = 0; d < d_dim; ++d) o_row[d] *= factor;
      for (int i = 0; i < kTileKeys; ++i) {
        if (s[i] == neg_inf()) continue;
        const float pr = exp2_f32(s[i] - state.m);
        state.l += pr;
        const float pb = round_bf16(pr);  // P enters P.V as bf16, as on the matrix units
        for (int d = 0; d < d_dim; ++d) o_row[d] += pb * v[i * d_dim + d];
      }
    }
  }
  const PartialsLayout lay = p.partials();
  const int group = r * p.num_kv_heads + kvh;
  for (int row = 0; row < rows; ++row) {
    uint16_t* po = in.part_o + lay.o_offset(group, seg, row);
    for (int d = 0; d < d_dim; ++d) po[d] = f32_to_bf16(o[row * d_dim + d]);  // as the GPU stores it
    in.part_ml[lay.ml_offset(group, seg, row)] = st[row].m;
    in.part_ml[lay.ml_offset(group, seg, row) + 1] = st[row].l;
  }
}

// Combines the group's segments into its output rows (bf16).
void merge_group(const Problem& p, const Inputs& in, const RequestGeometry& g, int r, int kvh,
                 uint16_t* out) {
  const PartialsLayout lay = p.partials();
  const int group = r * p.num_kv_heads + kvh, d_dim = p.head_dim;
  const QueryLayout ql{p.tokens, p.num_q_heads, FastDiv(p.qpk), d_dim};
  std::vector<float> acc(d_dim);
  for (int row = 0; row < p.rows(); ++row) {
    MergeState ms{neg_inf()};
    for (int seg = 0; seg < g.num_segments; ++seg) {
      const float m = in.part_ml[lay.ml_offset(group, seg, row)];
      ms.m_max = m > ms.m_max ? m : ms.m_max;
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    float l_sum = 0.0f;
    if (ms.m_max != neg_inf()) {
      for (int seg = 0; seg < g.num_segments; ++seg) {
        const float w = ms.weight(in.part_ml[lay.ml_offset(group, seg, row)]);
        if (w == 0.0f) continue;
        l_sum += w * in.part_ml[lay.ml_offset(group, seg, row) + 1];
        const uint16_t* po = in.part_o + lay.o_offset(group, seg, row);
        for (int d = 0; d < d_dim; ++d) acc[d] += w * bf16_to_f32(po[d]);
      }
    }
    const float inv = safe_inverse(l_sum);
    uint16_t* dst = out + ql.row_offset(r, kvh, row);
    for (int d = 0; d < d_dim; ++d) dst[d] = f32_to_bf16(acc[d] * inv);
  }
}

ffi::Error verify_attention_cpu(ffi::BufferR3<ffi::BF16> q,          // [NQ*R, Hq, D]
                                ffi::BufferR4<ffi::BF16> kv_cache,   // [blocks, Hkv, 16, 2D]
                                ffi::BufferR2<ffi::S32> block_table,  // [>=R, P]
                                ffi::BufferR1<ffi::S32> seq_lens,     // [>=R]
                                ffi::BufferR0<ffi::S32> num_reqs,     // real requests
                                ffi::ResultBufferR3<ffi::BF16> out,   // like q
                                ffi::ResultBufferR4<ffi::BF16> part_o,  // [R*Hkv, S, rows, D]
                                ffi::ResultBufferR4<ffi::F32> part_ml,  // [R*Hkv, S, rows, 2]
                                float scale, int32_t window, int32_t tokens,
                                int32_t num_splits, int32_t num_reqs_static,
                                int32_t /*split_kernel*/, int32_t /*merge_warps*/,
                                int32_t /*merge_pdl*/, int32_t /*merge_by_lane*/) {
  Problem p{};
  ffi::Error status = make_problem(q.dimensions(), kv_cache.dimensions(), block_table.dimensions(),
                              seq_lens.dimensions(), part_o->dimensions(),
                              part_ml->dimensions(), scale, window, tokens, num_splits,
                              num_reqs_static, &p);
  if (status.failure()) return status;
  const Inputs in{q.typed_data(), kv_cache.typed_data(), block_table.typed_data(),
                  part_o->typed_data(), part_ml->typed_data()};
  // Requests at or past num_reqs are padding: no key, nothing read, zero rows.
  const int real = real_requests(p.num_reqs_static, num_reqs.typed_data(), p.num_requests);
  for (int r = 0; r < p.num_requests; ++r) {
    const int raw_len = r < real ? seq_lens.typed_data()[r] : 0;
    const RequestGeometry g =
        request_geometry(raw_len, p.capacity(), p.tokens, p.window, p.num_splits);
    for (int kvh = 0; kvh < p.num_kv_heads; ++kvh) {
      for (int seg = 0; seg < g.num_segments; ++seg) split_segment(p, in, g, r, kvh, seg);
      merge_group(p, in, g, r, kvh, out->typed_data());
    }
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace muse_attn

XLA_FFI_DEFINE_HANDLER_SYMBOL(MuseVerifyAttentionCpu, muse_attn::verify_attention_cpu,
                              muse_attn::bind_verify_attention(xla::ffi::Ffi::Bind()));
