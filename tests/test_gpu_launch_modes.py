"""The GPU handler's launch choices (ffi/gpu/launch_plan.h), each forced, against the oracle.

By default the merge is a programmatic dependent launch (PDL) on sm_90+ (where the merge was
compiled for sm_90+) only when the split grid has at most 2 CTAs an SM, and the ping-pong split
kernel (D = 64) runs only on sm_90 GPUs where segments have 16 tiles or more, so the rest of the
suite sees each choice only where its cases fall. Here each is forced on every case of the
split-count tests of test_cpu_ffi.py (small and large grids, full and SWA, D = 128, padding,
poisoned slots, one-tile and odd-tile segments): MUSE_ATTN_PDL=0 for the plain launch, =1 for
PDL on every grid; MUSE_ATTN_PINGPONG=1 for the ping-pong split kernel wherever D = 64 (with
MUSE_ATTN_PP_TWO_PAIRS=1 also as two pairs a CTA), =0 for the one-warpgroup split kernel
everywhere; MUSE_ATTN_PAIRS=1 for the split kernel that takes
two-tile segments as one step wherever D = 64 (the ping-pong kernel off), =0 for never;
MUSE_ATTN_MERGE_BY_LANE=1 / 0 for the merge weighing a segment on one lane / on every lane at any
split count (by default one lane up to 16 segments a warp); MUSE_ATTN_FILL_RING=1 for the split
kernel that issues a 4-tile segment's copies all in its prologue wherever D = 64 (the other two
variants off), =0 for never. The plan is read once a process, so each runs in its own pytest
process.
"""

import json
import os
import re
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

PLANS = {
    "merge_plain": {"MUSE_ATTN_PDL": "0"},
    "merge_pdl": {"MUSE_ATTN_PDL": "1"},
    "split_pingpong": {"MUSE_ATTN_PINGPONG": "1"},
    "split_pingpong_two_pairs": {"MUSE_ATTN_PINGPONG": "1", "MUSE_ATTN_PP_TWO_PAIRS": "1"},
    "split_one_team": {"MUSE_ATTN_PINGPONG": "0"},
    "split_pairs": {"MUSE_ATTN_PAIRS": "1", "MUSE_ATTN_PINGPONG": "0"},
    "split_no_pairs": {"MUSE_ATTN_PAIRS": "0"},
    "merge_by_lane": {"MUSE_ATTN_MERGE_BY_LANE": "1"},
    "merge_every_lane": {"MUSE_ATTN_MERGE_BY_LANE": "0"},
    "split_fill_ring": {"MUSE_ATTN_FILL_RING": "1", "MUSE_ATTN_PINGPONG": "0", "MUSE_ATTN_PAIRS": "0"},
    "split_no_fill_ring": {"MUSE_ATTN_FILL_RING": "0"},
}


# The two-tile split kernel's plans also run test_gpu.py's two-tile-segment cases: by default
# the launch plan picks that kernel for them on an H200, but nothing there can tell which kernel
# ran; forced, both kernels are checked on them.
TWO_TILE_PLANS = ("split_pairs", "split_no_pairs")
# The merge's plans also run test_gpu.py's merge-rows cases (1-8 warps a row, 1-300 splits).
MERGE_WAY_PLANS = ("merge_by_lane", "merge_every_lane")
# The fill-ring plans also run test_gpu.py's four-tile-segment cases (by default that kernel on
# an H200 for them; forced, both kernels are checked on them).
FILL_RING_PLANS = ("split_fill_ring", "split_no_fill_ring")


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_forced_launch_plan(plan):
    env = dict(os.environ, **PLANS[plan])
    files, keywords = [os.path.join(HERE, "test_cpu_ffi.py")], "num_splits"
    if plan in TWO_TILE_PLANS:
        files, keywords = files + [os.path.join(HERE, "test_gpu.py")], "num_splits or two_tile"
    if plan in MERGE_WAY_PLANS:
        files, keywords = files + [os.path.join(HERE, "test_gpu.py")], "num_splits or merge_rows"
    if plan in FILL_RING_PLANS:
        files, keywords = files + [os.path.join(HERE, "test_gpu.py")], "num_splits or four_tile"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
           "-k", keywords, *files]
    proc = subprocess.run(cmd, env=env, cwd=HERE, capture_output=True, text=True, timeout=600)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"{plan}: {PLANS[plan]}\n{tail}"
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1], tail


def test_split_count_sees_the_gpu_the_launch_plan_sees(monkeypatch):
    # The split count (jax_muse_attn/attention.py) takes longer segments at 2 CTAs an SM where the
    # launch plan (ffi/gpu/launch_plan.h) will run the ping-pong split kernel: an sm_90 GPU, D = 64.
    # Both must read the same device, through the platform name XLA gives ("CUDA") and JAX's
    # device; version 15's first grid ran with a check of "cuda" that never matched.
    from jax_muse_attn import _ffi, _validate, attention
    monkeypatch.delenv("MUSE_ATTN_PINGPONG", raising=False)
    platform, major = _ffi.current_platform(), _ffi.compute_capability_major()
    kind = jax.devices()[0].device_kind
    s = _validate.Shapes(num_requests=4, tokens=8, num_q_heads=16, num_kv_heads=2, head_dim=64,
                         num_blocks=1, pages=8192, window=0, q_rank=3)
    if platform == "CUDA":
        assert major >= 5, (kind, major)  # every GPU JAX runs on has one
        if re.search(r"\bH(100|200|800)\b", kind):
            assert major == 9, (kind, major)
            if _ffi.multiprocessor_count() == 132:  # H200 / H100 SXM: full 128k R=4 at 2 an SM
                assert attention._default_num_splits(s, platform) == 33, kind
        assert attention.pingpong_split_kernel(s, platform) == (major == 9), (kind, major)
    else:
        assert not attention.pingpong_split_kernel(s, platform), (platform, kind)


# The plan of every config of the benchmark grid (jax_muse_attn.bench: Hq 16, Hkv 2, D 64, 8
# tokens; the split count as verify_attention picks it) and of h200_plans.OFF_GRID, plus the same
# shapes at D = 128, asked
# of jax_muse_attn.launch_plan in a process with the given overrides (the plan reads them once a
# process) and none other.
_PLAN_SCRIPT = """
import json, sys
import jax, jax.numpy as jnp
import jax_muse_attn
from jax_muse_attn import bench
out = {}
for c in bench.full_grid() + [bench.parse_config(n) for n in sys.argv[1:]]:
    for d in (64, 128):
        q = jax.ShapeDtypeStruct((bench.NQ * c.R, bench.H_Q, d), jnp.bfloat16)
        kv = jax.ShapeDtypeStruct((c.blocks, bench.H_KV, bench.PAGE, 2 * d), jnp.bfloat16)
        bt = jax.ShapeDtypeStruct((c.R, c.pages), jnp.int32)
        out[f"{c.name}-d{d}"] = jax_muse_attn.launch_plan(q, kv, bt, window=c.window)
json.dump(out, sys.stdout)
"""
_OVERRIDES = ("MUSE_ATTN_PDL", "MUSE_ATTN_PINGPONG", "MUSE_ATTN_PAIRS", "MUSE_ATTN_MERGE_BY_LANE",
              "MUSE_ATTN_FILL_RING", "MUSE_ATTN_PP_TWO_PAIRS")


def _grid_plans(**overrides):
    env = {k: v for k, v in os.environ.items() if k not in _OVERRIDES}
    env.update(overrides)
    proc = subprocess.run([sys.executable, "-c", _PLAN_SCRIPT, *h200_plans.OFF_GRID], env=env,
                          cwd=HERE, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def test_default_launch_plans_of_the_benchmark_grid():
    from jax_muse_attn import _ffi, bench
    plans = _grid_plans()
    major, sms = _ffi.compute_capability_major(), _ffi.multiprocessor_count()
    # what tests/h200_plans.py says of an H200 running the default build's sm_90a code (an
    # sm_90-only build runs the ping-pong kernel as one pair a CTA, 12 splits at 128k R=16)
    h200 = _ffi.sm90a_code() and sms == 132
    for name, plan in plans.items():
        config, d = name.rsplit("-d", 1)
        if d == "128" or major != 9:  # both variants are D = 64, tuned for sm_90 only
            assert plan["split_kernel"] == "per_tile", (name, plan)
        # R x Hkv x splits (the grid's 64 rows a group are one row block)
        ctas = int(config.rsplit("-r", 1)[1]) * bench.H_KV * plan["num_splits"]
        if major >= 9 and _ffi.current_platform() == "CUDA":
            assert plan["merge_pdl"] == (ctas <= 2 * sms), (name, plan, sms)
        else:
            assert not plan["merge_pdl"], (name, plan)
        if h200 and d == "64":
            assert plan["split_kernel"] == h200_plans.split_kernel(config, 64), (name, plan)
            # the merge weighs by one lane everywhere in the grid (at most 16 segments a warp:
            # with bf16 partials one lane won at 16 too, at 8 of the 11 grid configs it changes;
            # NOTES.md version 22)
            assert plan["merge_by_lane"] is True, (name, plan)
            assert plan["split_fill_ring"] == h200_plans.fill_ring(config, 64), (name, plan)
            assert plan["merge_warps"] == h200_plans.merge_warps(config, 64, plan["num_splits"]), (
                name, plan)
        if d == "128" or plan["split_kernel"] != "per_tile" or major != 9:
            assert plan["split_fill_ring"] is False, (name, plan)
        # a warp's segments: every W-th of the call's splits
        per_warp = -(-plan["num_splits"] // plan["merge_warps"])
        assert plan["merge_by_lane"] == (per_warp <= 16), (name, plan)


def test_overridden_launch_plans_of_the_benchmark_grid():
    from jax_muse_attn import _ffi
    cuda = _ffi.current_platform() == "CUDA"  # AMD: plain launches, one split kernel
    sm90a = _ffi.sm90a_code()  # an sm_90 GPU and the default build's sm_90a code
    for overrides, d64, d128, pdl in [
        ({"MUSE_ATTN_PINGPONG": "1", "MUSE_ATTN_PP_TWO_PAIRS": "0"}, "pingpong" if cuda else "per_tile",
         "per_tile", None),
        ({"MUSE_ATTN_PINGPONG": "1", "MUSE_ATTN_PP_TWO_PAIRS": "1"},
         ("pingpong_two_pairs" if sm90a else "pingpong") if cuda else "per_tile", "per_tile", None),
        ({"MUSE_ATTN_PAIRS": "1", "MUSE_ATTN_PINGPONG": "0"}, "two_tile" if cuda else "per_tile",
         "per_tile", None),
        ({"MUSE_ATTN_PAIRS": "0", "MUSE_ATTN_PINGPONG": "0"}, "per_tile", "per_tile", None),
        ({"MUSE_ATTN_PDL": "0"}, None, None, False),
        ({"MUSE_ATTN_PDL": "1"}, None, None, cuda and _ffi.compute_capability_major() >= 9),
    ]:
        for name, plan in _grid_plans(**overrides).items():
            want = d128 if name.endswith("-d128") else d64
            if want is not None:
                assert plan["split_kernel"] == want, (overrides, name, plan)
            if pdl is not None:
                assert plan["merge_pdl"] == pdl, (overrides, name, plan)
    # the fill-ring split kernel: NVIDIA, D = 64, where neither other variant runs
    for name, plan in _grid_plans(MUSE_ATTN_FILL_RING="1", MUSE_ATTN_PINGPONG="0",
                                  MUSE_ATTN_PAIRS="0").items():
        assert plan["split_kernel"] == "per_tile", (name, plan)
        assert plan["split_fill_ring"] == (cuda and name.endswith("-d64")), (name, plan)
    for name, plan in _grid_plans(MUSE_ATTN_FILL_RING="0").items():
        assert plan["split_fill_ring"] is False, (name, plan)
    # with the merge a plain launch the merge's CTAs need not fit beside the split CTAs: on an
    # H200 every config with 4-tile segments takes the fill ring, full 2k R=16 too; the two-tile
    # step at 2 split CTAs an SM was measured only beside a programmatic dependent merge, so it
    # keeps the 1.5 an SM bound there
    if _ffi.sm90a_code() and _ffi.multiprocessor_count() == 132:
        for name, plan in _grid_plans(MUSE_ATTN_PDL="0").items():
            config, d = name.rsplit("-d", 1)
            assert plan["split_fill_ring"] == h200_plans.fill_ring(config, int(d), pdl=False), (
                name, plan)
            assert plan["split_kernel"] == h200_plans.split_kernel_without_pdl(config, int(d)), (
                name, plan)
    for forced in ("0", "1"):  # both merges are built for every platform
        for name, plan in _grid_plans(MUSE_ATTN_MERGE_BY_LANE=forced).items():
            assert plan["merge_by_lane"] == (forced == "1"), (forced, name, plan)
