"""Per-call device time of verify_attention (FFI backend) for a few configs and split counts:
(t(N calls chained in one jit) - t(1 call)) / (N - 1), each call's output fed back as q.

    python scripts/quick_bench.py
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

import jax_muse_attn as jma


def per_call(R, context, window, splits, n=40, reps=15):
    rng = np.random.default_rng(0)
    pages = context // 16
    blocks = R * pages
    kv = jnp.asarray(rng.standard_normal((blocks, 2, 16, 128)), jnp.bfloat16)
    table = jnp.asarray(rng.permutation(blocks).reshape(R, pages), jnp.int32)
    lens = jnp.full((R,), context, jnp.int32)
    q = jnp.asarray(rng.standard_normal((8 * R, 16, 64)), jnp.bfloat16)

    def chain(k):
        def f(q, kv, table, lens):
            return jax.lax.fori_loop(0, k, lambda i, q: jma.verify_attention(
                q, kv, table, lens, scale=0.125, window=window, backend="ffi", num_splits=splits), q)
        return jax.jit(f)

    out = {}
    for k in (1, n):
        f = chain(k)
        f(q, kv, table, lens).block_until_ready()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            f(q, kv, table, lens).block_until_ready()
            ts.append(time.perf_counter() - t0)
        out[k] = np.median(ts)
    us = (out[n] - out[1]) / (n - 1) * 1e6
    kv_bytes = R * min(context, (window or context) + 7) * 2 * 64 * 2 * 2
    return us, kv_bytes / us / 1e3


import sys

quick = "--quick" in sys.argv
print(f"{'config':24s} {'splits':>7s} {'us/call':>9s} {'GB/s':>8s}")
for R, ctx, win in ((1, 32768, 2048), (4, 32768, 2048), (16, 32768, 2048), (1, 2048, None), (4, 8192, None),
                    (1, 32768, None), (4, 131072, None), (16, 131072, None)):
    for splits in ((None,) if quick else (None, 8, 32, 128)):
        us, gbs = per_call(R, ctx, win, splits)
        name = f"{'swa' if win else 'full'} R={R} L={ctx // 1024}k"
        print(f"{name:24s} {str(splits):>7s} {us:9.1f} {gbs:8.0f}", flush=True)
