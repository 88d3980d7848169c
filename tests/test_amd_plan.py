"""The AMD launch plan's own table (ffi/gpu/amd_targets.h), on a CPU: its hardware numbers, the
values it derives (checked against tools/amd_model.py's independent occupancy model), and the
plan's use of them: the split count's one-wave target per target, unknown AMD GPUs, and NVIDIA's
plan never reading it."""

import itertools
import os
import sys

import pytest

import h200_plans
from jax_muse_attn import _ffi, _validate

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import amd_model as am  # noqa: E402

M = _ffi._MODULE
TABLE = {row["name"]: row for row in M.amd_targets()}


def amd(gfx, cus):
    return dict(vendor="amd", multiprocessors=cus, compute_major=0, warp_size=64,
                merge_can_wait=False, has_two_pairs=False, amd_gfx=gfx)


def plan(device, D=64, NQ=8, hq=16, hkv=2, R=4, keys=32768, window=0, splits=0, overrides="",
         fp8=False, drafts=False):
    return dict(M.launch_plan(D, NQ, hq, hkv, R, -(-keys // 16), window, device["vendor"],
                              device["multiprocessors"], device["compute_major"],
                              device["warp_size"], device["merge_can_wait"],
                              device["has_two_pairs"], splits, overrides, fp8, drafts,
                              device.get("amd_gfx", 0)))


def test_the_table_holds_each_targets_hardware():
    g942, g950 = TABLE["gfx942"], TABLE["gfx950"]
    assert (g942["gfx"], g942["cus"], g942["lds_bytes"]) == (942, 304, 64 * 1024)
    assert (g950["gfx"], g950["cus"], g950["lds_bytes"]) == (950, 256, 160 * 1024)
    for name, row in TABLE.items():  # the same numbers as the model's (which cites them)
        spec, gpu = am.ARCH_SPECS[name], next(g for g in am.GPUS.values() if g.arch == name)
        assert (row["cus"], row["lds_bytes"], row["lds_granule"], row["vgprs_per_simd"],
                row["vgpr_granule"], row["max_waves_per_simd"], row["simds_per_cu"]) == (
            gpu.cus, spec.lds_per_cu, spec.lds_granule, spec.vgprs_per_simd, spec.vgpr_granule,
            spec.max_waves_per_simd, spec.simds_per_cu), name


@pytest.mark.parametrize("name", ["gfx942", "gfx950"])
@pytest.mark.parametrize("D", [64, 128])
def test_split_ctas_per_cu_is_what_lds_and_vgprs_allow(name, D):
    """The model's occupancy of a 256-thread split workgroup with the table's LDS bytes and VGPRs
    gives the table's count."""
    row = TABLE[name]
    lds = row[f"split_lds_bytes_d{D}"]
    assert lds == (2 if D == 64 else 1) * 2 * 64 * D * 2 + 64 * D * 2  # stages of K and V, then Q
    occ = am.occupancy(row[f"split_vgprs_d{D}"], 0, lds, 256, am.ARCH_SPECS[name])
    assert row[f"split_ctas_per_cu_d{D}"] == max(1, occ["workgroups_per_cu"]), occ


def test_the_derived_counts():
    # gfx942: 40 / 48 KiB workgroups, one fits 64 KiB; gfx950: four 40 KiB ones fit 160 KiB (120
    # VGPRs leave four waves a SIMD), and three 48 KiB ones at D = 128, where 168 VGPRs leave three.
    assert [(TABLE[n]["split_ctas_per_cu_d64"], TABLE[n]["split_ctas_per_cu_d128"])
            for n in ("gfx942", "gfx950")] == [(1, 1), (4, 3)]


SHAPES = list(itertools.product([64, 128], [(16, 2), (8, 8), (128, 16)], [1, 2, 4, 8, 16, 37],
                                [2048, 8192, 32768, 131072], [0, 2048]))


@pytest.mark.parametrize("name", ["gfx942", "gfx950"])
def test_split_ctas_fit_one_wave_of_the_targets_cus(name):
    """The split count targets one wave at the table's workgroups a CU: never more split CTAs
    than that, unless one segment a group already overflows it or segments would be longer than
    128 tiles (then at most 2 more than twice the count that caps them)."""
    row = TABLE[name]
    device = amd(row["gfx"], row["cus"])
    grew = 0
    for D, (hq, hkv), R, keys, window in SHAPES:
        p = plan(device, D=D, hq=hq, hkv=hkv, R=R, keys=keys, window=window)
        cps = R * hkv * -(-8 * (hq // hkv) // 64)
        per_cu = row[f"split_ctas_per_cu_d{D}"]
        assert p["split_kernel"] == ("per_tile_cached" if window else "per_tile"), p
        assert not p["merge_pdl"], p
        pages = -(-keys // 16)
        tiles = _validate.Shapes(num_requests=R, tokens=8, num_q_heads=hq, num_kv_heads=hkv,
                                 head_dim=D, num_blocks=R * pages, pages=pages, window=window,
                                 q_rank=3).max_tiles
        least = -(-tiles // 128)
        assert (p["num_splits"] * cps <= max(per_cu * row["cus"], cps)
                or least <= p["num_splits"] <= 2 * least + 2), (D, hq, hkv, R, keys, p)
        grew += least == 1 and p["num_splits"] > 1 and p["num_splits"] * cps > row["cus"]
    assert (grew > 0) == (name == "gfx950")  # where the cap is not met, only gfx950 holds more


def test_the_row_decides_at_equal_cus():
    """Same CUs, the gfx950 row (2 a CU) cuts a long call into twice gfx942's segments."""
    long = dict(R=4, keys=131072)
    p942, p950 = plan(amd(942, 256), **long), plan(amd(950, 256), **long)
    assert (p942["num_splits"], p950["num_splits"]) == (32, 64), (p942, p950)


def test_the_table_changes_amds_plan_from_the_h100_tuning():
    """Before the table, AMD took the H100 count (3 CTAs an SM): 3 waves of CTAs on gfx942."""
    p = plan(amd(942, 304), R=4, keys=131072)
    assert p["num_splits"] * 8 <= 304 < 3 * 38 * 8, p


def test_an_unknown_amd_gpu_takes_the_gfx942_row():
    for gfx in (0, 908, 1100):
        for kw in (dict(R=4, keys=131072), dict(R=1, keys=8192, D=128), dict(R=16, keys=2048)):
            assert plan(amd(gfx, 104), **kw) == plan(amd(942, 104), **kw), (gfx, kw)


def test_pinned_counts_and_overrides_still_apply_on_amd():
    assert plan(amd(950, 256), splits=7)["num_splits"] == 7
    assert plan(amd(950, 256), overrides="split_kernel=two_tile")["split_kernel"] == "two_tile"
    assert plan(amd(942, 304), fp8=True)["split_kernel"] == "per_tile"


def test_balanced_cut_on_amd():
    """The AMD plan takes the balanced cut by NVIDIA's rule (its thresholds until measured): full
    attention, 2-64 requests, more than one split, segments of 64 tiles or more, no FP8 cache at
    D = 128."""
    seen = set()
    for kw in (dict(R=16, keys=131072), dict(R=64, keys=131072), dict(R=16, keys=8192),
               dict(R=128, keys=131072), dict(R=16, keys=131072, window=2048),
               dict(R=16, keys=131072, D=128, fp8=True), dict(R=16, keys=131072, D=128)):
        for gfx, cus in ((942, 304), (950, 256)):
            p = plan(amd(gfx, cus), **kw)
            tiles = -(-(-(-kw["keys"] // 16) * 16) // 64)
            want = (not kw.get("window") and 2 <= kw["R"] <= 64 and p["num_splits"] > 1
                    and -(-tiles // p["num_splits"]) >= 64
                    and not (kw.get("fp8") and kw.get("D") == 128))
            assert p["balance_segments"] == want, (gfx, kw, p)
            seen.add(want)
    assert seen == {True, False}


def test_a_windows_keys_through_the_caches_on_amd():
    """AMD reads a window's K/V with cached loads (per_tile_cached, bf16 and FP8, by the row's
    cache_window_kv) and full attention's nontemporal (per_tile); the drafts kernels and the
    balanced cut have no cached variant; NVIDIA never picks it."""
    for gfx, cus in ((942, 304), (950, 256)):
        assert TABLE[f"gfx{gfx}"]["cache_window_kv"] is True
        dev = amd(gfx, cus)
        for D, fp8, R in itertools.product((64, 128), (False, True), (1, 16, 256)):
            assert plan(dev, D=D, R=R, window=2048, fp8=fp8)["split_kernel"] == "per_tile_cached"
            assert plan(dev, D=D, R=R, fp8=fp8)["split_kernel"] == "per_tile", (gfx, D, fp8, R)
        assert plan(dev, R=16, window=2048, drafts=True)["split_kernel"] == "per_tile"
        assert plan(dev, R=16, overrides="split_kernel=per_tile_cached")["split_kernel"] == "per_tile_cached"
        forced = plan(dev, R=16, keys=131072, overrides="split_kernel=per_tile_cached,balance_segments=1")
        assert (forced["split_kernel"], forced["balance_segments"]) == ("per_tile", True), forced
        off = plan(dev, R=16, window=2048, overrides="split_kernel=per_tile")
        assert off["split_kernel"] == "per_tile", off
    for name in h200_plans.GRID:
        keys, R, window = h200_plans.parse(name)
        for D in (64, 128):
            p = plan(h200_plans.H200, D=D, R=R, keys=keys, window=window or 0,
                     overrides="split_kernel=per_tile_cached")
            assert p["split_kernel"] != "per_tile_cached", (name, D, p)


def test_nvidia_plans_never_read_the_amd_field():
    for name in h200_plans.GRID:
        keys, R, window = h200_plans.parse(name)
        for D in (64, 128):
            base = plan(h200_plans.H200, D=D, R=R, keys=keys, window=window or 0)
            for gfx in (942, 950):
                assert plan(dict(h200_plans.H200, amd_gfx=gfx), D=D, R=R, keys=keys,
                            window=window or 0) == base, (name, D, gfx)


@pytest.mark.parametrize("arch,gfx", [("gfx942:sramecc+:xnack-", 942), ("gfx950", 950),
                                      ("gfx90a:xnack+", 0), ("gfx1100", 1100), ("sm_90", 0),
                                      ("gfx", 0), ("", 0)])
def test_gfx_number_of_the_runtime_arch_name(arch, gfx):
    assert M.amd_gfx_number(arch) == gfx


def test_the_cpu_description_has_no_amd_target():
    assert _ffi.device_description("cpu")["amd_gfx"] == 0
