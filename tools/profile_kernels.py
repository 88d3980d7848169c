"""Runs verify_attention (backend="ffi") a few times on benchmark configs, for a profiler.

    ncu --clock-control none -k regex:'split_kernel|merge_kernel' --section SpeedOfLight \
        python tools/profile_kernels.py swa32k-r1 full32k-r4
    python tools/profile_kernels.py --splits 4,8,16 full32k-r4   # one run per split count
    python tools/profile_kernels.py full128k-r16-fp8 full8k-r1-tree   # FP8, a drafts call

Same data, config names and calls as benchmarks/bench.py (an FP8 cache with its per-tensor
scales, a -drafts / -tree / -lse call's arguments); MUSE_ATTN_LAUNCH applies as in any call. Each
run is checked against the jnp reference; prints the wall time of each run (not a benchmark: use
the benchmark).
"""

from __future__ import annotations

import argparse
import time

import os
import sys

import jax
import numpy as np

import jax_muse_attn
from jax_muse_attn import reference

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--splits", default="", help="comma-separated split counts (default: the library's)")
    a = ap.parse_args()
    for name in a.configs:
        c = bench.parse_config(name)
        q, kv, bt, sl = bench.jax_inputs(c)
        kw = dict(k_scale=np.float32(bench.KV_SCALE), v_scale=np.float32(bench.KV_SCALE)) if c.fp8 else {}
        kw.update(c.draft_kwargs())
        first = (lambda r: r[0]) if c.call == "lse" else (lambda r: r)  # noqa: E731
        ref = np.asarray(first(reference.verify_attention(q, kv, bt, sl, scale=bench.SCALE, window=c.window,
                                                          **kw)), np.float32)
        for splits in [int(s) for s in a.splits.split(",") if s] or [None]:
            f = jax.jit(lambda q, kv, bt, sl, s=splits: first(jax_muse_attn.verify_attention(
                q, kv, bt, sl, scale=bench.SCALE, window=c.window, backend="ffi", num_splits=s, **kw)))
            for i in range(a.runs):
                t0 = time.perf_counter()
                out = jax.block_until_ready(f(q, kv, bt, sl))
                dt = time.perf_counter() - t0
                err = float(np.max(np.abs(np.asarray(out, np.float32) - ref)))
                ok = err <= bench.ATOL + bench.RTOL * float(np.max(np.abs(ref)))
                print(f"{name} splits={splits} run {i}: {dt * 1e6:.1f} us wall, max err {err:.2e} "
                      f"{'ok' if ok else 'BAD'}", flush=True)


if __name__ == "__main__":
    main()
