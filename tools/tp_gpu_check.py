#!/usr/bin/env python
"""Tensor-parallel check of verify_attention on N GPUs: correctness, no collectives, timing.

    python tools/tp_gpu_check.py [--tp 2] [--context 32768] [--chain 200] [--reps 9]
    python tools/tp_gpu_check.py --tp 8 --cpu-dry-run    # the same code on 8 CPU host devices

Builds Muse-Spark-like TP problems with 16 query / 2 KV heads a device (TP2: 32/4 in all; TP8:
128/16, the Muse Spark layout), D 64, NQ 8, R = 1, 2, 4, full and SWA 2048, every request at
`--context` keys, runs verify_attention with q/kv_cache head-sharded on a `--tp`-device mesh
and checks:
  * the compiled HLO has no all-gather / all-to-all / collective-permute / all-reduce /
    reduce-scatter, and the custom call sees 16 query heads per device;
  * the sharded output is bitwise equal to the unsharded ffi call with the same num_splits, and
    within the spec's tolerance (README.md, Semantics) of the unsharded jnp reference;
and times the sharded call against one shard's share (16/2 heads) on each GPU alone (the
sharded run ends when its slowest GPU does): per call,
(t_chain - t_1) / (chain - 1) from chains of 1 and `--chain` dependent calls inside one jit
(medians of `--reps` runs), so that the jit's host dispatch, larger over several devices, cancels.
Where the build has a device clock for the platform (benchmarks/device_clock.py, as the benchmark
uses it), the same chains are also timed by each device's own clock (the sharded chain under
`jax.shard_map`, so that every device reads its own clock between its first and last call): a
second table, free of the host's dispatch and its run-to-run jitter.

With fewer GPUs than `--tp` it says so and runs the degraded part only: the single-device check
(one GPU: correctness and timing of the one-shard share; CPU: a small correctness check).
`--cpu-dry-run` runs the TP part on `--tp` CPU host devices instead (small context, short
chains: the timing is meaningless there, the checks are real).
"""

from __future__ import annotations

import os
import sys

if "--cpu-dry-run" in sys.argv:  # before JAX starts: host devices for the mesh
    _n = sys.argv[sys.argv.index("--tp") + 1] if "--tp" in sys.argv else "2"
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={_n}").strip()

import argparse
import functools
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jax_muse_attn
from jax_muse_attn.sharding import custom_call_q_shapes, hlo_collectives, tp_specs

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import device_clock as dc  # noqa: E402

NQ, D, PAGE = 8, 64, 16


def make(R, Hq, Hkv, context, seed=0):
    rng = np.random.default_rng(seed)
    pages = -(-context // PAGE)
    nb = R * pages + 8
    q = jnp.asarray(rng.standard_normal((NQ * R, Hq, D), dtype=np.float32), jnp.bfloat16)
    kv = jnp.asarray(rng.standard_normal((nb, Hkv, PAGE, 2 * D), dtype=np.float32), jnp.bfloat16)
    bt = jnp.asarray(rng.permutation(nb)[: R * pages].reshape(R, pages).astype(np.int32))
    sl = jnp.full((R,), context, jnp.int32)
    return q, kv, bt, sl


def chain(n, **kw):
    """n dependent calls: each call's output is the next call's q."""
    def f(q, kv, bt, sl):
        for _ in range(n):
            q = jax_muse_attn.verify_attention(q, kv, bt, sl, **kw)
        return q
    return f


def _wall(compiled, args):
    t0 = time.perf_counter()
    compiled(*args).block_until_ready()
    return time.perf_counter() - t0


def time_per_call(compiled_1, compiled_n, args, n, reps):
    """Per call, (t_n - t_1) / (n - 1) from a chain of 1 and a chain of n calls in one jit,
    medians of reps runs: the host dispatch of the jit (larger over two devices than one) and
    the first call's start-up cancel out."""
    for c in (compiled_1, compiled_n):  # warm-up
        c(*args).block_until_ready()
    t1 = statistics.median(_wall(compiled_1, args) for _ in range(reps))
    tn = statistics.median(_wall(compiled_n, args) for _ in range(reps))
    return (tn - t1) / (n - 1) * 1e6  # us a call


def clocked(n, fn):
    """fn(q, kv, bt, sl) -> q chained n times between two device-clock reads (as the benchmark
    times); returns the two reads stacked, [1, 2, 2] (uint32 low / high words)."""
    chained = dc.clocked_chain(fn, n)
    return lambda *a: jnp.stack(chained(*a))[None]


def device_per_call(g1, gn, args, n, reps):
    """Per call on each device by its own clock: (d_n - d_1) / (n - 1), paired by repeat, median
    over reps; g1 / gn return [devices, 2, 2] clock reads (clocked())."""
    def spans(g):
        c = np.asarray(g(*args))
        return [dc.clock_ns(c[d, 1]) - dc.clock_ns(c[d, 0]) for d in range(c.shape[0])]
    for g in (g1, gn):  # warm-up
        spans(g)
    per = []
    for _ in range(reps):
        d1, dn = spans(g1), spans(gn)
        per.append([(b - a) / (n - 1) * 1e-3 for a, b in zip(d1, dn)])  # us a call, a device
    return [statistics.median(p[d] for p in per) for d in range(len(per[0]))]


def close(out, ref):
    o, r = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    err = np.abs(o - r)
    return bool((err <= 1e-2 + 2e-2 * np.abs(r)).all() and not np.isnan(o).any()), float(err.max())


def splits_for(R, Hq, Hkv, context, window):
    """The default split count of one shard's shapes (used by both timed variants)."""
    pages = -(-context // PAGE)
    sds = jax.ShapeDtypeStruct
    q, kv = sds((NQ * R, Hq, D), jnp.bfloat16), sds((R * pages + 8, Hkv, PAGE, 2 * D), jnp.bfloat16)
    bt = sds((R, pages), jnp.int32)
    return jax_muse_attn.default_num_splits(q, kv, bt, window=window, tokens_per_request=NQ)


def single_device_part(args, gpus):
    """One device: the one-shard share (16/2 heads), correctness (and timing on a GPU)."""
    on_gpu = bool(gpus)
    context = args.context if on_gpu else 1024
    rows = []
    ok_all = True
    for window in (None, 2048):
        for R in (1, 2, 4):
            q, kv, bt, sl = make(R, 16, 2, context, seed=R)
            kw = dict(scale=0.125, window=window, tokens_per_request=NQ)
            out = jax.jit(functools.partial(jax_muse_attn.verify_attention, **kw))(q, kv, bt, sl)
            ref = jax.jit(functools.partial(jax_muse_attn.verify_attention, backend="reference",
                                            **kw))(q, kv, bt, sl)
            ok, err = close(out, ref)
            ok_all &= ok
            t = float("nan")
            if on_gpu:
                c1, cn = (jax.jit(chain(n, **kw)).lower(q, kv, bt, sl).compile()
                          for n in (1, args.chain))
                t = time_per_call(c1, cn, (q, kv, bt, sl), args.chain, args.reps)
            rows.append((("full" if window is None else f"swa{window}"), R, ok, err, t))
    print(f"\nsingle device ({'GPU' if on_gpu else 'CPU'}), 16/2 heads, context {context}")
    print(f"{'attn':>8} {'R':>2} {'ok':>5} {'max err':>9} {'us/call':>9}")
    for name, R, ok, err, t in rows:
        print(f"{name:>8} {R:>2} {str(ok):>5} {err:9.2e} {t:9.1f}")
    return ok_all


def tp_part(args, devs):
    tp = args.tp
    hq, hkv = 16 * tp, 2 * tp  # 16/2 a device
    mesh = Mesh(np.array(devs[:tp]), ("tp",))
    specs = tp_specs("tp")
    ins = tuple(NamedSharding(mesh, s) for s in
                (specs.q, specs.kv_cache, specs.block_table, specs.seq_lens))
    out_sh = NamedSharding(mesh, specs.out)
    ok_all = True
    rows = []
    for window in (None, 2048):
        for R in (1, 2, 4):
            splits = splits_for(R, 16, 2, args.context, window)
            kw = dict(scale=0.125, window=window, tokens_per_request=NQ)
            q, kv, bt, sl = make(R, hq, hkv, args.context, seed=R)
            one = jax.devices()[0]
            ref = jax.jit(functools.partial(jax_muse_attn.verify_attention, backend="reference",
                                            **kw))(*jax.device_put((q, kv, bt, sl), one))
            unsharded = jax.jit(functools.partial(jax_muse_attn.verify_attention,
                                                  num_splits=splits, **kw))(
                *jax.device_put((q, kv, bt, sl), one))
            sargs = tuple(jax.device_put(a, s) for a, s in zip((q, kv, bt, sl), ins))
            f = jax.jit(functools.partial(jax_muse_attn.verify_attention, num_splits=splits, **kw),
                        in_shardings=ins, out_shardings=out_sh)
            compiled = f.lower(*sargs).compile()
            txt = compiled.as_text()
            coll = hlo_collectives(txt)
            qshapes = sorted(set(custom_call_q_shapes(txt)))
            out = compiled(*sargs)
            bit = bool((np.asarray(out).view(np.uint16) == np.asarray(unsharded).view(np.uint16)).all())
            ok, err = close(out, ref)
            # The public default (num_splits=None): correctness only.
            dflt = jax.jit(functools.partial(jax_muse_attn.verify_attention, **kw),
                           in_shardings=ins, out_shardings=out_sh)(*sargs)
            ok_d, _ = close(dflt, ref)
            good = ok and ok_d and bit and not coll and qshapes == [f"bf16[{NQ * R},16,{D}]"]
            ok_all &= good

            # Timing: chain of dependent calls, sharded TP2 vs one GPU with one shard's share.
            c2_1, c2_n = (jax.jit(chain(n, num_splits=splits, **kw), in_shardings=ins,
                                  out_shardings=out_sh).lower(*sargs).compile()
                          for n in (1, args.chain))
            assert not hlo_collectives(c2_n.as_text()), "collectives in the timed chain"
            t2 = time_per_call(c2_1, c2_n, sargs, args.chain, args.reps)
            # One shard's share on each device alone: the sharded run ends when its slowest does.
            # The same by each device's clock where the platform has one: the sharded chain under
            # shard_map (each device its own reads), the share alone on each device.
            clock = args.device_clock and dc.available()
            step = functools.partial(jax_muse_attn.verify_attention, num_splits=splits, **kw)
            t1s, d1s = [], []
            for g in devs[:tp]:
                share = jax.device_put(make(R, 16, 2, args.context, seed=R), g)
                c1_1, c1_n = (jax.jit(chain(n, num_splits=splits, **kw)).lower(*share).compile()
                              for n in (1, args.chain))
                t1s.append(time_per_call(c1_1, c1_n, share, args.chain, args.reps))
                if clock:
                    d1s += device_per_call(jax.jit(clocked(1, step)), jax.jit(clocked(args.chain, step)),
                                           share, args.chain, args.reps)
            dev = None
            if clock:
                smap = lambda n: jax.jit(jax.shard_map(  # noqa: E731
                    clocked(n, step), mesh=mesh, in_specs=tuple(s.spec for s in ins),
                    out_specs=P("tp"), check_vma=False))
                dev = (device_per_call(smap(1), smap(args.chain), sargs, args.chain, args.reps), d1s)
            rows.append(("full" if window is None else f"swa{window}", R, splits, good, bit, err,
                         ",".join(coll) or "none", qshapes, t2, t1s, dev))
    print(f"\nTP{tp} on {devs[0].device_kind} x{tp}: {hq}/{hkv} heads sharded (16/2 a device), "
          f"context {args.context}, {args.chain} chained calls a jit, median of {args.reps}")
    print(f"{'attn':>8} {'R':>2} {'splits':>6} {'ok':>5} {'bitwise':>7} {'max err':>9} "
          f"{'collect.':>8} {'custom-call q':>16} {'TP us':>8} {'share us, each device':>{9 * tp}} "
          f"{'/dev0':>6} {'/slowest':>8}")
    for name, R, splits, good, bit, err, coll, qs, t2, ts, _ in rows:
        each = "".join(f"{t:9.1f}" for t in ts)
        print(f"{name:>8} {R:>2} {splits:>6} {str(good):>5} {str(bit):>7} {err:9.2e} {coll:>8} "
              f"{','.join(qs):>16} {t2:8.1f} {each} {t2 / ts[0]:6.2f} {t2 / max(ts):8.2f}")
    if all(r[-1] for r in rows):
        print(f"\nThe same chains by each device's own clock (us a call; TP under shard_map: each "
              f"device's span, then the slowest against the slowest share alone)")
        print(f"{'attn':>8} {'R':>2} {'TP us, each device':>{9 * tp}} {'share us, each device':>{9 * tp}} "
              f"{'slowest/slowest':>15}")
        for name, R, *_, (d2, d1s) in rows:
            print(f"{name:>8} {R:>2} {''.join(f'{t:9.2f}' for t in d2)} "
                  f"{''.join(f'{t:9.2f}' for t in d1s)} {max(d2) / max(d1s):15.2f}")
    return ok_all


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tp", type=int, default=2, help="devices of the TP mesh (16/2 heads each)")
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--chain", type=int, default=200)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--no-device-clock", dest="device_clock", action="store_false",
                    help="skip the second table (the chains by each device's own clock)")
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="the TP part on --tp CPU host devices (context 1024, short chains)")
    args = ap.parse_args()
    if args.cpu_dry_run:
        args.context, args.chain, args.reps = 1024, 3, 1
    gpus = [d for d in jax.devices() if d.platform in ("gpu", "cuda", "rocm")]
    print(f"jax {jax.__version__}, jax_muse_attn handlers {jax_muse_attn.registered_platforms()}, "
          f"devices: {jax.devices()}")
    ok = single_device_part(args, gpus)
    devs = jax.devices("cpu") if args.cpu_dry_run else gpus
    if len(devs) >= args.tp >= 2:
        ok &= tp_part(args, devs)
    else:
        print(f"\nSKIPPED the TP{args.tp} part: this machine has {len(gpus)} GPU(s); it needs "
              f"{args.tp} (sharded run, collective check and TP-vs-share timing).")
    print("\nALL OK" if ok else "\nFAILED (see the table)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
