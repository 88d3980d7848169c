// The online-softmax state of one output row and the merge of partial states (the max trick).
//
// Scores live in the exp2 domain: s = (q . k) * scale * log2(e), so exp(q.k*scale - m') is
// exp2(s - m). A row's partial over some keys is (m, l, o): m the largest visible score
// (-inf when the row saw no key), l = sum exp2(s - m) and o = sum exp2(s - m) * v, unnormalized.
// Any finite m gives the same o / l; m below the largest score by at most a small slack keeps p
// bounded (p <= 2^slack): the GPU split kernel keeps a row's m while a tile's max exceeds it by at
// most 8 in this domain (p <= 2^8; gpu/split_kernel.cu.cc, kRescaleSlack).
// Two rules keep poison and -inf out: a row with m = -inf has weight 0 (never exp2(-inf - -inf)),
// and the final division happens only when l > 0 (else the row is exactly 0).
#ifndef MUSE_ATTN_SOFTMAX_STATE_H_
#define MUSE_ATTN_SOFTMAX_STATE_H_

#include <cmath>

#include "muse_attn/host_device.h"

// Every rule above tests for -inf. Under -ffinite-math-only (part of clang's and GCC's
// -ffast-math) the compiler may delete those tests, and a row that saw no key comes out NaN
// instead of zero (hence hip.cmake's -fno-finite-math-only). nvcc's --use_fast_math keeps
// infinities.
#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "jax_muse_attn needs infinities: build with -fno-finite-math-only (e.g. -ffast-math -fno-finite-math-only)"
#endif

namespace muse_attn {

inline constexpr float kLog2e = 1.4426950408889634f;

MUSE_HD float neg_inf() { return -__builtin_huge_valf(); }

MUSE_HD float exp2_f32(float x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return exp2f(x);
#else
  return std::exp2(x);
#endif
}

// Weight of a state whose max is m once the running max is m_new (m_new finite, m <= m_new).
MUSE_HD float rescale_weight(float m, float m_new) {
  return m == neg_inf() ? 0.0f : exp2_f32(m - m_new);
}

// Running (m, l) of one row; the row's o accumulators live with the caller (a vector, a
// fragment), scaled by the factor absorb_max() returns.
struct SoftmaxState {
  float m;  // running max (-inf: no key seen yet)
  float l;  // running sum of exp2(s - m)

  MUSE_HD static SoftmaxState empty() { return SoftmaxState{neg_inf(), 0.0f}; }

  // Absorbs a block of scores whose visible maximum is block_max (-inf when none is visible).
  // Returns the factor to scale the existing o and l by, and sets m to the new max; the caller
  // then adds exp2(s - m) of each visible score to l and o. A block with nothing visible
  // changes nothing (factor 1).
  MUSE_HD float absorb_max(float block_max) {
    const float m_new = block_max > m ? block_max : m;
    if (m_new == neg_inf()) return 1.0f;
    const float factor = rescale_weight(m, m_new);
    m = m_new;
    l *= factor;
    return factor;
  }
};

// Merges partial states once the largest m over them is known: out = sum of weight(m) * o over
// the partials, times safe_inverse(sum of weight(m) * l).
struct MergeState {
  float m_max;  // max over the partials' m (-inf when none saw a key)

  // Weight of a partial with max m (0 for an empty partial).
  MUSE_HD float weight(float m) const { return m == neg_inf() ? 0.0f : exp2_f32(m - m_max); }
};

// 1/l, or 0 for a row that saw no key (so the row is exactly zero, never NaN).
MUSE_HD float safe_inverse(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }

inline constexpr float kLn2 = 0.6931471805599453f;

MUSE_HD float log2_f32(float x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return log2f(x);
#else
  return std::log2(x);
#endif
}

// The natural log-sum-exp of a row from its merged (m_max, l_sum) in the exp2 domain:
// ln(sum exp(scale * q.k)) = (m_max + log2(l_sum)) * ln 2; -inf for a row that saw no key
// (l_sum == 0), NaN where l_sum is (a score that overflowed).
MUSE_HD float row_lse(float m_max, float l_sum) {
  if (l_sum > 0.0f) return (m_max + log2_f32(l_sum)) * kLn2;
  return l_sum == 0.0f ? neg_inf() : l_sum;
}

}  // namespace muse_attn

#endif  // MUSE_ATTN_SOFTMAX_STATE_H_
