"""The main job: one Muse Spark verify step on the default backend, checked and timed.

    python -m jax_muse_attn [--requests 4] [--context 8192] [--window 2048] [--backend auto]
                            [--kv-dtype bf16|fp8] [--kv-scales tensor|token]

Builds one TP rank's verify step (16 q heads / 2 KV heads, D 64, 8 new tokens a request) over
a paged cache with shuffled block ids, for a full-attention layer and a sliding-window layer,
runs each under jax.jit on the chosen backend, checks it against a float64 numpy computation
of the same attention (|out - expected| <= 1e-2 + 2e-2 |expected|; written here, independent of
the jnp reference and of the kernels) and prints the backend, the max error and the median time
per call. Exits 1 when a check fails, 2 on a bad option.

--kv-dtype fp8 quantizes the cache to float8_e4m3fn as an engine does (scales amax / 448, per
tensor or, with --kv-scales token, per block, KV head and slot); the float64 computation then
reads the cache as scale * value, decoded by ml_dtypes.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

TOKENS = 8  # new tokens a request (Muse Spark verifies 8)
FP8_DTYPE = "float8_e4m3fn"  # --kv-dtype fp8
PAGE = 16
ATOL, RTOL = 1e-2, 2e-2
MAX_INPUT_BYTES = 8 << 30  # the cache, q and the float64 check's copies must fit a host


def build_case(rng, *, requests, context, q_heads, kv_heads, head_dim, tokens=TOKENS):
    """Host arrays: q [tokens*R, Hq, D] and kv [blocks, Hkv, 16, 2D] as bf16-rounded float32,
    a shuffled block table [R, pages] and seq_lens [R] from context down to about half."""
    import jax.numpy as jnp

    pages = -(-context // PAGE)
    blocks = requests * pages + 7
    kv = rng.standard_normal((blocks, kv_heads, PAGE, 2 * head_dim), dtype=np.float32)
    table = rng.permutation(blocks)[: requests * pages].reshape(requests, pages).astype(np.int32)
    lens = np.linspace(context, max(tokens, context // 2), requests).astype(np.int32)
    q = rng.standard_normal((tokens * requests, q_heads, head_dim), dtype=np.float32)
    q, kv = (np.asarray(jnp.asarray(x, jnp.bfloat16), np.float32) for x in (q, kv))
    return q, kv, table, lens


def quantize_fp8(kv, scale_kind, dtype=FP8_DTYPE):
    """kv [blocks, Hkv, 16, 2D] float32 -> (FP8 bytes as an ml_dtypes array, k_scale, v_scale),
    as an engine quantizes a cache: scale = amax / max of the format (amax over the whole K or V
    tensor, or over each slot's D values), bytes = fp8(x / scale) to nearest even."""
    import ml_dtypes

    fp8 = np.dtype(getattr(ml_dtypes, dtype))
    fmax = float(ml_dtypes.finfo(fp8).max)
    d = kv.shape[-1] // 2
    out = np.empty(kv.shape, fp8)
    scales = []
    for part in (slice(0, d), slice(d, None)):
        x = kv[..., part]
        amax = np.abs(x).max() if scale_kind == "tensor" else np.abs(x).max(axis=-1)
        s = np.where(amax > 0, amax / fmax, 1.0).astype(np.float32)
        out[..., part] = np.clip(x / (s if s.ndim == 0 else s[..., None]), -fmax, fmax).astype(fp8)
        scales.append(s)
    return out, scales[0], scales[1]


def dequantize_fp8(kv8, k_scale, v_scale):
    """The float64 cache an FP8 cache stands for: scale * value, each byte decoded by ml_dtypes
    (no rounding: the library's bf16 rounding of K and V is within the check's tolerance)."""
    kv = kv8.astype(np.float64)
    d = kv.shape[-1] // 2
    for part, s in ((slice(0, d), k_scale), (slice(d, None), v_scale)):
        s = np.asarray(s, np.float64)
        kv[..., part] *= s if s.ndim == 0 else s[..., None]
    return kv


def expected_output(q, kv, table, lens, *, scale, window, tokens=TOKENS):
    """The attention in float64 numpy, dense per (request, KV head): the check's answer."""
    hkv, two_d = kv.shape[1], kv.shape[3]
    d = two_d // 2
    hq = q.shape[1]
    qpk = hq // hkv
    out = np.zeros(q.shape, np.float64)
    for r, seq_len in enumerate(int(x) for x in lens):
        keys = np.arange(seq_len)
        qpos = seq_len - tokens + np.arange(tokens)  # [tokens]
        lo = np.zeros_like(qpos) if window is None else np.maximum(qpos - window + 1, 0)
        seen = (keys[None, :] >= lo[:, None]) & (keys[None, :] <= qpos[:, None])  # [tokens, keys]
        rows = q[tokens * r: tokens * (r + 1)].astype(np.float64)  # [tokens, Hq, D]
        for g in range(hkv):
            cache = kv[table[r, keys // PAGE], g, keys % PAGE].astype(np.float64)  # [keys, 2D]
            qg = rows[:, g * qpk: (g + 1) * qpk]  # [tokens, qpk, D]
            s = scale * np.einsum("tjd,kd->tjk", qg, cache[:, :d])
            s = np.where(seen[:, None, :], s, -np.inf)
            m = s.max(axis=-1, keepdims=True, initial=-np.inf)
            p = np.where(seen[:, None, :], np.exp(s - np.where(np.isfinite(m), m, 0.0)), 0.0)
            l = p.sum(axis=-1, keepdims=True)
            o = np.einsum("tjk,kd->tjd", p, cache[:, d:])
            got = np.where(l > 0, o / np.where(l > 0, l, 1), 0)
            out[tokens * r: tokens * (r + 1), g * qpk: (g + 1) * qpk] = got
    return out


def _int_in(lo, hi=None):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < lo or (hi is not None and v > hi):
            want = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            raise argparse.ArgumentTypeError(f"expected an integer {want}, got {v}")
        return v
    return parse


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m jax_muse_attn", description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=_int_in(1), default=4, help="requests R (default 4)")
    ap.add_argument("--context", type=_int_in(TOKENS, 2**30), default=8192,
                    help=f"keys of the longest request, its {TOKENS} new tokens included (default 8192)")
    ap.add_argument("--window", type=_int_in(1, 2**31 - 1), default=2048,
                    help="sliding window of the SWA layer (default 2048)")
    ap.add_argument("--backend", default="auto", choices=("auto", "ffi", "reference"))
    ap.add_argument("--repeats", type=_int_in(1), default=20, help="timed calls (default 20)")
    ap.add_argument("--q-heads", type=_int_in(1), default=16, help="query heads (default 16)")
    ap.add_argument("--kv-heads", type=_int_in(1), default=2,
                    help="KV heads, a divisor of --q-heads (default 2)")
    ap.add_argument("--head-dim", type=int, default=64, choices=(64, 128))
    ap.add_argument("--seed", type=_int_in(0), default=0)
    ap.add_argument("--kv-dtype", default="bf16", choices=("bf16", "fp8"),
                    help=f"the cache: bf16 (default) or fp8 ({FP8_DTYPE} with K / V scales)")
    ap.add_argument("--kv-scales", default=None, choices=("tensor", "token"),
                    help="with --kv-dtype fp8: scales per tensor (default) or per block, KV head "
                         "and slot")
    return ap


def _check_sizes(ap, args) -> None:
    if args.kv_scales is not None and args.kv_dtype != "fp8":
        ap.error(f"--kv-scales applies to --kv-dtype fp8, got --kv-dtype {args.kv_dtype}")
    if args.q_heads % args.kv_heads:
        ap.error(f"--q-heads must be a multiple of --kv-heads, got {args.q_heads} and {args.kv_heads}")
    pages = -(-args.context // PAGE)
    cache = (args.requests * pages + 7) * args.kv_heads * PAGE * 2 * args.head_dim
    # float32 and bf16 copies of the cache and of q, and the check's float64 request
    nbytes = 6 * cache + 6 * TOKENS * args.requests * args.q_heads * args.head_dim
    if nbytes > MAX_INPUT_BYTES:
        ap.error(f"the inputs must fit {MAX_INPUT_BYTES >> 30} GiB of host memory, got "
                 f"{nbytes / 2**30:.1f} GiB for --requests {args.requests} --context {args.context} "
                 f"--kv-heads {args.kv_heads} --head-dim {args.head_dim}")


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    _check_sizes(ap, args)

    import jax
    import jax.numpy as jnp

    import jax_muse_attn
    from jax_muse_attn.attention import resolve_backend

    try:
        kind, platform = resolve_backend(args.backend)
    except RuntimeError as e:  # --backend ffi where this build has no kernel
        ap.error(str(e))
    print(f"jax {jax.__version__} on {jax.default_backend()} ({jax.devices()[0].device_kind}); "
          f"handlers built for {jax_muse_attn.registered_platforms()}; backend={args.backend} -> "
          f"{kind}" + (f" ({platform} handler)" if kind == "ffi" else ""))
    rng = np.random.default_rng(args.seed)
    q_np, kv_np, table_np, lens_np = build_case(
        rng, requests=args.requests, context=args.context, q_heads=args.q_heads,
        kv_heads=args.kv_heads, head_dim=args.head_dim)
    q, kv = jnp.asarray(q_np, jnp.bfloat16), jnp.asarray(kv_np, jnp.bfloat16)
    table, lens = jnp.asarray(table_np), jnp.asarray(lens_np)
    scale = args.head_dim ** -0.5
    kv_text, scales, cache = "bf16", {}, kv_np
    if args.kv_dtype == "fp8":
        scale_kind = args.kv_scales or "tensor"
        kv8, k_scale, v_scale = quantize_fp8(kv_np, scale_kind)
        kv_text = f"{FP8_DTYPE}, per-{scale_kind} scales"
        kv = jnp.asarray(kv8)
        scales = dict(k_scale=jnp.asarray(k_scale), v_scale=jnp.asarray(v_scale))
        cache = dequantize_fp8(kv8, k_scale, v_scale)
    print(f"R={args.requests} context={args.context} heads={args.q_heads}/{args.kv_heads} "
          f"D={args.head_dim} kv {kv_text}; checked against float64 numpy, "
          f"|err| <= {ATOL} + {RTOL} |expected|")
    ok = True
    for name, window in (("full", None), (f"swa{args.window}", args.window)):
        run = jax.jit(lambda q, kv, t, s, sc, w=window: jax_muse_attn.verify_attention(
            q, kv, t, s, scale=scale, window=w, backend=args.backend, **sc))
        try:
            out = run(q, kv, table, lens, scales).block_until_ready()
        except ValueError as e:  # sizes this platform's kernels refuse (a GPU's grid)
            ap.error(str(e))
        got = np.asarray(out, np.float64)
        want = expected_output(q_np, cache, table_np, lens_np, scale=scale, window=window)
        err = np.abs(got - want)
        bad = ~(err <= ATOL + RTOL * np.abs(want))  # NaN counts as bad
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            run(q, kv, table, lens, scales).block_until_ready()
            times.append(time.perf_counter() - t0)
        status = "OK" if not bad.any() else f"FAIL ({int(bad.sum())} of {bad.size} out of tolerance)"
        ok &= not bad.any()
        share = np.max(err / (ATOL + RTOL * np.abs(want)))
        print(f"{name:8s} max|err| {np.max(err):.3e} ({share:.2f} of the tolerance)  median {np.median(times) * 1e6:9.1f} us/call "
              f"(wall, {args.repeats} calls)  {status}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
