"""The GPU handler's launch choices (ffi/gpu/launch_plan.h), each forced, against the oracle, and
the real device's default plans.

By default each split kernel and merge form runs only where the plan picks it, so the rest of the
suite sees each only where its cases fall. Here each is forced with MUSE_ATTN_LAUNCH on every
case of the split-count tests of test_cpu_ffi.py (small and large grids, full and SWA, D = 128,
padding, poisoned slots, one-tile and odd-tile segments), plus test_gpu.py's cases of the variant
(two-tile and four-tile segments, the merge's rows). Each runs in a pytest process of its own.
"""

import os
import subprocess
import sys

import jax
import pytest

import h200_plans

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(jax.default_backend() != "gpu",
                       reason=f"no GPU: JAX sees only {jax.default_backend()}"),
]

HERE = os.path.dirname(os.path.abspath(__file__))

# MUSE_ATTN_LAUNCH value -> the extra test_gpu.py cases it also runs
PLANS = {
    "merge_pdl=0": "merge_rows",
    "merge_pdl=1": "merge_rows",
    "merge_by_lane=1": "merge_rows",
    "merge_by_lane=0": "merge_rows",
    "merge_warps=1": "merge_rows",
    "merge_warps=8": "merge_rows",
    "split_kernel=per_tile": "two_tile or four_tile",
    "split_kernel=two_tile": "two_tile",
    "split_kernel=fill_ring": "four_tile",
    "split_kernel=pingpong": "two_tile or four_tile",
    "split_kernel=pingpong_two_pairs": "two_tile or four_tile",
    "balance_segments=1": "merge_rows or balanced",
}


@pytest.mark.parametrize("overrides", sorted(PLANS))
def test_forced_launch_plan(overrides):
    env = dict(os.environ, MUSE_ATTN_LAUNCH=overrides)
    files = [os.path.join(HERE, "test_cpu_ffi.py"), os.path.join(HERE, "test_gpu.py")]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
           "-k", f"num_splits or {PLANS[overrides]}", *files]
    proc = subprocess.run(cmd, env=env, cwd=HERE, capture_output=True, text=True, timeout=600)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"{overrides}\n{tail}"
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1], tail


def _grid_plans(overrides=""):
    """{(config, D): plan} of every config of the benchmark grid and h200_plans.OFF_GRID, at D =
    64 and 128, as jax_muse_attn.launch_plan gives it on this device."""
    import jax.numpy as jnp

    import jax_muse_attn
    old = os.environ.get("MUSE_ATTN_LAUNCH")
    os.environ["MUSE_ATTN_LAUNCH"] = overrides
    try:
        out = {}
        for name in h200_plans.GRID + h200_plans.OFF_GRID:
            keys, R, window = h200_plans.parse(name)
            pages = keys // h200_plans.PAGE
            for d in (64, 128):
                q = jax.ShapeDtypeStruct((h200_plans.NQ * R, h200_plans.HQ, d), jnp.bfloat16)
                kv = jax.ShapeDtypeStruct((R * pages, h200_plans.HKV, 16, 2 * d), jnp.bfloat16)
                bt = jax.ShapeDtypeStruct((R, pages), jnp.int32)
                out[name, d] = jax_muse_attn.launch_plan(q, kv, bt, window=window)
        return out
    finally:
        if old is None:
            os.environ.pop("MUSE_ATTN_LAUNCH")
        else:
            os.environ["MUSE_ATTN_LAUNCH"] = old


def test_default_launch_plans_of_the_benchmark_grid():
    from jax_muse_attn import _ffi
    d = _ffi.device_description(_ffi.current_platform())
    sm90, sms = d["vendor"] == "nvidia" and d["compute_major"] == 9, d["multiprocessors"]
    # tests/h200_plans.py describes an H200 / H100 SXM running the default build's sm_90a code
    h200 = sm90 and d["has_two_pairs"] and sms == h200_plans.SMS
    for (name, dim), plan in _grid_plans().items():
        if dim == 128 or not sm90:  # the variants are D = 64, tuned on sm_90; AMD reads a window cached
            cached = d["vendor"] == "amd" and h200_plans.parse(name)[2] is not None
            assert plan["split_kernel"] == ("per_tile_cached" if cached else "per_tile"), (name, dim, plan)
        ctas = h200_plans.parse(name)[1] * h200_plans.HKV * plan["num_splits"]
        pdl = d["vendor"] == "nvidia" and d["compute_major"] >= 9 and d["merge_can_wait"]
        assert plan["merge_pdl"] == (pdl and ctas <= 2 * sms), (name, dim, plan, d)
        if h200:
            assert plan["split_kernel"] == h200_plans.split_kernel(name, dim), (name, dim, plan)
            assert plan["merge_warps"] == h200_plans.merge_warps(name, dim, plan["num_splits"])
        assert plan["merge_by_lane"] == (-(-plan["num_splits"] // plan["merge_warps"]) <= 16)


def test_overridden_launch_plans_of_the_benchmark_grid():
    from jax_muse_attn import _ffi
    d = _ffi.device_description(_ffi.current_platform())
    nvidia = d["vendor"] == "nvidia"
    default = _grid_plans()
    for kernel in _ffi.SPLIT_KERNELS:
        # Where the vendor has the kernel (at D = 64 but per_tile and per_tile_cached); elsewhere
        # the default plan's.
        runs = (kernel in ("per_tile", "two_tile") or (nvidia and kernel != "per_tile_cached")
                or (not nvidia and kernel == "per_tile_cached"))
        want64 = kernel
        if want64 == "pingpong_two_pairs" and not d["has_two_pairs"]:
            want64 = "pingpong"
        for key, plan in _grid_plans(f"split_kernel={kernel}").items():
            here = runs and (key[1] == 64 or kernel in ("per_tile", "per_tile_cached"))
            assert plan["split_kernel"] == (want64 if here else default[key]["split_kernel"]), (kernel, key, plan)
    for (name, dim), plan in _grid_plans("merge_pdl=0").items():
        assert not plan["merge_pdl"], (name, dim, plan)
    pdl = nvidia and d["compute_major"] >= 9 and d["merge_can_wait"]
    for (name, dim), plan in _grid_plans("merge_pdl=1").items():
        assert plan["merge_pdl"] == pdl, (name, dim, plan)
    for forced in ("0", "1"):
        for (name, dim), plan in _grid_plans(f"merge_by_lane={forced}").items():
            assert plan["merge_by_lane"] == (forced == "1"), (forced, name, plan)
