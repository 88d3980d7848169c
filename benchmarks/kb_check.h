// The output check of benchmarks/kernel_bench.cu (MUSE_KB_CHECK=1): the kernels' bf16 output
// against a naive float64 attention written from the spec (README.md, Semantics), key by key,
// for a sample of requests. Independent of the kernels' algorithm (no tiles, no segments, no
// online softmax). Host code only; benchmarks/tests/test_kb_check.py checks it against the CPU
// handler.
#ifndef MUSE_ATTN_BENCHMARKS_KB_CHECK_H_
#define MUSE_ATTN_BENCHMARKS_KB_CHECK_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kb_check {

inline double bf16_to_double(uint16_t v) {
  const uint32_t u = uint32_t{v} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One verify-attention problem as the kernels see it (kernels.h VerifyParams, host copies).
struct Problem {
  int num_requests, tokens, num_q_heads, num_kv_heads, head_dim, pages, window;  // window 0: full
  int64_t num_blocks;
  int num_reqs;                 // real requests; the rest are padding (zero rows)
  double scale;
  const uint16_t* kv;           // [num_blocks, Hkv, 16, 2D] bf16
  const uint16_t* q;            // [NQ*R, Hq, D] bf16
  const int32_t* table;         // [R, pages]
  const int32_t* seq_lens;      // [R]
};

// The reference output row of (request r, token t, query head h): D doubles.
inline std::vector<double> reference_row(const Problem& p, int r, int t, int h) {
  constexpr int kPage = 16;
  const int D = p.head_dim;
  std::vector<double> o(D, 0.0);
  if (r >= p.num_reqs) return o;  // padding
  const int seq = std::clamp(p.seq_lens[r], 0, p.pages * kPage);
  const int qpos = seq - p.tokens + t;
  const int kvh = h / (p.num_q_heads / p.num_kv_heads);
  const uint16_t* qrow = p.q + ((int64_t{p.tokens} * r + t) * p.num_q_heads + h) * D;
  std::vector<double> s, w;
  std::vector<const uint16_t*> vrows;
  for (int k = 0; k < seq; ++k) {
    if (k > qpos || (p.window > 0 && qpos - k >= p.window)) continue;  // causal, window
    const int32_t id = p.table[int64_t{r} * p.pages + k / kPage];
    if (id < 0 || id >= p.num_blocks) continue;  // an absent block: its keys are not seen
    const uint16_t* slot = p.kv + ((int64_t{id} * p.num_kv_heads + kvh) * kPage + k % kPage) * 2 * D;
    double dot = 0.0;
    for (int d = 0; d < D; ++d) dot += bf16_to_double(qrow[d]) * bf16_to_double(slot[d]);
    s.push_back(dot * p.scale);
    vrows.push_back(slot + D);
  }
  if (s.empty()) return o;  // nothing visible: a zero row
  const double m = *std::max_element(s.begin(), s.end());
  double l = 0.0;
  for (size_t i = 0; i < s.size(); ++i) {
    const double e = std::exp(s[i] - m);
    l += e;
    for (int d = 0; d < D; ++d) o[d] += e * bf16_to_double(vrows[i][d]);
  }
  for (int d = 0; d < D; ++d) o[d] /= l;
  return o;
}

struct Result {
  int64_t checked = 0, bad = 0;  // elements
  double max_err = 0.0;
};

// out: [NQ*R, Hq, D] bf16 from the kernels. Tolerance of the spec: |out - ref| <= 1e-2 +
// 2e-2 |ref|; a NaN counts as bad.
inline Result check(const Problem& p, const uint16_t* out, const std::vector<int>& requests) {
  Result res;
  const int D = p.head_dim;
  for (int r : requests) {
    for (int t = 0; t < p.tokens; ++t) {
      for (int h = 0; h < p.num_q_heads; ++h) {
        const std::vector<double> ref = reference_row(p, r, t, h);
        const uint16_t* got = out + ((int64_t{p.tokens} * r + t) * p.num_q_heads + h) * D;
        for (int d = 0; d < D; ++d) {
          const double g = bf16_to_double(got[d]), err = std::fabs(g - ref[d]);
          ++res.checked;
          if (!(err <= 1e-2 + 2e-2 * std::fabs(ref[d]))) ++res.bad;
          if (err > res.max_err || std::isnan(err)) res.max_err = std::isnan(err) ? INFINITY : err;
        }
      }
    }
  }
  return res;
}

}  // namespace kb_check

#endif  // MUSE_ATTN_BENCHMARKS_KB_CHECK_H_
