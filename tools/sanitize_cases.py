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


# An FP8 NaN byte (e4m3fn 0x7F, e4m3fnuz 0x80) where the bf16 cases plant NaN or Inf.
FP8_NAN = {"float8_e4m3fn": 0x7F, "float8_e4m3fnuz": 0x80}


def case(R, lens, pages, window=None, num_reqs=None, bad_ids=False, hq=16, hkv=2, d=64, fp8=None):
    """fp8: None (bf16), or (format, "tensor" | "token") for an FP8 cache with those scales."""
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
    kw = dict(scale=d ** -0.5, window=window, num_reqs=num_reqs)
    if fp8 is None:
        cache = jnp.asarray(kv, jnp.bfloat16)
    else:
        fmt, kind = fp8
        poisoned = ~np.isfinite(kv)
        bits = np.array(jnp.asarray(np.where(poisoned, 0.0, kv * 8), fmt)).view(np.uint8)
        bits[poisoned] = FP8_NAN[fmt]
        cache = jnp.asarray(bits).view(fmt)
        if kind == "tensor":
            ks, vs = jnp.float32(0.125), jnp.float32(0.0625)
        else:  # per (token, KV head); NaN scales on blocks no request reads
            ks = rng.uniform(0.05, 0.2, (blocks, hkv, 16)).astype(np.float32)
            vs = rng.uniform(0.05, 0.2, (blocks, hkv, 16)).astype(np.float32)
            unread = np.setdiff1d(np.arange(blocks), table[table >= 0])
            ks[unread], vs[unread] = np.nan, np.inf
            ks, vs = jnp.asarray(ks), jnp.asarray(vs)
        kw.update(k_scale=ks, v_scale=vs)
    args = (jnp.asarray(q, jnp.bfloat16), cache, jnp.asarray(table), jnp.asarray(lens))
    got = np.asarray(jma.verify_attention(*args, backend="ffi", **kw), np.float64)
    want = np.asarray(jma.reference.verify_attention(*args, **kw), np.float64)
    ok = np.all(np.abs(got - want) <= 1e-2 + 2e-2 * np.abs(want))
    print(f"R={R} lens={list(lens)[:4]} window={window} num_reqs={num_reqs} bad_ids={bad_ids} fp8={fp8}: "
          f"{'ok' if ok else 'MISMATCH'}", flush=True)
    return ok


ok = True
if os.environ.get("SANITIZE_QUICK"):  # a short set for slow tools: full + poison, SWA, padding + bad ids, R = 16
    ok &= case(2, [700, 130], 48, bad_ids=True)
    ok &= case(16, list(rng.integers(0, 600, 16)), 40, window=128, num_reqs=11)
    ok &= case(3, [900, 40, 2100], 140, window=256, num_reqs=2, fp8=("float8_e4m3fn", "token"))
    print("ALL OK" if ok else "FAILURES")
    sys.exit(0 if ok else 1)
ok &= case(1, [700], 48)
ok &= case(2, [3000, 9], 200, window=2048)
ok &= case(4, [0, 5, 130, 4000], 256, num_reqs=2)
ok &= case(3, [1000, 99999, -5], 64, bad_ids=True)
ok &= case(16, list(rng.integers(0, 2100, 16)), 136, window=128)
ok &= case(2, [513, 1500], 96, hq=8, hkv=1, d=128)
ok &= case(2, [700, 130], 48, bad_ids=True, fp8=("float8_e4m3fn", "tensor"))
ok &= case(4, [0, 5, 1300, 4000], 256, window=2048, num_reqs=3, fp8=("float8_e4m3fn", "token"))
ok &= case(3, [1000, 99999, -5], 64, bad_ids=True, fp8=("float8_e4m3fnuz", "token"))
ok &= case(2, [513, 1500], 96, hq=8, hkv=1, d=128, fp8=("float8_e4m3fnuz", "tensor"))
print("ALL OK" if ok else "FAILURES")
sys.exit(0 if ok else 1)
