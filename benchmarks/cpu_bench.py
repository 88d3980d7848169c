"""The CPU handler against the jnp reference, under jax.jit, on the same inputs.

    python benchmarks/cpu_bench.py            # the grid below
    python benchmarks/cpu_bench.py --quick    # its configs up to 8k keys

Each config: R requests of L keys (every request full: seq_lens = L), 8 new tokens a request,
16 query / 2 KV heads, 16-key pages at shuffled block ids, scale 1/8, standard-normal q and KV in
bf16. The two backends are called alternately (so load from other processes hits both alike);
each prints its median per-call time and the ratio handler / reference (below 1: the handler is
faster). This decides backend="auto" on the CPU (jax_muse_attn/attention.py, resolve_backend).
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jax_muse_attn

NQ, HQ, HKV, PAGE = 8, 16, 2, 16

# (context L, requests R, window, head dim D)
GRID = ([(128, 1, None, 64), (128, 16, None, 64)]
        + [(L, R, None, 64) for L in (1024, 8192, 32768) for R in (1, 4, 16)]
        + [(L, R, 2048, 64) for L in (8192, 32768) for R in (1, 4, 16)]
        + [(8192, 4, None, 128)])


def make_inputs(L, R, D, seed=0):
    rng = np.random.default_rng(seed)
    pages = -(-L // PAGE)
    blocks = R * pages
    q = rng.standard_normal((NQ * R, HQ, D), np.float32)
    kv = rng.standard_normal((blocks, HKV, PAGE, 2 * D), np.float32)
    bt = rng.permutation(blocks).reshape(R, pages).astype(np.int32)
    return (jnp.asarray(q, jnp.bfloat16), jnp.asarray(kv, jnp.bfloat16), jnp.asarray(bt),
            jnp.full((R,), L, jnp.int32))


def time_pair(fns, args, budget_s, min_reps, max_reps):
    """Median seconds per call of each fn, called alternately until the budget is spent."""
    for f in fns:  # compile and warm up
        jax.block_until_ready(f(*args))
    samples = [[] for _ in fns]
    start = time.perf_counter()
    while len(samples[0]) < max_reps and (len(samples[0]) < min_reps
                                          or time.perf_counter() - start < budget_s):
        for f, s in zip(fns, samples):
            t0 = time.perf_counter()
            jax.block_until_ready(f(*args))
            s.append(time.perf_counter() - t0)
    return [statistics.median(s) for s in samples], len(samples[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="only the 1k and 8k configs")
    ap.add_argument("--budget-s", type=float, default=2.0, help="time a config at most (about)")
    ap.add_argument("--min-reps", type=int, default=3)
    ap.add_argument("--max-reps", type=int, default=50)
    args = ap.parse_args()
    if jax.default_backend() != "cpu":
        raise SystemExit(f"cpu_bench measures the CPU handler; the default backend is "
                         f"{jax.default_backend()!r} (set JAX_PLATFORMS=cpu)")

    def fn(backend, window):
        return jax.jit(lambda q, kv, bt, sl: jax_muse_attn.verify_attention(
            q, kv, bt, sl, scale=0.125, window=window, backend=backend))

    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, "
          f"{len(jax.devices())} device(s); Hq {HQ}, Hkv {HKV}, NQ {NQ}")
    print(f"{'L':>6} {'R':>3} {'window':>6} {'D':>4} {'splits':>6} {'reps':>4} "
          f"{'handler ms':>11} {'reference ms':>13} {'ratio':>6}")
    ratios = []
    for L, R, window, D in GRID:
        if args.quick and L > 8192:
            continue
        inputs = make_inputs(L, R, D)
        splits = jax_muse_attn.default_num_splits(*inputs[:3], window=window)
        (t_ffi, t_ref), reps = time_pair([fn("ffi", window), fn("reference", window)], inputs,
                                         args.budget_s, args.min_reps, args.max_reps)
        ratios.append(t_ffi / t_ref)
        print(f"{L:>6} {R:>3} {window or '-':>6} {D:>4} {splits:>6} {reps:>4} "
              f"{t_ffi * 1e3:>11.2f} {t_ref * 1e3:>13.2f} {t_ffi / t_ref:>6.2f}", flush=True)
    print(f"ratio handler/reference: max {max(ratios):.2f}, "
          f"geomean {float(np.exp(np.mean(np.log(ratios)))):.2f}")


if __name__ == "__main__":
    main()
