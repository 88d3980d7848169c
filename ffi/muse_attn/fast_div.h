// Division by a divisor fixed for a whole call (KV heads, query heads a KV head, the split
// count) as a multiply-shift: q = umulhi(n, mul) >> shr, with mul = ceil(2^(31 + l) / d) and
// l = ceil(log2 d), exact for 0 <= n < 2^31 and 1 <= d < 2^31 (CUTLASS's FastDivmod; Granlund and
// Montgomery, "Division by invariant integers using multiplication", 1994). A GPU integer
// division is ~20 instructions behind a branch; this is 2-3. The divisor's constants are worked
// out once on the host (the constructor: a 64-bit division) and travel in the kernel
// parameters; `n / d` and `n % d` then read like the int expressions they replace.
// tests/test_fast_div.py checks it against Python's // and % on the host.
#ifndef MUSE_ATTN_FAST_DIV_H_
#define MUSE_ATTN_FAST_DIV_H_

#include <cstdint>

#include "muse_attn/host_device.h"

namespace muse_attn {

class FastDiv {
 public:
  FastDiv() = default;  // divisor 1
  // d >= 1 (the callers check their divisors first; d < 1 is treated as 1).
  MUSE_HD explicit FastDiv(int d) : d_(d > 1 ? d : 1) {
    if (d_ == 1) return;  // mul_ = 0 marks it: n / 1 = n (2^31 does not fit the scheme)
    int l = 0;
    while ((int64_t{1} << l) < d_) ++l;  // ceil(log2 d)
    const uint64_t p = uint64_t{1} << (31 + l);
    mul_ = static_cast<uint32_t>((p + static_cast<uint64_t>(d_) - 1) / static_cast<uint64_t>(d_));
    shr_ = static_cast<uint32_t>(l - 1);  // umulhi drops 32 bits: 31 + l - 32
  }

  MUSE_HD int divisor() const { return d_; }

  // n / d for 0 <= n < 2^31.
  MUSE_HD int div(int n) const {
    const uint32_t un = static_cast<uint32_t>(n);
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    const uint32_t hi = __umulhi(un, mul_);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(un) * mul_) >> 32);
#endif
    return mul_ == 0 ? n : static_cast<int>(hi >> shr_);
  }
  // n % d for 0 <= n < 2^31.
  MUSE_HD int mod(int n) const { return n - div(n) * d_; }

 private:
  int d_ = 1;
  uint32_t mul_ = 0;
  uint32_t shr_ = 0;
};

MUSE_HD int operator/(int n, const FastDiv& d) { return d.div(n); }
MUSE_HD int operator%(int n, const FastDiv& d) { return d.mod(n); }

}  // namespace muse_attn

#endif  // MUSE_ATTN_FAST_DIV_H_
