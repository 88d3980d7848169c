"""The main job: one Muse Spark verify step on the default backend, checked and timed.

    python -m jax_muse_attn [--requests 4] [--context 8192] [--window 2048] [--backend auto]

Builds one TP rank's verify step (16 q heads / 2 KV heads, D 64, 8 new tokens a request) over
a paged cache with shuffled block ids, for a full-attention layer and a sliding-window layer,
runs each under jax.jit on the chosen backend, checks it against the jnp reference
(|out - ref| <= 1e-2 + 2e-2 |ref|) and prints the backend, the max error and the median time per
call. Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def build_case(rng, *, requests, context, q_heads, kv_heads, head_dim, tokens):
    import jax.numpy as jnp

    pages = -(-context // 16)
    blocks = requests * pages + 7
    kv = rng.standard_normal((blocks, kv_heads, 16, 2 * head_dim), dtype=np.float32)
    table = rng.permutation(blocks)[: requests * pages].reshape(requests, pages).astype(np.int32)
    # Different lengths a request, the longest at the full context.
    lens = np.linspace(context, max(tokens, context // 2), requests).astype(np.int32)
    q = rng.standard_normal((tokens * requests, q_heads, head_dim), dtype=np.float32)
    return (jnp.asarray(q, jnp.bfloat16), jnp.asarray(kv, jnp.bfloat16), jnp.asarray(table),
            jnp.asarray(lens))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jax_muse_attn", description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=4, help="requests R (default 4)")
    ap.add_argument("--context", type=int, default=8192, help="keys of the longest request (default 8192)")
    ap.add_argument("--window", type=int, default=2048, help="sliding window of the SWA layer (default 2048)")
    ap.add_argument("--backend", default="auto", choices=("auto", "ffi", "reference"))
    ap.add_argument("--repeats", type=int, default=20, help="timed calls (default 20)")
    ap.add_argument("--q-heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64, choices=(64, 128))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import jax

    import jax_muse_attn
    from jax_muse_attn.attention import resolve_backend

    kind, platform = resolve_backend(args.backend)
    print(f"jax {jax.__version__} on {jax.default_backend()} ({jax.devices()[0].device_kind}); "
          f"handlers built for {jax_muse_attn.registered_platforms()}; backend={args.backend} -> "
          f"{kind}" + (f" ({platform} handler)" if kind == "ffi" else ""))
    rng = np.random.default_rng(args.seed)
    q, kv, table, lens = build_case(rng, requests=args.requests, context=args.context,
                                    q_heads=args.q_heads, kv_heads=args.kv_heads,
                                    head_dim=args.head_dim, tokens=8)
    scale = args.head_dim ** -0.5
    ok = True
    for name, window in (("full", None), (f"swa{args.window}", args.window)):
        run = jax.jit(lambda q, kv, t, s, w=window: jax_muse_attn.verify_attention(
            q, kv, t, s, scale=scale, window=w, backend=args.backend))
        ref = jax.jit(lambda q, kv, t, s, w=window: jax_muse_attn.reference.verify_attention(
            q, kv, t, s, scale=scale, window=w))
        out = run(q, kv, table, lens).block_until_ready()
        want = np.asarray(ref(q, kv, table, lens), np.float64)
        got = np.asarray(out, np.float64)
        err = np.abs(got - want)
        bad = ~(err <= 1e-2 + 2e-2 * np.abs(want))
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            run(q, kv, table, lens).block_until_ready()
            times.append(time.perf_counter() - t0)
        status = "OK" if not bad.any() else f"FAIL ({int(bad.sum())} elements out of tolerance)"
        ok &= not bad.any()
        print(f"{name:8s} R={args.requests} context={args.context} heads={args.q_heads}/{args.kv_heads} "
              f"D={args.head_dim}: max|err| {np.nanmax(err):.3e}  median {np.median(times) * 1e6:9.1f} us/call "
              f"(wall, {args.repeats} calls)  {status}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
