// The CPU handler of verify attention. Not a fallback toy: it runs the GPU kernels' scheme
// step for step, so every CI run on a machine without a GPU exercises the same geometry.
//   split: for each (request, KV head) group and each segment of whole 64-key tiles
//          (muse_attn/geometry.h), an online softmax over the segment's tiles gives fp32
//          partials (m, l, o) for the group's NQ * qpk rows (muse_attn/softmax_state.h), o
//          rounded to bf16 as the GPU stores it (muse_attn/partials.h);
//   merge: each output row combines its group's segments with the max trick, divides by l
//          and is rounded to bf16.
// It reads only the memory the spec allows (README.md, Semantics): live block-table entries
// (muse_attn/page_table.h), key slots in [key_lo, seq_len) of valid blocks (and, with per-token
// FP8 scales, those slots' scales), nothing of a padding request.
// An FP8 cache is dequantized while a tile is staged, by the rule of muse_attn/fp8.h
// (bf16(fp32(scale * decode(x)))); from there the computation is the bf16 cache's.
//
// Speed: the (group, segment) units run in parallel on XLA's intra-op thread pool, the last unit
// of a group to finish merges it; inside a unit the loops run over 64 keys or over D with fixed
// trip counts, so the compiler vectorizes them (x86-64: an AVX2 + FMA copy where the CPU has it).
// Each unit is computed by one thread in a fixed order: the same bits whatever the thread count.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "handlers.h"
#include "muse_attn/fp8.h"
#include "muse_attn/geometry.h"
#include "muse_attn/mask.h"
#include "muse_attn/page_table.h"
#include "muse_attn/partials.h"
#include "muse_attn/problem.h"
#include "muse_attn/softmax_state.h"
#include "xla/ffi/api/ffi.h"

// On x86-64 the split is compiled twice, for the baseline ISA and for AVX2 + FMA, and the handler
// picks one by the CPU it runs on, so one wheel runs everywhere and fast where it can. The
// helpers are forced inline so that each copy gets them in its own ISA.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MUSE_CPU_AVX2_COPY 1
#define MUSE_CPU_AVX2 __attribute__((target("avx2,fma")))
#else
#define MUSE_CPU_AVX2_COPY 0
#endif
#if defined(__GNUC__) || defined(__clang__)
#define MUSE_CPU_INLINE inline __attribute__((always_inline))
#else
#define MUSE_CPU_INLINE inline
#endif

namespace muse_attn {
namespace {

// ------------------------------------------------------------------------ scalar conversions
// Branch-free, so that loops over them vectorize.

MUSE_CPU_INLINE uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

MUSE_CPU_INLINE float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

MUSE_CPU_INLINE float bf16_to_f32(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

// Round to nearest even, as the GPU's conversions do; NaN stays NaN.
MUSE_CPU_INLINE uint16_t f32_to_bf16(float f) {
  const uint32_t b = bits_of(f);
  const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((b & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : rounded);
}

MUSE_CPU_INLINE float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// 2^x for the softmax's x = s - m <= 0, in a form a loop vectorizes (std::exp2 is a library
// call): Cephes' exp2f polynomial on [-0.5, 0.5], within 1e-7 relative of exp2 on [-126, 0].
// Below -126 it flushes to 0 (as the GPU's ex2.approx.ftz does), so -inf gives exactly 0; NaN
// stays NaN.
MUSE_CPU_INLINE float exp2_vec(float x) {
  const float above = x < -126.0f ? -126.0f : x;
  const float xc = above > 127.0f ? 127.0f : above;
  const float kRound = 12582912.0f;  // 1.5 * 2^23: xc + kRound rounds xc to an integer n
  const float t = xc + kRound;
  const float f = xc - (t - kRound);  // [-0.5, 0.5]
  float p = 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  const uint32_t two_n = (bits_of(t) - bits_of(kRound) + 127u) << 23;  // 2^n, n in [-126, 127]
  const float r = p * float_of(two_n);
  return x < -126.0f ? 0.0f : r;
}

// ------------------------------------------------------------------------ buffers

struct Inputs {
  const uint16_t* q;         // [NQ*R, Hq, D]
  const void* kv;            // [blocks, Hkv, 16, 2D]: bf16, or FP8 bytes
  const int32_t* table;      // [>=R, P]
  uint16_t* part_o;          // [groups, S, rows, D] bf16
  float* part_ml;            // [groups, S, rows, 2]
  uint16_t* out;             // like q
  // FP8: per-token scales [blocks, Hkv, 16], or (k_scale == nullptr) per tensor: k_lut[b] /
  // v_lut[b], the dequantized value of byte b.
  const float* k_scale;
  const float* v_scale;
  const float* k_lut;
  const float* v_lut;
  float* lse;  // [NQ*R, Hq], or nullptr when not returned
};

// One request's work: its key range and segments, the drafts it verifies and the tiles every
// computed row sees whole (no mask there).
struct RequestWork {
  RequestGeometry g;      // built for `count` tokens: g.ctx = seq_len - count
  int count;              // drafts verified: rows of tokens >= count are not computed
  int whole_lo, whole_hi;
  const DraftRow* tree;   // a tree's rows [NQ] (draft_key_is_visible), or nullptr for a chain
  uint32_t read_bits;     // drafts whose slots are read (draft_slot_is_read): ~0u for a chain
};

// The dequantized values of the 256 bytes with one scale (the rule of muse_attn/fp8.h, as
// fp32 values of bf16s): a per-tensor scale's table, built once a call.
void dequantize_table(float scale, bool fnuz, float* lut) {
  for (uint32_t b = 0; b < 256; ++b)
    lut[b] = float_of(fp8_dequantize_bf16(b, scale, fnuz) << 16);
}

// One thread's fp32 working set for a segment, kept across units and calls (it only grows), so
// the hot loops allocate nothing. Each array starts on a 64-byte line.
class Scratch {
 public:
  float* q;   // [rows, D]   the group's query rows
  float* kt;  // [D, 64]     the tile's keys, transposed: a row's 64 scores are one loop
  float* v;   // [64, D]     the tile's values: P.V is one loop over D
  float* o;   // [rows, D]   unnormalized output rows
  bool present[kTileKeys];   // key i of the tile was staged (else its K and V are zero)
  SoftmaxState* state;       // [rows]

  void fit(int rows, int d) {
    const size_t row_floats = round_up(static_cast<size_t>(rows) * d);
    const size_t tile_floats = round_up(static_cast<size_t>(kTileKeys) * d);
    const size_t need = 2 * row_floats + 2 * tile_floats + kLineFloats;
    if (buf_.size() < need) buf_.resize(need);
    if (states_.size() < static_cast<size_t>(rows)) states_.resize(rows);
    float* base = buf_.data();
    base += (kLineFloats - reinterpret_cast<uintptr_t>(base) / sizeof(float) % kLineFloats) %
            kLineFloats;
    q = base;
    kt = q + row_floats;
    v = kt + tile_floats;
    o = v + tile_floats;
    state = states_.data();
  }

 private:
  static constexpr size_t kLineFloats = 64 / sizeof(float);
  static size_t round_up(size_t n) { return (n + kLineFloats - 1) / kLineFloats * kLineFloats; }
  std::vector<float> buf_;
  std::vector<SoftmaxState> states_;
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// ------------------------------------------------------------------------ split: one segment

template <int D>
MUSE_CPU_INLINE void load_query_rows(const Problem& p, const Inputs& in, int r, int kvh,
                                     float* q) {
  const QueryLayout ql{p.tokens, p.num_q_heads, FastDiv(p.qpk), D};
  for (int row = 0; row < p.rows(); ++row) {
    const uint16_t* src = in.q + ql.row_offset(r, kvh, row);
    for (int d = 0; d < D; ++d) q[row * D + d] = bf16_to_f32(src[d]);
  }
}

// One present key's K and V into the tile, as fp32 values of bf16s. `slot_index`: the key's
// (block, KV head, slot) in the cache, kv row and scale alike.
template <int D, KvFormat F>
MUSE_CPU_INLINE void stage_key(const Inputs& in, int64_t slot_index, int i, Scratch& sc) {
  if constexpr (F == KvFormat::kBf16) {
    const uint16_t* kv_row = static_cast<const uint16_t*>(in.kv) + slot_index * 2 * D;
    for (int d = 0; d < D; ++d) sc.kt[d * kTileKeys + i] = bf16_to_f32(kv_row[d]);
    for (int d = 0; d < D; ++d) sc.v[i * D + d] = bf16_to_f32(kv_row[D + d]);
  } else {
    const uint8_t* kv_row = static_cast<const uint8_t*>(in.kv) + slot_index * 2 * D;
    if (in.k_scale == nullptr) {
      for (int d = 0; d < D; ++d) sc.kt[d * kTileKeys + i] = in.k_lut[kv_row[d]];
      for (int d = 0; d < D; ++d) sc.v[i * D + d] = in.v_lut[kv_row[D + d]];
      return;
    }
    // Per-token scales are read for present keys only (an unread one may be NaN). The rule's
    // arithmetic vectorizes (a table lookup a byte would not).
    constexpr bool fnuz = F == KvFormat::kFp8E4m3fnuz;
    const float ks = in.k_scale[slot_index], vs = in.v_scale[slot_index];
    for (int d = 0; d < D; ++d)
      sc.kt[d * kTileKeys + i] = float_of(fp8_dequantize_bf16(kv_row[d], ks, fnuz) << 16);
    for (int d = 0; d < D; ++d)
      sc.v[i * D + d] = float_of(fp8_dequantize_bf16(kv_row[D + d], vs, fnuz) << 16);
  }
}

// Stages one tile in fp32: keys of valid blocks inside [key_lo, seq_len) (of a tree, the draft
// slots some row sees); the other keys zero and absent, their memory never touched. Returns
// whether every page of the tile names a block.
template <int D, KvFormat F>
MUSE_CPU_INLINE bool stage_tile(const Problem& p, const Inputs& in, const RequestGeometry& g,
                                const LivePages& live, const int32_t* table_row, int kvh,
                                int tile, uint32_t read_bits, Scratch& sc) {
  bool all_pages = true;
  for (int pg = 0; pg < kPagesPerTile; ++pg) {
    const int page = tile * kPagesPerTile + pg;
    const int32_t block = live.lookup(table_row, page);
    all_pages &= block >= 0;
    for (int slot = 0; slot < kPageSize; ++slot) {
      const int i = pg * kPageSize + slot, key = page * kPageSize + slot;
      sc.present[i] = block >= 0 && key >= g.key_lo && key < g.seq_len &&
                      draft_slot_is_read(key, g.ctx, read_bits);
      if (!sc.present[i]) {
        for (int d = 0; d < D; ++d) sc.kt[d * kTileKeys + i] = 0.0f;
        for (int d = 0; d < D; ++d) sc.v[i * D + d] = 0.0f;
        continue;
      }
      stage_key<D, F>(in, (int64_t{block} * p.num_kv_heads + kvh) * kPageSize + slot, i, sc);
    }
  }
  return all_pages;
}

// s[i] = (q . K[i]) * scale * log2(e) for the tile's 64 keys; the 64 sums are the vector lanes.
template <int D>
MUSE_CPU_INLINE void row_scores(const float* q_row, const float* kt, float scale_log2,
                                float* s) {
  float acc[kTileKeys] = {};
  for (int d = 0; d < D; ++d) {
    const float qd = q_row[d];
    for (int i = 0; i < kTileKeys; ++i) acc[i] += qd * kt[d * kTileKeys + i];
  }
  for (int i = 0; i < kTileKeys; ++i) s[i] = acc[i] * scale_log2;
}

// Scores of keys the row does not see become -inf: absent keys, keys past its position, keys
// before its window.
MUSE_CPU_INLINE void mask_row(const bool* present, int first_key, int qpos, int window,
                              float* s) {
  for (int i = 0; i < kTileKeys; ++i) {
    const bool visible = present[i] && key_is_visible(first_key + i, qpos, window);
    const float score = s[i];
    s[i] = visible ? score : neg_inf();
  }
}

// The same for a tree row: context keys by the window, draft keys by the row's mask bits.
MUSE_CPU_INLINE void mask_tree_row(const bool* present, int first_key, const DraftRow& row,
                                   int ctx, float* s) {
  for (int i = 0; i < kTileKeys; ++i) {
    const bool visible = present[i] && draft_key_is_visible(row, ctx, first_key + i);
    const float score = s[i];
    s[i] = visible ? score : neg_inf();
  }
}

// Max and sum over a tile lane by lane, then over the lanes, in a fixed order: vectorizable
// without reassociation (no -ffast-math) and the same bits every call.
constexpr int kLanes = 8;

MUSE_CPU_INLINE float tile_max(const float* s) {
  float lane[kLanes];
  for (int j = 0; j < kLanes; ++j) lane[j] = neg_inf();
  for (int i = 0; i < kTileKeys; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] = s[i + j] > lane[j] ? s[i + j] : lane[j];
  float m = lane[0];
  for (int j = 1; j < kLanes; ++j) m = lane[j] > m ? lane[j] : m;
  return m;
}

// p = 2^(s - m) of the tile's keys (0 where masked): returns their sum (for l) and leaves p
// rounded to bf16 in pb, as P enters P.V on the GPU's matrix units.
MUSE_CPU_INLINE float tile_probabilities(const float* s, float m, float* pb) {
  float lane[kLanes] = {};
  for (int i = 0; i < kTileKeys; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float pr = exp2_vec(s[i + j] - m);
      lane[j] += pr;
      pb[i + j] = round_bf16(pr);
    }
  float sum = 0.0f;
  for (int j = 0; j < kLanes; ++j) sum += lane[j];
  return sum;
}

// o_row = o_row * factor + sum_i pb[i] * V[i], in 64-column chunks that stay in registers. A
// masked key adds 0 * V[i]: V is finite there (an absent key's V is staged as zero).
template <int D>
MUSE_CPU_INLINE void accumulate_pv(const float* pb, const float* v, float factor, float* o_row) {
  constexpr int kChunk = D < 64 ? D : 64;
  for (int d0 = 0; d0 < D; d0 += kChunk) {
    float acc[kChunk] = {};
    for (int i = 0; i < kTileKeys; ++i) {
      const float w = pb[i];
      for (int d = 0; d < kChunk; ++d) acc[d] += w * v[i * D + d0 + d];
    }
    for (int d = 0; d < kChunk; ++d) o_row[d0 + d] = o_row[d0 + d] * factor + acc[d];
  }
}

template <int D>
MUSE_CPU_INLINE void store_partials(const Problem& p, const Inputs& in, int64_t slot,
                                    const Scratch& sc) {
  const PartialsLayout lay = p.partials();
  for (int row = 0; row < p.rows(); ++row) {
    uint16_t* po = in.part_o + lay.o_offset(slot, row);
    for (int d = 0; d < D; ++d) po[d] = f32_to_bf16(sc.o[row * D + d]);  // as the GPU stores it
    in.part_ml[lay.ml_offset(slot, row)] = sc.state[row].m;
    in.part_ml[lay.ml_offset(slot, row) + 1] = sc.state[row].l;
  }
}

// The slot of segment 0 of group (r, kvh) (partials.h).
int64_t first_slot(const Problem& p, const RequestGeometry& g, int r, int kvh) {
  return p.partials().first_slot(r, kvh, p.num_kv_heads, p.num_requests, g.pool_first);
}

// One segment of group (r, kvh): tiles [t0, t1) -> partials of the group's rows.
template <int D, KvFormat F>
MUSE_CPU_INLINE void split_segment(const Problem& p, const Inputs& in, const RequestWork& w,
                                   int r, int kvh, int seg, Scratch& sc) {
  const RequestGeometry& g = w.g;
  int t0, t1;
  segment_tiles(g, seg, &t0, &t1);
  const int rows = p.rows();
  load_query_rows<D>(p, in, r, kvh, sc.q);
  std::fill_n(sc.o, rows * D, 0.0f);
  std::fill_n(sc.state, rows, SoftmaxState::empty());

  const int32_t* table_row = in.table + r * p.table_row_stride;
  const LivePages live = LivePages::of(g, p.num_blocks);
  const int whole_lo = w.whole_lo, whole_hi = w.whole_hi;  // no mask there (as on the GPU)
  const int computed_rows = w.count * p.qpk;  // rows of tokens past the count stay empty
  for (int tile = t0; tile < t1; ++tile) {
    const bool all_pages = stage_tile<D, F>(p, in, g, live, table_row, kvh, tile, w.read_bits, sc);
    // A whole tile with every page present has every key present and visible to every row
    // (keys of [key_lo, seq_len) by construction): the GPU kernel skips the mask there, and so
    // does this handler, so the tests check whole_tiles() against the oracle.
    const bool whole = all_pages && tile >= whole_lo && tile < whole_hi;
    for (int row = 0; row < computed_rows; ++row) {
      float s[kTileKeys], pb[kTileKeys];
      row_scores<D>(sc.q + row * D, sc.kt, p.scale_log2, s);
      if (!whole) {
        if (w.tree == nullptr)
          mask_row(sc.present, tile * kTileKeys, token_position(g, row / p.qpk), p.window, s);
        else
          mask_tree_row(sc.present, tile * kTileKeys, w.tree[row / p.qpk], g.ctx, s);
      }
      const float block_max = tile_max(s);
      SoftmaxState& state = sc.state[row];
      const float factor = state.absorb_max(block_max);
      if (block_max == neg_inf()) continue;  // nothing visible in this tile
      state.l += tile_probabilities(s, state.m, pb);
      accumulate_pv<D>(pb, sc.v, factor, sc.o + row * D);
    }
  }
  store_partials<D>(p, in, first_slot(p, g, r, kvh) + seg, sc);
}

// The split of one segment for a head dim and a cache format fixed at compile time (every
// inner loop has a constant trip count), in the baseline ISA and, where the CPU has them,
// AVX2 + FMA.
using SplitSegment = void (*)(const Problem&, const Inputs&, const RequestWork&, int, int, int,
                              Scratch&);

template <int D, KvFormat F>
void split_segment_baseline(const Problem& p, const Inputs& in, const RequestWork& w, int r,
                            int kvh, int seg, Scratch& sc) {
  split_segment<D, F>(p, in, w, r, kvh, seg, sc);
}

#if MUSE_CPU_AVX2_COPY
template <int D, KvFormat F>
MUSE_CPU_AVX2 void split_segment_avx2(const Problem& p, const Inputs& in, const RequestWork& w,
                                      int r, int kvh, int seg, Scratch& sc) {
  split_segment<D, F>(p, in, w, r, kvh, seg, sc);
}
#endif

template <KvFormat F>
SplitSegment pick_split_segment(int head_dim) {
#if MUSE_CPU_AVX2_COPY
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  if (avx2) return head_dim == 64 ? split_segment_avx2<64, F> : split_segment_avx2<128, F>;
#endif
  return head_dim == 64 ? split_segment_baseline<64, F> : split_segment_baseline<128, F>;
}

SplitSegment pick_split_segment(int head_dim, KvFormat format) {
  switch (format) {
    case KvFormat::kFp8E4m3fn: return pick_split_segment<KvFormat::kFp8E4m3fn>(head_dim);
    case KvFormat::kFp8E4m3fnuz: return pick_split_segment<KvFormat::kFp8E4m3fnuz>(head_dim);
    default: return pick_split_segment<KvFormat::kBf16>(head_dim);
  }
}

// ------------------------------------------------------------------------ merge: one group

constexpr int kMaxHeadDim = 128;

// Combines the group's segments into its output rows (bf16) and, when asked, their lse.
void merge_group(const Problem& p, const Inputs& in, const RequestGeometry& g, int r, int kvh) {
  const PartialsLayout lay = p.partials();
  const int64_t first = first_slot(p, g, r, kvh);
  const int d_dim = p.head_dim;
  const QueryLayout ql{p.tokens, p.num_q_heads, FastDiv(p.qpk), d_dim};
  for (int row = 0; row < p.rows(); ++row) {
    MergeState ms{neg_inf()};
    for (int seg = 0; seg < g.num_segments; ++seg) {
      const float m = in.part_ml[lay.ml_offset(first + seg, row)];
      ms.m_max = m > ms.m_max ? m : ms.m_max;
    }
    float acc[kMaxHeadDim] = {};
    float l_sum = 0.0f;
    if (ms.m_max != neg_inf()) {
      for (int seg = 0; seg < g.num_segments; ++seg) {
        const float w = ms.weight(in.part_ml[lay.ml_offset(first + seg, row)]);
        if (w == 0.0f) continue;
        l_sum += w * in.part_ml[lay.ml_offset(first + seg, row) + 1];
        const uint16_t* po = in.part_o + lay.o_offset(first + seg, row);
        for (int d = 0; d < d_dim; ++d) acc[d] += w * bf16_to_f32(po[d]);
      }
    }
    const float inv = safe_inverse(l_sum);
    const int64_t offset = ql.row_offset(r, kvh, row);
    uint16_t* dst = in.out + offset;
    for (int d = 0; d < d_dim; ++d) dst[d] = f32_to_bf16(acc[d] * inv);
    if (in.lse != nullptr) in.lse[offset / d_dim] = row_lse(ms.m_max, l_sum);
  }
}

// ------------------------------------------------------------------------ parallel driver

// Runs work(u) for u in [0, n) on the calling thread and up to num_threads - 1 tasks of XLA's
// intra-op pool, and returns once every unit is done. The caller takes units too: XLA may run a
// scheduled task on this very thread or on a pool of one, so waiting idle could deadlock. Tasks
// that start late find no unit left and touch nothing but the shared counters.
template <typename Work>
void parallel_for(ffi::ThreadPool& pool, int64_t n, const Work& work) {
  struct Shared {
    std::atomic<int64_t> next{0}, done{0};
    int64_t n = 0;
    const Work* work = nullptr;
    std::mutex mu;
    std::condition_variable all_done;

    void drain() {
      for (int64_t u; (u = next.fetch_add(1, std::memory_order_relaxed)) < n;) {
        (*work)(u);
        if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
          std::lock_guard<std::mutex> lock(mu);
          all_done.notify_all();
        }
      }
    }
  };
  auto shared = std::make_shared<Shared>();
  shared->n = n;
  shared->work = &work;
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), n) - 1;
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([shared] { shared->drain(); });
  shared->drain();
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->all_done.wait(lock, [&] { return shared->done.load(std::memory_order_acquire) == n; });
}

// ------------------------------------------------------------------------ the handler

// The balanced cut (geometry.h) of every request's geometry, as the GPU kernels work it out.
void cut_balanced(const Problem& p, std::vector<RequestWork>& work) {
  int64_t tiles = 0;
  int most = 0;
  for (const RequestWork& w : work) {
    tiles += request_tiles(w.g);
    most = max_i(most, request_tiles(w.g));
  }
  const int64_t slots = int64_t{p.num_requests} * p.num_splits;
  const int len = pool_length(tiles, most, slots, p.num_splits, [&](int l) {
    int64_t n = 0;
    for (const RequestWork& w : work) n += pool_segments(request_tiles(w.g), l);
    return n <= slots;
  });
  int first = 0;
  for (RequestWork& w : work) {
    cut_from_pool(&w.g, len, first);
    first += w.g.num_segments;
  }
}

struct Unit {
  int r, kvh, seg;
};

// The drafts target's extra operands (draft_kind kChain: none is read; a tree's may be null,
// mask.h).
struct DraftOperands {
  const int32_t* draft_lens;  // [R]
  const uint32_t* tree_mask;  // [R, NQ]
  const int32_t* depths;      // [R, NQ]
};

ffi::Error run_verify_attention(ffi::ThreadPool& pool, const Problem& p, ffi::BufferR3<ffi::BF16> q,
                                ffi::AnyBuffer kv_cache, ffi::BufferR2<ffi::S32> block_table,
                                ffi::BufferR1<ffi::S32> seq_lens, ffi::BufferR0<ffi::S32> num_reqs,
                                ffi::Buffer<ffi::F32> k_scale, ffi::Buffer<ffi::F32> v_scale,
                                const DraftOperands& drafts, uint16_t* out, float* lse,
                                uint16_t* part_o, float* part_ml) {
  if (p.head_dim != 64 && p.head_dim != 128)
    return ffi::Error::InvalidArgument("jax_muse_attn verify_attention: head dim must be 64 or "
                                       "128, got " + std::to_string(p.head_dim));
  Inputs in{q.typed_data(), kv_cache.untyped_data(), block_table.typed_data(),
            part_o,         part_ml,                 out,
            nullptr,        nullptr,                 nullptr,
            nullptr,        lse};
  float tables[2][256];
  if (p.scale_kind == ScaleKind::kToken) {
    in.k_scale = k_scale.typed_data();
    in.v_scale = v_scale.typed_data();
  } else if (p.scale_kind == ScaleKind::kTensor) {  // each scale read once, here
    const bool fnuz = p.kv_format == KvFormat::kFp8E4m3fnuz;
    dequantize_table(k_scale.typed_data()[0], fnuz, tables[0]);
    dequantize_table(v_scale.typed_data()[0], fnuz, tables[1]);
    in.k_lut = tables[0];
    in.v_lut = tables[1];
  }
  const SplitSegment split = pick_split_segment(p.head_dim, p.kv_format);

  // Requests at or past num_reqs are padding: no key, nothing read, zero rows. A request with
  // no draft has no key either. Draft operands of padding requests are not read.
  const int real = real_requests(p.num_reqs_static, num_reqs.typed_data(), p.num_requests);
  const bool tree = p.draft_kind == DraftKind::kTree;
  std::vector<RequestWork> work(p.num_requests);
  std::vector<DraftRow> tree_rows(tree ? static_cast<size_t>(p.num_requests) * p.tokens : 0);
  for (int r = 0; r < p.num_requests; ++r) {
    RequestWork& w = work[r];
    w.count = r >= real ? 0
              : p.draft_kind == DraftKind::kChain
                  ? p.tokens
                  : request_draft_count(drafts.draft_lens, r, p.tokens);
    const int seq_len = r < real ? keyed_length(seq_lens.typed_data()[r], w.count, true) : 0;
    w.g = request_geometry(seq_len, p.capacity(), w.count, p.window, p.num_splits);
    w.tree = nullptr;
    w.read_bits = ~0u;
    if (!tree) {
      whole_tiles(w.g.ctx, w.count, p.window, &w.whole_lo, &w.whole_hi);
      continue;
    }
    int depths[32];
    int max_depth = 0;
    for (int t = 0; t < w.count; ++t) {
      depths[t] = clamp_draft_depth(tree_row_depth(drafts.depths, int64_t{r} * p.tokens + t, t), p.tokens);
      max_depth = max_i(max_depth, depths[t]);
    }
    DraftRow* rows = tree_rows.data() + static_cast<size_t>(r) * p.tokens;
    for (int t = 0; t < p.tokens; ++t)
      rows[t] = t < w.count ? tree_draft_row(w.g.ctx, w.count, t,
                                             tree_row_bits(drafts.tree_mask, int64_t{r} * p.tokens + t, t),
                                             depths, p.window)
                            : dead_draft_row();
    w.tree = rows;
    w.read_bits = tree_read_bits(rows, w.count);
    tree_whole_tiles(w.g.ctx, max_depth, p.window, &w.whole_lo, &w.whole_hi);
  }
  if (p.balance_segments) cut_balanced(p, work);

  // Units in group order; a group without keys still gets one (its merge writes zero rows).
  // pending[group]: its units not yet done; the one that finishes last merges the group.
  std::vector<Unit> units;
  std::unique_ptr<std::atomic<int>[]> pending(new std::atomic<int>[p.groups()]);
  for (int r = 0; r < p.num_requests; ++r)
    for (int kvh = 0; kvh < p.num_kv_heads; ++kvh) {
      const int n = std::max(work[r].g.num_segments, 1);
      pending[r * p.num_kv_heads + kvh].store(n, std::memory_order_relaxed);
      for (int seg = 0; seg < n; ++seg) units.push_back(Unit{r, kvh, seg});
    }
  parallel_for(pool, static_cast<int64_t>(units.size()), [&](int64_t i) {
    const Unit u = units[i];
    const RequestWork& w = work[u.r];
    if (u.seg < w.g.num_segments) {
      Scratch& sc = thread_scratch();
      sc.fit(p.rows(), p.head_dim);
      split(p, in, w, u.r, u.kvh, u.seg, sc);
    }
    // acq_rel: the merging thread sees every partial the group's other units wrote.
    if (pending[u.r * p.num_kv_heads + u.kvh].fetch_sub(1, std::memory_order_acq_rel) == 1)
      merge_group(p, in, w.g, u.r, u.kvh);
  });
  return ffi::Error::Success();
}

ffi::Error verify_attention_cpu(ffi::ThreadPool pool,
                                ffi::BufferR3<ffi::BF16> q,          // [NQ*R, Hq, D]
                                ffi::AnyBuffer kv_cache,             // [blocks, Hkv, 16, 2D]
                                ffi::BufferR2<ffi::S32> block_table,  // [>=R, P]
                                ffi::BufferR1<ffi::S32> seq_lens,     // [>=R]
                                ffi::BufferR0<ffi::S32> num_reqs,     // real requests
                                ffi::Buffer<ffi::F32> k_scale,        // [] or [blocks, Hkv, 16]
                                ffi::Buffer<ffi::F32> v_scale,
                                ffi::ResultBufferR3<ffi::BF16> out,   // like q
                                ffi::ResultBufferR4<ffi::BF16> part_o,  // [R*Hkv, S, rows, D]
                                ffi::ResultBufferR4<ffi::F32> part_ml,  // [R*Hkv, S, rows, 2]
                                float scale, int32_t window, int32_t tokens,
                                int32_t num_splits, int32_t num_reqs_static,
                                int32_t /*split_kernel*/, int32_t /*merge_warps*/,
                                int32_t /*merge_pdl*/, int32_t /*merge_by_lane*/,
                                int32_t balance_segments, int32_t kv_format, int32_t scale_kind) {
  Problem p{};
  ffi::Error status = make_problem(q.dimensions(), kv_cache.dimensions(), block_table.dimensions(),
                                   seq_lens.dimensions(), part_o->dimensions(),
                                   part_ml->dimensions(), scale, window, tokens, num_splits,
                                   num_reqs_static, &p);
  if (status.failure()) return status;
  p.balance_segments = balance_segments != 0;
  status = check_kv_format(kv_cache.element_type(), k_scale.dimensions(), v_scale.dimensions(),
                           kv_format, scale_kind, &p);
  if (status.failure()) return status;
  return run_verify_attention(pool, p, q, kv_cache, block_table, seq_lens, num_reqs, k_scale,
                              v_scale, DraftOperands{nullptr, nullptr, nullptr},
                              out->typed_data(), nullptr, part_o->typed_data(),
                              part_ml->typed_data());
}

ffi::Error verify_attention_drafts_cpu(
    ffi::ThreadPool pool, ffi::BufferR3<ffi::BF16> q, ffi::AnyBuffer kv_cache,
    ffi::BufferR2<ffi::S32> block_table, ffi::BufferR1<ffi::S32> seq_lens,
    ffi::BufferR0<ffi::S32> num_reqs, ffi::Buffer<ffi::F32> k_scale,
    ffi::Buffer<ffi::F32> v_scale, ffi::BufferR1<ffi::S32> draft_lens,
    ffi::BufferR2<ffi::U32> tree_mask, ffi::BufferR2<ffi::S32> draft_depths,
    ffi::ResultBufferR3<ffi::BF16> out, ffi::ResultBufferR2<ffi::F32> lse,
    ffi::ResultBufferR4<ffi::BF16> part_o, ffi::ResultBufferR4<ffi::F32> part_ml, float scale,
    int32_t window, int32_t tokens, int32_t num_splits, int32_t num_reqs_static,
    int32_t /*split_kernel*/, int32_t /*merge_warps*/, int32_t /*merge_pdl*/,
    int32_t /*merge_by_lane*/, int32_t balance_segments, int32_t kv_format, int32_t scale_kind,
    int32_t draft_kind,
    int32_t return_lse) {
  Problem p{};
  ffi::Error status = make_problem(q.dimensions(), kv_cache.dimensions(), block_table.dimensions(),
                                   seq_lens.dimensions(), part_o->dimensions(),
                                   part_ml->dimensions(), scale, window, tokens, num_splits,
                                   num_reqs_static, &p);
  if (status.failure()) return status;
  p.balance_segments = balance_segments != 0;
  status = check_kv_format(kv_cache.element_type(), k_scale.dimensions(), v_scale.dimensions(),
                           kv_format, scale_kind, &p);
  if (status.failure()) return status;
  status = check_drafts(draft_lens.dimensions(), tree_mask.dimensions(),
                        draft_depths.dimensions(), lse->dimensions(), draft_kind, return_lse, &p);
  if (status.failure()) return status;
  return run_verify_attention(
      pool, p, q, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale,
      DraftOperands{p.draft_lens_given ? draft_lens.typed_data() : nullptr,
                    p.tree_mask_given ? tree_mask.typed_data() : nullptr,
                    p.draft_depths_given ? draft_depths.typed_data() : nullptr},
      out->typed_data(), p.return_lse ? lse->typed_data() : nullptr, part_o->typed_data(),
      part_ml->typed_data());
}

}  // namespace
}  // namespace muse_attn

// XLA's intra-op thread pool comes first, before the operands every platform binds.
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    MuseVerifyAttentionCpu, muse_attn::verify_attention_cpu,
    muse_attn::bind_verify_attention(xla::ffi::Ffi::Bind().Ctx<xla::ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    MuseVerifyAttentionDraftsCpu, muse_attn::verify_attention_drafts_cpu,
    muse_attn::bind_verify_attention_drafts(xla::ffi::Ffi::Bind().Ctx<xla::ffi::ThreadPool>()));
