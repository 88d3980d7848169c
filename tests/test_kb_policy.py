"""benchmarks/kb_policy.h, kernel_bench's copy of the default split count, against
jax_muse_attn's (attention._default_num_splits; D = 64, full attention, 16/2 heads, 8 tokens):
compiled with the host C++ compiler, both must agree over a grid of requests, SM counts and
context lengths, so kernel_bench times the split counts the library picks."""

import itertools
import subprocess

import pytest

import h200_plans
from conftest import build_host_harness
from jax_muse_attn import _validate, attention

HARNESS = r"""
#include <cstdio>
#include "kb_policy.h"
int main() {
  int groups, sms, max_tiles, pingpong, two_pairs;
  while (std::scanf("%d %d %d %d %d", &groups, &sms, &max_tiles, &pingpong, &two_pairs) == 5)
    std::printf("%d\n", kb_policy::default_splits(groups, sms, max_tiles, pingpong != 0, two_pairs != 0));
  return 0;
}
"""


@pytest.fixture(scope="module")
def policy_bin(tmp_path_factory):
    return build_host_harness(tmp_path_factory, "kb_policy", HARNESS)


def _two_pairs_rule(major, sms):
    """A stand-in for the launch plan's two-pair rule (ffi/gpu/launch_plan.h: sm_90, segments of
    32 tiles or more, one two-pair CTA an SM in one wave), as attention._runs_two_pairs asks it."""
    def runs(shapes, n):
        return (major == 9 and -(-n // 2) * shapes.groups <= sms
                and -(-shapes.max_tiles // n) >= h200_plans.TWO_PAIRS_MIN_SEGMENT_TILES)
    return runs


def test_kernel_bench_policy_matches_python(policy_bin, monkeypatch):
    cases, want = [], []
    monkeypatch.delenv("MUSE_ATTN_PINGPONG", raising=False)
    asked = []
    for sms, R, pages, major in itertools.product(
            [46, 78, 108, 114, 132, 144, 304], [1, 2, 3, 4, 5, 8, 13, 16, 32, 64],
            [1, 4, 8, 17, 64, 128, 257, 512, 1000, 2048, 4096, 8192, 16384], [8, 9]):
        monkeypatch.setattr(attention._ffi, "multiprocessor_count", lambda sms=sms: sms)
        monkeypatch.setattr(attention._ffi, "compute_capability_major", lambda major=major: major)
        s = _validate.Shapes(num_requests=R, tokens=8, num_q_heads=16, num_kv_heads=2, head_dim=64,
                             num_blocks=1, pages=pages, window=0, q_rank=3)
        rule = _two_pairs_rule(major, sms)
        monkeypatch.setattr(attention, "_runs_two_pairs",
                            lambda shapes, n, rule=rule: asked.append(n) or rule(shapes, n))
        two = 2 * sms // s.groups
        cases.append(f"{s.groups} {sms} {s.max_tiles} {int(major == 9)} {int(two > 0 and rule(s, two))}")
        want.append(attention._default_num_splits(s, "CUDA"))  # XLA's name, as _ffi gives it
    got = subprocess.run([policy_bin], input="\n".join(cases) + "\n", capture_output=True,
                         text=True, check=True).stdout.split()
    assert len(got) == len(want)
    bad = [(c, w, int(g)) for c, w, g in zip(cases, want, got) if int(g) != w]
    assert not bad, f"{len(bad)} of {len(cases)} differ (groups sms max_tiles, python, C++): {bad[:10]}"
    assert len(set(want)) > 20  # the grid reaches many different split counts
    assert want[0::2] != want[1::2]  # and the ping-pong rule moves some of them
    assert asked  # the two-pair bound was reached


def _segments(num_tiles, splits, min_tiles=1):
    """muse_attn/geometry.h request_geometry: segments with tiles when num_tiles tiles are cut
    into at most `splits` segments (written here from the header's definition)."""
    if num_tiles <= 0:
        return 0
    per_segment = max(-(-num_tiles // splits), min_tiles)
    return -(-num_tiles // per_segment)


def test_split_count_is_the_longest_requests_segments(monkeypatch):
    # The default split count launches no split CTA without tiles for the longest request a
    # shape admits (a count past its segments only adds empty CTAs and may widen the merge,
    # benchmarks/NOTES.md version 11). Full attention: the longest request has max_tiles tiles;
    # SWA: some request length reaches max_tiles tiles (the window straddling tile boundaries).
    checked = 0
    for sms, R, pages, window, hkv in itertools.product(
            [78, 132, 304], [1, 2, 3, 4, 16], [1, 3, 8, 128, 512, 2048, 8192], [0, 40, 2048],
            [1, 2]):
        monkeypatch.setattr(attention._ffi, "multiprocessor_count", lambda sms=sms: sms)
        s = _validate.Shapes(num_requests=R, tokens=8, num_q_heads=8 * hkv, num_kv_heads=hkv,
                             head_dim=64, num_blocks=1, pages=pages, window=window, q_rank=3)
        n = attention._default_num_splits(s, "cuda")
        assert 1 <= n <= max(1, s.max_tiles)
        assert _segments(s.max_tiles, n) == n, (sms, R, pages, window, hkv, n, s.max_tiles)
        checked += 1
    assert checked == 3 * 5 * 7 * 3 * 2


def test_short_segments_past_two_ctas_an_sm_only_when_two_would_load_an_sm_more(monkeypatch):
    # Where the default count puts more than 2 split CTAs on an SM with segments of fewer than 4
    # tiles, a count at 2 CTAs an SM (the merge then a programmatic dependent launch) must load
    # the busiest SM with more tiles (benchmarks/NOTES.md version 12: SWA R=8 12 splits 8.27 us vs
    # 17: 9.06, full 2k R=16 8: 9.55 vs 11: 10.74).
    seen_three, seen_two = 0, 0
    for sms, R, pages, window in itertools.product(
            [78, 114, 132, 304], [4, 6, 8, 12, 16, 24, 32], [64, 128, 256, 2048], [0, 2048]):
        monkeypatch.setattr(attention._ffi, "multiprocessor_count", lambda sms=sms: sms)
        s = _validate.Shapes(num_requests=R, tokens=8, num_q_heads=16, num_kv_heads=2,
                             head_dim=64, num_blocks=1, pages=pages, window=window, q_rank=3)
        n, tiles, groups = attention._default_num_splits(s, "cuda"), s.max_tiles, 2 * R
        per_segment = -(-tiles // n)
        if per_segment >= 4:
            continue

        def busiest(k):  # CTAs on the busiest SM x tiles a segment, with k splits
            k = -(-tiles // -(-tiles // k))
            return -(-k * groups // sms) * -(-tiles // k)

        if n * groups > 2 * sms:
            seen_three += 1
            two = 2 * sms // groups
            if two > 0:
                assert busiest(two) > busiest(n), (sms, R, pages, window, n)
        else:
            seen_two += 1
    assert seen_three and seen_two  # both sides of the rule are exercised


def test_swa_r8_and_full_2k_r16_fill_two_ctas_an_sm_on_an_h200(monkeypatch):
    monkeypatch.setattr(attention._ffi, "multiprocessor_count", lambda: 132)
    for R, pages, window, want in [(8, 2048, 2048, 12), (16, 128, 0, 8), (16, 2048, 2048, 12)]:
        s = _validate.Shapes(num_requests=R, tokens=8, num_q_heads=16, num_kv_heads=2,
                             head_dim=64, num_blocks=1, pages=pages, window=window, q_rank=3)
        assert attention._default_num_splits(s, "cuda") == want, (R, pages, window)


@pytest.mark.parametrize("major", [8, 9])
def test_segments_of_16_to_32_tiles_take_two_ctas_an_sm_on_an_h200(monkeypatch, major):
    # _TWO_PER_SM_TILES (4, 32): full 32k R=8 and 128k R=2 at 2 CTAs an SM with 32-tile segments
    # (benchmarks/NOTES.md version 14: 42.2 us vs 43.9 at 24 splits, 42.4 vs 43.1 at 98), 128k
    # R=4 (63 tiles at 2 an SM) stays at 3 an SM without the ping-pong kernel; with it
    # (_TWO_PER_SM_TILES_PINGPONG (4, 128), an sm_90 GPU) takes 2 an SM (version 15: 69.7 us vs
    # 73.6 at 49), and so do 32k R=16 (43 tiles at 3 an SM, 64 at 2: 69.1 vs 72.6) and 128k R=8
    # (86 / 128 tiles: 130.3 vs 134.3). 128k R=16 (171 tiles at 3 an SM) stays at 3 an SM unless
    # the launch plan runs 8 splits as two pairs a CTA (_TWO_PER_SM_TILES_TWO_PAIRS_HI, below).
    monkeypatch.delenv("MUSE_ATTN_PINGPONG", raising=False)
    monkeypatch.setattr(attention, "_runs_two_pairs", lambda shapes, n: False)
    monkeypatch.setattr(attention._ffi, "multiprocessor_count", lambda: 132)
    monkeypatch.setattr(attention._ffi, "compute_capability_major", lambda: major)
    pp = major == 9
    for R, pages, want in [(8, 2048, 16), (2, 8192, 64), (4, 8192, 33 if pp else 49),
                           (8, 8192, 16 if pp else 24), (16, 2048, 8 if pp else 12), (16, 8192, 12)]:
        s = _validate.Shapes(num_requests=R, tokens=8, num_q_heads=16, num_kv_heads=2,
                             head_dim=64, num_blocks=1, pages=pages, window=0, q_rank=3)
        assert attention._default_num_splits(s, "cuda") == want, (R, pages)
    # MUSE_ATTN_PINGPONG forces the rule as it forces the kernel (ffi/gpu/launch_plan.h); other
    # platforms and head sizes never use it.
    s = _validate.Shapes(num_requests=4, tokens=8, num_q_heads=16, num_kv_heads=2, head_dim=64,
                         num_blocks=1, pages=8192, window=0, q_rank=3)
    monkeypatch.setenv("MUSE_ATTN_PINGPONG", "0")
    assert attention._default_num_splits(s, "cuda") == 49
    monkeypatch.setenv("MUSE_ATTN_PINGPONG", "1")
    assert attention._default_num_splits(s, "cuda") == 33
    assert not attention.pingpong_split_kernel(s, "ROCM")
    monkeypatch.delenv("MUSE_ATTN_PINGPONG")
    assert attention.pingpong_split_kernel(s, "CUDA") == pp  # XLA's platform name
    assert attention._default_num_splits(s, "CUDA") == (33 if pp else 49)
    # where the plan runs 2 an SM as two pairs a CTA: 128k R=16 at 8 splits (256 tiles), 64k R=16 /
    # 128k R=8 unchanged (16 splits already at 2 an SM); never without the ping-pong kernel
    monkeypatch.setattr(attention, "_runs_two_pairs", _two_pairs_rule(major, 132))
    for R, pages, want in [(16, 8192, 8 if pp else 12), (8, 8192, 16 if pp else 24),
                           (16, 4096, 8 if pp else 12)]:
        s = _validate.Shapes(num_requests=R, tokens=8, num_q_heads=16, num_kv_heads=2,
                             head_dim=64, num_blocks=1, pages=pages, window=0, q_rank=3)
        assert attention._default_num_splits(s, "cuda") == want, (R, pages)
    s128 = _validate.Shapes(num_requests=4, tokens=8, num_q_heads=16, num_kv_heads=2,
                            head_dim=128, num_blocks=1, pages=8192, window=0, q_rank=3)
    assert not attention.pingpong_split_kernel(s128, "cuda")


class _FakeDevice:
    def __init__(self, kind, cc=None):
        self.device_kind = kind
        if cc is not None:
            self.compute_capability = cc


@pytest.mark.parametrize("kind, cc, want", [
    ("NVIDIA H200", "9.0", 9), ("NVIDIA A100-SXM4-80GB", "8.0", 8), ("NVIDIA B200", "10.0", 10),
    ("NVIDIA H200", None, 9), ("NVIDIA H100 80GB HBM3", None, 9), ("NVIDIA A100-SXM4-80GB", None, 0)])
def test_compute_capability_from_jax_device(monkeypatch, kind, cc, want):
    # _ffi.compute_capability_major: JAX's compute_capability where the device has it, else 9 for
    # an sm_90 GPU's name; 0 off CUDA.
    from jax_muse_attn import _ffi
    monkeypatch.setattr(_ffi, "current_platform", lambda: "CUDA")
    monkeypatch.setattr(_ffi.jax, "devices", lambda: [_FakeDevice(kind, cc)])
    assert _ffi.compute_capability_major() == want
    monkeypatch.setattr(_ffi, "current_platform", lambda: "ROCM")
    assert _ffi.compute_capability_major() == 0
