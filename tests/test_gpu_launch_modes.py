"""The GPU handler's launch choices (ffi/gpu/launch_plan.h), each forced, against the oracle.

By default the merge is a programmatic dependent launch (PDL) on sm_90+ (where the merge was
compiled for sm_90+) only when the split grid has at most 2 CTAs an SM, and the ping-pong split
kernel (D = 64) runs only on sm_90 GPUs where segments have 16 tiles or more, so the rest of the
suite sees each choice only where its cases fall. Here each is forced on every case of the
split-count tests of test_cpu_ffi.py (small and large grids, full and SWA, D = 128, padding,
poisoned slots, one-tile and odd-tile segments): MUSE_ATTN_PDL=0 for the plain launch, =1 for
PDL on every grid; MUSE_ATTN_PINGPONG=1 for the ping-pong split kernel wherever D = 64, =0 for
the one-warpgroup split kernel everywhere; MUSE_ATTN_PAIRS=1 for the split kernel that takes
two-tile segments as one step wherever D = 64 (the ping-pong kernel off), =0 for never. The plan
is read once a process, so each runs in its own pytest process.
"""

import os
import re
import subprocess
import sys

import jax
import pytest

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
    "split_one_team": {"MUSE_ATTN_PINGPONG": "0"},
    "split_pairs": {"MUSE_ATTN_PAIRS": "1", "MUSE_ATTN_PINGPONG": "0"},
    "split_no_pairs": {"MUSE_ATTN_PAIRS": "0"},
}


# The two-tile split kernel's plans also run test_gpu.py's two-tile-segment cases: by default
# the launch plan picks that kernel for them on an H200, but nothing there can tell which kernel
# ran; forced, both kernels are checked on them.
TWO_TILE_PLANS = ("split_pairs", "split_no_pairs")


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_forced_launch_plan(plan):
    env = dict(os.environ, **PLANS[plan])
    files, keywords = [os.path.join(HERE, "test_cpu_ffi.py")], "num_splits"
    if plan in TWO_TILE_PLANS:
        files, keywords = files + [os.path.join(HERE, "test_gpu.py")], "num_splits or two_tile"
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
                assert attention.default_num_splits(s, platform) == 33, kind
        assert attention.pingpong_split_kernel(s, platform) == (major == 9), (kind, major)
    else:
        assert not attention.pingpong_split_kernel(s, platform), (platform, kind)
