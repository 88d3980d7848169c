"""A representative set of verify_attention calls on the FFI backend, each checked against the
jnp reference: run it under compute-sanitizer (memcheck, racecheck) on a GPU machine.

    XLA_FLAGS=--xla_gpu_autotune_level=0 compute-sanitizer --tool memcheck python tools/sanitize_cases.py

XLA's autotuner must be off under compute-sanitizer: with it on, the tool crashes inside the JAX
process before any report (the autotuner's delay kernel times out under the tool).
SANITIZE_QUICK=1 runs two of the cases.
"""

import os
import sys

import jax.numpy as jnp
import numpy as np

import jax_muse_attn as jma

rng = np.random.default_rng(1)


def case(R, lens, pages, window=None, num_reqs=None, bad_ids=False, hq=16, hkv=2, d=64):
    blocks = R * pages + 5
    kv = rng.standard_normal((blocks, hkv, 16, 2 * d)).astype(np.float32)
    table = rng.permutation(blocks)[: R * pages].reshape(R, pages).astype(np.int32)
    lens = np.asarray(lens, np.int32)
    # Poison every slot past seq_len and before the window; stale ids outside the live range.
    for r in range(R):
        n = int(np.clip(lens[r], 0, 16 * pages))
        lo = max(0, n - 8 - window + 1) if window else 0
        for p in range(pages):
            if (p + 1) * 16 <= lo or p * 16 >= n:
                kv[table[r, p]] = np.nan
                table[r, p] = [-7, 1 << 30, -(1 << 30)][p % 3]
            else:
                for s in range(16):
                    if not lo <= p * 16 + s < n:
                        kv[table[r, p], :, s] = np.inf
    if bad_ids:
        table[0, 0] = blocks + 3
    q = rng.standard_normal((8 * R, hq, d)).astype(np.float32)
    args = (jnp.asarray(q, jnp.bfloat16), jnp.asarray(kv, jnp.bfloat16), jnp.asarray(table), jnp.asarray(lens))
    kw = dict(scale=d ** -0.5, window=window, num_reqs=num_reqs)
    got = np.asarray(jma.verify_attention(*args, backend="ffi", **kw), np.float64)
    want = np.asarray(jma.reference.verify_attention(*args, **kw), np.float64)
    ok = np.all(np.abs(got - want) <= 1e-2 + 2e-2 * np.abs(want))
    print(f"R={R} lens={list(lens)[:4]} window={window} num_reqs={num_reqs} bad_ids={bad_ids}: "
          f"{'ok' if ok else 'MISMATCH'}", flush=True)
    return ok


ok = True
if os.environ.get("SANITIZE_QUICK"):  # a short set for slow tools: full + poison, SWA, padding + bad ids, R = 16
    ok &= case(2, [700, 130], 48, bad_ids=True)
    ok &= case(16, list(rng.integers(0, 600, 16)), 40, window=128, num_reqs=11)
    print("ALL OK" if ok else "FAILURES")
    sys.exit(0 if ok else 1)
ok &= case(1, [700], 48)
ok &= case(2, [3000, 9], 200, window=2048)
ok &= case(4, [0, 5, 130, 4000], 256, num_reqs=2)
ok &= case(3, [1000, 99999, -5], 64, bad_ids=True)
ok &= case(16, list(rng.integers(0, 2100, 16)), 136, window=128)
ok &= case(2, [513, 1500], 96, hq=8, hkv=1, d=128)
print("ALL OK" if ok else "FAILURES")
sys.exit(0 if ok else 1)
