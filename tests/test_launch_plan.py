"""The launch plan (ffi/gpu/launch_plan.h) of described devices, asked through the module as
verify_attention asks it, on any machine: the H200's plan of every config of the benchmark grid
(tests/h200_plans.py), the debug overrides, other GPUs, and the split count's properties."""

import itertools

import numpy as np
import pytest

import h200_plans
from h200_plans import H200, HKV, HQ, NQ, PAGE
from jax_muse_attn import _ffi, _validate

pytestmark = pytest.mark.skipif(_ffi._MODULE is None, reason="the extension is not built")


def shapes(R, keys, window=None, D=64, hq=HQ, hkv=HKV, nq=NQ, kv_dtype="bfloat16"):
    pages = -(-keys // PAGE)
    return _validate.Shapes(num_requests=R, tokens=nq, num_q_heads=hq, num_kv_heads=hkv,
                            head_dim=D, num_blocks=R * pages, pages=pages, window=window or 0,
                            q_rank=3, kv_dtype=kv_dtype,
                            scale_kind="none" if kv_dtype == "bfloat16" else "tensor")


def plan(s, device=H200, overrides="", num_splits=0):
    return _ffi.launch_plan(s, "CUDA", num_splits, overrides, device=device)


def grid(device=H200, overrides="", names=h200_plans.GRID + h200_plans.OFF_GRID):
    """{(config, D): (shapes, plan)} for the grid at D = 64 and 128."""
    out = {}
    for name in names:
        keys, R, window = h200_plans.parse(name)
        for d in (64, 128):
            s = shapes(R, keys, window, D=d)
            out[name, d] = s, plan(s, device, overrides)
    return out


def test_h200_default_plans():
    for (name, d), (s, p) in grid().items():
        ctas = s.groups * p["num_splits"]  # 64 rows a group: one row block
        assert p["split_kernel"] == h200_plans.split_kernel(name, d), (name, d, p)
        assert p["merge_pdl"] == (ctas <= 2 * h200_plans.SMS), (name, d, p)
        assert p["merge_warps"] == h200_plans.merge_warps(name, d, p["num_splits"]), (name, d, p)
        assert p["merge_by_lane"] == (-(-p["num_splits"] // p["merge_warps"]) <= 16), (name, d, p)


def test_h200_split_counts_of_the_readme_table():
    want = {"swa32k-r1": 34, "swa32k-r8": 12, "swa32k-r16": 12, "full2k-r1": 32, "full2k-r16": 8,
            "full8k-r1": 64, "full8k-r4": 32, "full32k-r1": 128, "full32k-r4": 32,
            "full128k-r4": 33, "full128k-r8": 16, "full128k-r16": 24}
    got = {name: p["num_splits"] for (name, d), (_, p) in grid().items() if d == 64 and name in want}
    assert got == want


def test_h200_plans_with_the_merge_a_plain_launch():
    for (name, d), (_, p) in grid(overrides="merge_pdl=0").items():
        assert not p["merge_pdl"], (name, d, p)
        assert p["split_kernel"] == h200_plans.split_kernel(name, d, pdl=False), (name, d, p)


def test_a_merge_that_cannot_wait_is_a_plain_launch():
    """Merge code without the dependency wait (no sm_90 code): the merge_pdl=0 plan."""
    assert grid(dict(H200, merge_can_wait=False)) == grid(overrides="merge_pdl=0")


def test_without_the_two_pair_code():
    """Without sm_90a code the two-pair kernel is a stub: never chosen, never forced."""
    no_code = dict(H200, has_two_pairs=False)
    off = grid(no_code)
    assert not any(p["split_kernel"] == "pingpong_two_pairs" for _, p in off.values())
    assert any(p["split_kernel"] == "pingpong_two_pairs" for _, p in grid().values())
    for key, (_, p) in grid(no_code, "split_kernel=pingpong_two_pairs").items():
        assert p["split_kernel"] == ("pingpong" if key[1] == 64 else "per_tile"), (key, p)


def test_segments_capped_and_whole_waves_past_one():
    """Past one wave (one segment a group overflows it) or where segments would be longer than
    128 tiles: the count, from the least that caps segments, whose waves carry the fewest tiles
    on the busiest SM. Measured on an H100 (tools/split_sweep.py): full 8k R=256 takes 3, a
    ragged batch in a 128k table at least 16 (full 16k R=256 here: 256 tiles a group)."""
    cases = {("full16k", 256): 3, ("full128k", 16): 24, ("full128k", 32): 18,
             ("full32k", 32): 4, ("full2k", 128): 1}
    for (ctx, r), want in cases.items():
        s = shapes(r, int(ctx[4:-1]) * 1024)
        p = plan(s)
        assert p["num_splits"] == want, (ctx, r, p)
        assert -(-s.max_tiles // p["num_splits"]) <= 128
    # An FP8 cache (no whole-group rule) and D = 128 (no ping-pong kernel) keep the wave count.
    for s in (shapes(256, 2048, kv_dtype="float8_e4m3fn"), shapes(256, 2048, D=128)):
        p = plan(s)
        assert (p["num_splits"], p["split_kernel"]) == (3 if s.head_dim == 64 else 1, "per_tile"), p


def test_whole_groups_by_the_pingpong_kernel():
    """One segment a group by the one-pair ping-pong kernel, whose CTAs write the output (no
    merge), where a group's keys are one segment of 16-128 tiles and one segment a group gives a
    CTA to 2/3 of the SMs (groups of up to 64 tiles) or 8/11 (up to 128). Measured on an H100 (the
    plan's count against one split forced to the ping-pong kernel), kernels alone
    (benchmarks/kernel_bench.cu): SWA R=48 (96 CTAs) 25.0 -> 22.9 µs, SWA / full 2k R=64 32.4 /
    32.1 -> 28.4 / 28.1, full 8k R=64 (128 CTAs of 128 tiles) 102.2 -> 94.7; SWA R=32 (64 CTAs)
    14.4 -> 21.3; through JAX (tools/split_sweep.py): full 8k R=48 (96 CTAs) 76.5 -> 75.9 (76.9 ->
    74.5 in another run), R=44 (88 CTAs) 71.6 -> 73.5. Longer groups (full 16k R=256: 256 tiles),
    an FP8 cache, D = 128 and an A100 keep their plans."""
    for R, configs in ((48, ((2048, None), (32768, 2048), (8192, None))),
                       (64, ((2048, None), (32768, 2048), (8192, None))),
                       (256, ((2048, None), (32768, 2048), (8192, None)))):
        for keys, window in configs:
            p = plan(shapes(R, keys, window))
            assert (p["num_splits"], p["split_kernel"]) == (1, "pingpong"), (R, keys, window, p)
            assert p == plan(shapes(R, keys, window), num_splits=1)
    for keys, window in ((2048, None), (32768, 2048)):
        p = plan(shapes(32, keys, window))
        assert p["num_splits"] > 1, p
    assert plan(shapes(44, 2048))["num_splits"] == 1  # 88 CTAs: 2/3 of 132 SMs
    assert plan(shapes(43, 2048))["num_splits"] > 1
    assert plan(shapes(44, 8192))["num_splits"] > 1  # 88 CTAs of 128 tiles
    assert plan(shapes(64, 2048), dict(H200, multiprocessors=200))["num_splits"] > 1
    p = plan(shapes(256, 16384))
    assert p["num_splits"] > 1 and p["split_kernel"] == "per_tile", p
    assert plan(shapes(64, 2048, kv_dtype="float8_e4m3fn"))["num_splits"] > 1
    a100 = dict(H200, compute_major=8, merge_can_wait=False, has_two_pairs=False)
    assert plan(shapes(256, 2048), a100)["split_kernel"] == "per_tile"
    # a pinned count keeps its own kernel choice
    assert plan(shapes(256, 2048), num_splits=3)["split_kernel"] == "per_tile"


def test_two_pairs_only_in_one_wave_by_default():
    seen = 0
    for sms in (132, 78, 114, 124):
        for (name, d), (s, p) in grid(dict(H200, multiprocessors=sms)).items():
            if p["split_kernel"] != "pingpong_two_pairs":
                continue
            assert -(-p["num_splits"] // 2) * s.groups <= sms, (sms, name, p)
            assert -(-s.max_tiles // p["num_splits"]) >= h200_plans.TWO_PAIRS_MIN_SEGMENT_TILES
            seen += 1
    assert seen > 0
    # forced, past one wave too: full 128k R=4 (33 splits, 136 CTAs on 132 SMs)
    forced = grid(overrides="split_kernel=pingpong_two_pairs", names=["full128k-r4"])
    assert forced["full128k-r4", 64][1]["split_kernel"] == "pingpong_two_pairs"
    # 124 SMs cut full 32k R=8 into 15 segments: 8 two-pair CTAs a group x 16 groups > 124
    at124 = grid(dict(H200, multiprocessors=124), names=["full32k-r8"])["full32k-r8", 64][1]
    assert (at124["num_splits"], at124["split_kernel"]) == (15, "pingpong"), at124


@pytest.mark.parametrize("kernel", _ffi.SPLIT_KERNELS)
def test_forced_split_kernels_where_they_run(kernel):
    """A forced kernel where the vendor and D have it; elsewhere the default plan's kernel (NVIDIA
    lacks per_tile_cached; AMD has per_tile, per_tile_cached and two_tile at D = 64)."""
    default = grid()
    for key, (_, p) in grid(overrides=f"split_kernel={kernel}").items():
        runs = kernel != "per_tile_cached" and (key[1] == 64 or kernel == "per_tile")
        assert p["split_kernel"] == (kernel if runs else default[key][1]["split_kernel"]), (key, p)
    amd = dict(vendor="amd", multiprocessors=304, compute_major=0, warp_size=64,
               merge_can_wait=False, has_two_pairs=False)
    default = grid(amd)
    for key, (_, p) in grid(amd, f"split_kernel={kernel}").items():
        runs = kernel in ("per_tile", "per_tile_cached") or (key[1] == 64 and kernel == "two_tile")
        want = kernel if runs else default[key][1]["split_kernel"]
        assert p["split_kernel"] == want and not p["merge_pdl"], (key, p)


PINGPONG_KERNELS = ("pingpong", "pingpong_two_pairs")


@pytest.mark.parametrize("kernel", ("",) + _ffi.SPLIT_KERNELS)
def test_an_fp8_cache_runs_per_tile_or_pingpong(kernel):
    """An FP8 cache has per_tile and the ping-pong kernels (D = 64): at the bf16 plan's split count,
    the bf16 plan's ping-pong kernel where it has one, ping-pong too wherever segments reach
    pingpong_min_segment_tiles whatever the CTA count (its math, not its bytes, rules), else
    per_tile; a forced kernel it lacks gives per_tile."""
    overrides = f"split_kernel={kernel}" if kernel else ""
    for name in h200_plans.GRID:
        keys, R, window = h200_plans.parse(name)
        for d in (64, 128):
            s8 = shapes(R, keys, window, D=d, kv_dtype="float8_e4m3fn")
            p8, p16 = plan(s8, H200, overrides), plan(shapes(R, keys, window, D=d), H200, overrides)
            assert p8["num_splits"] == p16["num_splits"], (name, d, p8, p16)
            if kernel and kernel != "per_tile_cached":  # (not on NVIDIA: the default plan)
                want = kernel if d == 64 and kernel in PINGPONG_KERNELS else "per_tile"
            elif p16["split_kernel"] in PINGPONG_KERNELS:
                want = p16["split_kernel"]
            else:
                tiles = -(-s8.max_tiles // p8["num_splits"])  # a segment's most
                two_pairs = tiles >= h200_plans.TWO_PAIRS_MIN_SEGMENT_TILES and \
                    -(-p8["num_splits"] // 2) * R * HKV <= h200_plans.SMS
                want = ("per_tile" if d != 64 or tiles < 16 else
                        "pingpong_two_pairs" if two_pairs else "pingpong")
            assert p8["split_kernel"] == want, (name, d, p8, p16)


@pytest.mark.parametrize("overrides, field, want", [
    ("merge_by_lane=1", "merge_by_lane", True), ("merge_by_lane=0", "merge_by_lane", False),
    ("merge_warps=8", "merge_warps", 8), ("merge_warps=1", "merge_warps", 1),
    ("merge_pdl=1", "merge_pdl", True)])
def test_forced_merge(overrides, field, want):
    for key, (_, p) in grid(overrides=overrides).items():
        assert p[field] == want, (key, p)
    # the dependent merge only where the device can: forced on an A100 it stays plain
    a100 = dict(H200, compute_major=8, merge_can_wait=False, has_two_pairs=False)
    if field == "merge_pdl":
        assert not any(p["merge_pdl"] for _, p in grid(a100, overrides).values())


def test_overrides_never_move_the_split_count():
    base = grid()
    for o in ("split_kernel=per_tile", "merge_pdl=0", "merge_warps=2,merge_by_lane=0"):
        assert {k: p["num_splits"] for k, (_, p) in grid(overrides=o).items()} == {
            k: p["num_splits"] for k, (_, p) in base.items()}


@pytest.mark.parametrize("bad, match", [
    ("split_kernel=fast", "split_kernel must be"), ("merge_warps=3", "merge_warps must be"),
    ("merge_pdl=yes", "merge_pdl must be 0 or 1"), ("num_splits=4", "unknown key 'num_splits'"),
    ("split_kernel", "split_kernel must be")])
def test_bad_overrides_are_refused(bad, match):
    with pytest.raises(ValueError, match=f"MUSE_ATTN_LAUNCH: {match}"):
        plan(shapes(1, 2048), overrides=bad)


@pytest.mark.parametrize("major", [8, 10])
def test_other_nvidia_gpus_run_neither_variant_by_default(major):
    """The variants are tuned on sm_90: an A100 gets plain launches and the per-tile kernel, a
    B200 a dependent merge by size and the per-tile kernel."""
    device = dict(H200, compute_major=major, has_two_pairs=False, merge_can_wait=major >= 9,
                  multiprocessors=148 if major == 10 else 108)
    for key, (_, p) in grid(device).items():
        assert p["split_kernel"] == "per_tile", (key, p)
        if major < 9:
            assert not p["merge_pdl"], (key, p)


def test_cpu_plan_is_its_split_count_alone():
    """The CPU handler has one scheme: its split count, and the balanced cut only where an
    override asks for it (so the CPU tests can run that cut)."""
    s = shapes(4, 8192)
    p = _ffi.launch_plan(s, "cpu", 0, "split_kernel=pingpong,merge_pdl=1")
    assert p == dict(num_splits=8, split_kernel="per_tile", merge_warps=1, merge_pdl=False,
                     merge_by_lane=False, balance_segments=False)
    assert _ffi.launch_plan(s, "cpu", 5, "")["num_splits"] == 5
    assert _ffi.launch_plan(s, "cpu", 0, "balance_segments=1")["balance_segments"] is True


def _segments(num_tiles, splits):
    """Segments with tiles when num_tiles tiles are cut into at most `splits` (written from
    muse_attn/geometry.h's definition)."""
    per_segment = max(-(-num_tiles // splits), 1)
    return -(-num_tiles // per_segment)


def test_split_count_is_the_longest_requests_segments():
    """No split CTA without tiles for the longest request a shape admits."""
    checked = 0
    for sms, R, pages, window, hkv in itertools.product(
            [78, 132, 304], [1, 2, 3, 4, 16], [1, 3, 8, 128, 512, 2048, 8192], [0, 40, 2048], [1, 2]):
        s = shapes(R, pages * PAGE, window, hq=8 * hkv, hkv=hkv)
        n = plan(s, dict(H200, multiprocessors=sms))["num_splits"]
        assert 1 <= n <= max(1, s.max_tiles)
        assert _segments(s.max_tiles, n) == n, (sms, R, pages, window, hkv, n, s.max_tiles)
        checked += 1
    assert checked == 3 * 5 * 7 * 3 * 2


def test_short_segments_past_two_ctas_an_sm_only_when_two_would_load_an_sm_more():
    seen_three, seen_two = 0, 0
    for sms, R, pages, window in itertools.product(
            [78, 114, 132, 304], [4, 6, 8, 12, 16, 24, 32], [64, 128, 256, 2048], [0, 2048]):
        s = shapes(R, pages * PAGE, window)
        n, tiles, groups = plan(s, dict(H200, multiprocessors=sms))["num_splits"], s.max_tiles, 2 * R
        if -(-tiles // n) >= 4:
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
    assert seen_three and seen_two


@pytest.mark.parametrize("major", [8, 9])
def test_segments_of_16_to_32_tiles_take_two_ctas_an_sm_where_pingpong_runs(major):
    """Full 128k R=4: 33 splits (63 tiles, 2 an SM) where the ping-pong kernel can run, 49 (3 an
    SM) elsewhere."""
    s = shapes(4, 128 * 1024)
    device = dict(H200, compute_major=major, has_two_pairs=major == 9)
    assert plan(s, device)["num_splits"] == (33 if major == 9 else 49)


def test_pinned_split_count_is_kept():
    assert plan(shapes(4, 8192), num_splits=7)["num_splits"] == 7


def test_sizes_the_handlers_refuse():
    with pytest.raises(ValueError, match="more than the GPU grid"):
        plan(shapes(40000, 64))


MERGE_WARPS_HARNESS = r"""
#include <cstdio>
#include "gpu/launch_plan.h"
int main() {
  int splits, groups, rows, sms, per_sm;
  while (std::scanf("%d %d %d %d %d", &splits, &groups, &rows, &sms, &per_sm) == 5)
    std::printf("%d\n", muse_attn::gpu::merge_warps_for(muse_attn::gpu::kTuning, splits, groups,
                                                        rows, sms, 32, per_sm));
  return 0;
}
"""


def test_merge_warps_a_row(tmp_path_factory):
    """The merge's warps a row (NVIDIA warps): one up to 16 segments (one batch, no meet of
    warps); past that a power of 2 up to 8 that loads every segment in one batch of 16 where 8
    warps can; more only while a warp still folds more than 9 segments and the merge's CTAs (8 / W
    rows each) stay within the bound an SM (one, or two beside the ping-pong kernel)."""
    from conftest import build_host_harness
    import subprocess
    exe = build_host_harness(tmp_path_factory, "merge_warps", MERGE_WARPS_HARNESS)
    cases = [(s, g, rows, sms, m) for s in (1, 8, 9, 10, 12, 16, 17, 32, 34, 64, 128, 300)
             for g in (1, 2, 4, 8, 32) for rows in (8, 64, 128) for sms in (0, 78, 132)
             for m in (1, 2)]

    def ask(cases):
        text = "".join(f"{' '.join(map(str, c))}\n" for c in cases)
        return list(map(int, subprocess.run([exe], input=text, capture_output=True, text=True,
                                            check=True).stdout.split()))

    out = ask(cases)
    assert len(out) == len(cases)

    def ctas(w, g, rows):
        return g * -(-rows // (8 // w))  # 256-thread CTAs of 32-lane warps

    widened = 0
    for (s, g, rows, sms, m), w in zip(cases, out):
        assert w in (1, 2, 4, 8), (s, g, rows, sms, m, w)
        fewest = h200_plans.fewest_merge_warps(s)
        assert w >= fewest, (s, g, rows, sms, m, w)
        if w > fewest:
            widened += 1
            assert ctas(w, g, rows) <= m * sms and (w // 2) * 9 < s, (s, g, rows, sms, m, w)
        if s <= 16:
            assert w == 1, (s, g, rows, sms, m, w)
        elif w < 8 and w * 9 < s:  # not widened further: the next width would not fit
            assert ctas(2 * w, g, rows) > m * sms, (s, g, rows, sms, m, w)
    assert widened > 10
    assert [w for c, w in zip(cases, out) if c[4] == 1] != [w for c, w in zip(cases, out) if c[4] == 2]
    # H200 (132 SMs; 2 KV heads, 64 rows a group), (splits, groups) -> warps: SWA R=1, full 2k
    # R=1, 8k R=1, 8k R=2, SWA R=2, 8k R=4, SWA R=8, full 2k R=2, R=4; then beside the ping-pong
    # kernel: full 128k R=2, 32k R=4, 128k R=4, 32k R=8.
    want = {(34, 2): 4, (32, 2): 4, (64, 2): 8, (64, 4): 4, (17, 4): 2, (32, 8): 2, (12, 16): 1,
            (16, 4): 1, (16, 8): 1}
    assert dict(zip(want, ask([(s, g, 64, 132, 1) for s, g in want]))) == want
    want = {(64, 4): 8, (32, 8): 4, (33, 8): 4, (16, 16): 1}
    assert dict(zip(want, ask([(s, g, 64, 132, 2) for s, g in want]))) == want


POOL_HARNESS = r"""
#include <cstdio>
#include <vector>
#include "muse_attn/geometry.h"
int main() {
  int n, splits;
  while (std::scanf("%d %d", &n, &splits) == 2) {
    std::vector<int> t(n);
    long long tiles = 0;
    int most = 0;
    for (int& x : t) {
      std::scanf("%d", &x);
      tiles += x;
      most = x > most ? x : most;
    }
    const long long slots = 1LL * n * splits;
    std::printf("%d\n", muse_attn::pool_length(tiles, most, slots, splits, [&](int len) {
      long long s = 0;
      for (int x : t) s += muse_attn::pool_segments(x, len);
      return s <= slots;
    }));
  }
  return 0;
}
"""


def test_balanced_cut_length(tmp_path_factory):
    """The balanced cut's segment length (muse_attn/geometry.h) against its definition: the
    shortest length >= 2 whose segments fit R * splits slots; never longer than the own cut's
    longest segment; equal lengths get the own cut's."""
    from conftest import build_host_harness
    import subprocess
    exe = build_host_harness(tmp_path_factory, "pool_length", POOL_HARNESS)
    rng = np.random.default_rng(3)
    cases = [([33] * 64, 2), ([129] * 256, 3), ([0, 0, 5], 4), ([1], 1), ([2048, 1, 1, 1], 8)]
    cases += [(list(rng.integers(0, 3000, size=rng.integers(1, 300))), int(rng.integers(1, 40)))
              for _ in range(200)]
    text = "".join(f"{len(t)} {s} {' '.join(map(str, t))}\n" for t, s in cases)
    got = list(map(int, subprocess.run([exe], input=text, capture_output=True, text=True,
                                       check=True).stdout.split()))

    def fits(t, s, length):
        return sum(-(-x // length) for x in t) <= len(t) * s

    for (t, s), length in zip(cases, got):
        own = max(-(-max(t) // s), 2)
        want = next(n for n in range(2, own + 1) if fits(t, s, n))
        assert length == want and length <= own, (t[:8], s, length, want, own)
        if len(set(t)) == 1 and t[0] >= 2 * s:
            assert length == -(-t[0] // s), (t[0], s, length)
