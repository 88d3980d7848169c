"""Tensor-parallel partitioning of verify_attention on 8 host CPU devices.

The checks run in one subprocess (tests/sharding_worker.py), since the host device count
(XLA_FLAGS) must be set before jax initializes and the rest of the suite already imported it.
Each test below asserts one of the worker's checks: TP8 (128/16 heads), TP4, TP2, full and SWA,
traced num_reqs, 2-D q, GSPMD, the shard_map form, jax.vmap, both backends, FP8 caches with
per-tensor and per-token scales, ragged drafts, trees and lse (lse head-sharded like out, the
draft operands replicated); every sharded result bitwise
equal to the unsharded call, no collectives in the compiled HLO, local head counts at the
custom call; and the refused shardings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "sharding_worker.py")

CHECKS = [
    *(f"{c}_{b}" for b in ("reference", "ffi") for c in (
        "tp8_128_16_full", "tp8_128_16_swa_traced", "tp4_128_16_full_traced", "tp4_64_8_swa",
        "tp2_32_4_full", "tp2_32_4_swa_traced", "tp8_q2d")),
    "tp8_num_splits3_ffi",
    *(f"{c}_{b}" for b in ("reference", "ffi") for c in (
        "tp8_fp8_tensor", "tp8_fp8_token", "tp4_fp8_token_full", "error_fp8_scales_replicated",
        "error_fp8_scale_slots_sharded")),
    "shard_map_tp8_fp8",
    "dp2_shard_map_tp4_fp8",
    "vmap_tp8_fp8",
    "default_splits_from_local_shapes",
    "shard_map_tp8",
    "dp2_shard_map_tp4_auto",
    "vmap_tp8",
    "gspmd_tp8",
    *(f"error_{e}_{b}" for b in ("reference", "ffi") for e in (
        "kv_replicated", "q_replicated", "q_rows_sharded", "kv_blocks_sharded", "kv_other_axis",
        "block_table_sharded")),
    "error_indivisible_heads",
    "tp_specs",
    *(f"{c}_{b}" for b in ("reference", "ffi") for c in (
        "tp8_drafts", "tp8_tree_defaults", "tp4_drafts_q2d_full", "tp8_drafts_fp8_token", "error_tree_mask_sharded",
        "error_draft_depths_sharded")),
    "gspmd_tp8_drafts",
    "shard_map_tp8_drafts",
    "dp2_shard_map_tp4_drafts",
    "vmap_tp8_drafts",
]


@pytest.fixture(scope="module")
def results():
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    # Run from the tests folder so that the installed package (not the source tree) is imported.
    proc = subprocess.run([sys.executable, WORKER], env=env, cwd=HERE, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"sharding worker failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("MUSE_RESULTS ")]
    if not lines:
        pytest.fail(f"sharding worker printed no MUSE_RESULTS line:\n{proc.stdout[-4000:]}")
    return json.loads(lines[-1][len("MUSE_RESULTS "):])


@pytest.mark.parametrize("name", CHECKS)
def test_sharding(results, name):
    assert name in results, f"the worker did not run {name!r}"
    r = results[name]
    assert r["ok"], f"{name}:\n{r['detail']}"


def test_no_unlisted_checks(results):
    assert sorted(results) == sorted(CHECKS)


def test_tp_gpu_check_script_cpu_dry_run():
    """tools/tp_gpu_check.py (the TP check run on the GPU machines) on 4 CPU host devices:
    the script itself stays runnable, and its checks (bitwise vs unsharded, no collectives, local
    head counts) pass."""
    script = os.path.join(HERE, "..", "tools", "tp_gpu_check.py")
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    proc = subprocess.run([sys.executable, script, "--tp", "4", "--cpu-dry-run"], env=env, cwd=HERE,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "TP4 on cpu x4: 64/8 heads" in proc.stdout and "ALL OK" in proc.stdout
    assert proc.stdout.count("bf16[") >= 6 and " none " in proc.stdout
