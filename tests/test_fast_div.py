"""muse_attn/fast_div.h (the GPU kernels' divisions by Hkv, qpk and the split count as
multiply-shifts) against Python's // and %, on the host: every divisor kind the kernels use
(1, powers of 2, small odd counts, large values) and numerators at the edges of each quotient
step, up to 2^31 - 1. An independent check: Python's integer division, not the scheme."""

import random
import subprocess

from conftest import build_host_harness

HARNESS = r"""
#include <cstdio>
#include "muse_attn/fast_div.h"
int main() {
  int n, d;
  while (std::scanf("%d %d", &n, &d) == 2) {
    const muse_attn::FastDiv f(d);
    std::printf("%d %d %d\n", n / f, n % f, f.divisor());
  }
  return 0;
}
"""

MAX = 2**31 - 1


def _pairs():
    rnd = random.Random(20261201)
    divisors = (list(range(1, 130)) + [2**k for k in range(31)] + [2**k + 1 for k in range(1, 31)]
                + [2**k - 1 for k in range(2, 32)] + [65535, 65536, 65537, 1000003, MAX]
                + [rnd.randrange(1, MAX) for _ in range(300)])
    pairs = []
    for d in divisors:
        q_max = MAX // d
        quotients = {0, 1, 2, q_max, q_max - 1} | {rnd.randrange(0, q_max + 1) for _ in range(45)}
        for q in quotients:
            for n in (q * d - 1, q * d, q * d + 1, q * d + d - 1):
                if 0 <= n <= MAX:
                    pairs.append((n, d))
    return pairs


def test_fast_div_matches_python(tmp_path_factory):
    exe = build_host_harness(tmp_path_factory, "fast_div", HARNESS)
    pairs = _pairs()
    assert len(pairs) > 40_000
    out = subprocess.run([exe], input="".join(f"{n} {d}\n" for n, d in pairs),
                         capture_output=True, text=True, check=True).stdout.split("\n")
    bad = []
    for (n, d), line in zip(pairs, out):
        want = f"{n // d} {n % d} {d}"
        if line != want:
            bad.append((n, d, line, want))
    assert len(out) >= len(pairs) and not bad, f"{len(bad)} wrong, first: {bad[:5]}"


def test_fast_div_clamps_nonpositive_divisors_to_one(tmp_path_factory):
    exe = build_host_harness(tmp_path_factory, "fast_div_clamp", HARNESS)
    out = subprocess.run([exe], input="7 0\n7 -3\n", capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["7", "0", "1", "7", "0", "1"]
