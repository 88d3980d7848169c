"""Benchmark of verify_attention (the speed issue): our custom call against its peers.

    python -m jax_muse_attn.bench [--quick] [--configs PAT,...] [--out DIR] [--name NAME]
                                  [--repeats N] [--modes on,off]

The grid is one TP rank of Muse Spark verify attention: 16 q heads / 2 KV heads, D 64, bf16,
8 new tokens a request, 16-key pages, shuffled block ids, every request at the full context,
causal, scale 1/8; SWA (window 2048) at 32k and full attention at 2k, 8k, 32k, 128k, each for
R = 1, 2, 4, 8, 16 requests. Config names: ``full32k-r4``, ``swa32k-r16`` (``--configs`` takes
comma-separated names or fnmatch patterns, e.g. ``'full128k-*,swa*'``).

What is measured (all in one run, every implementation on the same data):

* ours: ``jax_muse_attn.verify_attention(..., backend="ffi")`` as users call it. Per-call time
  from an UNROLLED chain of N calls inside one jit (each call's output is the next call's q;
  the timed jit returns the last output only, as a decode step keeps its attention outputs
  inside the jit): (t_N - t_1) / (N - 1), wall clock with block_until_ready, median over repeats. Run twice, in
  worker subprocesses, with XLA command buffers on and off (XLA_FLAGS is read at backend init).
  Every output of every chain that is timed is first checked (the same chain, returning all
  outputs; the timed jit's output must equal its last one bit for bit) against
  ``jax_muse_attn.reference.verify_attention`` (|out - ref| <= 1e-2 + 2e-2 |ref|); a config that
  fails is reported as FAIL and not timed, and the exit code is 1.
* ours on the device clock ("dev"): the same chains timed by the device itself, between two reads
  of its clock inside the jit (``jax_muse_attn._ffi.device_clock``: a one-thread kernel reading
  %globaltimer; the first read feeds the chain, the second follows its last output), (d_N -
  d_1) / (N - 1), median over repeats. Free of the host's dispatch and synchronization jitter,
  which spreads the wall-clock figure by a few us at 30-80 us (benchmarks/NOTES.md); the
  wall-clock figure stays the headline (it is what a caller's step sees). ``--no-device-clock``
  skips it.
* ours cold: a chain of n (L2 flush, call) pairs minus the same chain of flushes alone, over n
  (the median over repeats of that paired difference). On the device clock (first mode only):
  each call after a flush between two clock reads inside the jit, the median of those brackets
  minus the median bracket without a call (cold_bracketed, cold_device_time).
  The flush is a reduction reading a 256 MiB buffer (so the L2 holds clean lines of another
  buffer, as in the anchors); data dependences order flush -> call -> next flush.
* reference: the jnp reference under jit, same chain method (command buffers on only).
* FlashInfer (when importable, in a torch worker subprocess): BatchPrefillWithPagedKVCacheWrapper,
  fa2, NHD K and V caches converted from our [blocks, Hkv, 16, 2D] cache with the same block
  ids, plan() outside the timed region; hot = a CUDA graph of 20 back-to-back run() calls, per
  call; cold = one replay of a one-call graph after reading a 512 MiB buffer (events around the
  replay, the anchors' way); cold in graph = the same after a flush between two events recorded
  inside a graph, minus the empty bracket (as ours on the device clock). Its output is
  checked against a torch fp32 reference (same tolerance; reported, does not set the exit code).
* floors: copy bandwidth (torch 1 GiB device copy, read + write counted; JAX: (t(2 GiB x+1) -
  t(1 GiB x+1)) the same way), an empty kernel (torch CUDA graph, as in the anchors), our custom
  call with num_reqs=0 (a call that reads nothing), and the host dispatch of one tiny jit.

GB/s = KV bytes that must be read / time (full: context keys; SWA: 2048 + 7 keys a request).
Writes DIR/NAME.json (all raw figures), DIR/NAME.md (the table) and DIR/NAME.png (the plot).
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import functools
import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

H_Q, H_KV, D, PAGE, NQ = 16, 2, 64, 16, 8
SCALE = 0.125
RTOL, ATOL = 2e-2, 1e-2
R_VALUES = (1, 2, 4, 8, 16)
FULL_CONTEXTS = (2048, 8192, 32768, 131072)
SWA_WINDOW, SWA_CONTEXT = 2048, 32768
MODES = {
    "on": "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUDNN,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1",
    "off": "--xla_gpu_enable_command_buffer=",
}
FLUSH_BYTES_GPU = 256 << 20
FLUSH_BYTES_CPU = 4 << 20
COLD_BRACKETS = 10  # (flush, call) brackets a jit for cold on the device clock (x repeats samples)


# ----------------------------------------------------------------------------- configs
class Config:
    def __init__(self, L, R, window=None):
        self.L, self.R, self.window = int(L), int(R), window

    @property
    def name(self):
        k = f"{self.L // 1024}k" if self.L % 1024 == 0 else f"{self.L}"
        if self.window is None:
            return f"full{k}-r{self.R}"
        w = "" if self.window == SWA_WINDOW else f"-w{self.window}"
        return f"swa{k}{w}-r{self.R}"

    @property
    def pages(self):
        return -(-self.L // PAGE)

    @property
    def blocks(self):
        return self.R * self.pages

    @property
    def keys_read(self):
        """Keys a request must read: its context, or the window span of its 8 tokens."""
        if self.window is None:
            return self.L
        return self.L - max(0, self.L - NQ - (self.window - 1))

    @property
    def kv_bytes(self):
        return self.R * self.keys_read * H_KV * D * 2 * 2  # K and V, bf16

    def as_dict(self):
        return dict(name=self.name, L=self.L, R=self.R, window=self.window, keys_read=self.keys_read,
                    kv_bytes=self.kv_bytes, q_heads=H_Q, kv_heads=H_KV, head_dim=D, page=PAGE,
                    tokens=NQ, scale=SCALE)


def parse_config(name):
    m = re.fullmatch(r"(full|swa)(\d+)(k?)(?:-w(\d+))?-r(\d+)", name)
    if not m:
        raise ValueError(f"bad config name {name!r}")
    L = int(m.group(2)) * (1024 if m.group(3) else 1)
    window = None if m.group(1) == "full" else int(m.group(4) or SWA_WINDOW)
    return Config(L, int(m.group(5)), window)


def full_grid():
    return ([Config(SWA_CONTEXT, r, SWA_WINDOW) for r in R_VALUES]
            + [Config(L, r) for L in FULL_CONTEXTS for r in R_VALUES])


QUICK_GPU = ("swa32k-r1", "swa32k-r16", "full2k-r1", "full32k-r4", "full128k-r16")
QUICK_CPU = ("full1k-r1", "swa2k-w256-r2")


def select_configs(patterns, quick, platform):
    if quick:
        grid = [parse_config(n) for n in (QUICK_CPU if platform == "cpu" else QUICK_GPU)]
    else:
        grid = full_grid()
    if not patterns:
        return grid
    out, names = [], {c.name: c for c in grid}
    for pat in patterns.split(","):
        pat = pat.strip()
        if not pat:
            continue
        hits = [c for c in grid if fnmatch.fnmatch(c.name, pat)]
        if not hits and pat not in names:
            hits = [parse_config(pat)]  # any parseable name, on or off the grid
        out += [c for c in hits if c.name not in {o.name for o in out}]
    return out


# ----------------------------------------------------------------------------- data
# The same values on both sides (JAX and torch) from an integer hash of the element index:
# murmur3's fmix32 of i*golden+seed, top 24 bits -> exact float32 in [-2, 2) -> bf16 (RNE).
_M32 = 0xFFFFFFFF
_GOLD, _C1, _C2, _SEEDMUL = 0x9E3779B1, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F
SEED_KV, SEED_Q = 1, 2


def _mul32_int64(x, c):
    """x * c mod 2**32 for int64 arrays/tensors holding values < 2**32, without overflow."""
    lo, hi = x & 0xFFFF, x >> 16
    return (lo * c + (((hi * c) & 0xFFFF) << 16)) & _M32


def hash_values_int64(i, seed):
    """The hash on int64 numpy arrays or torch tensors (float32 result in [-2, 2))."""
    x = (_mul32_int64(i, _GOLD) + (seed * _SEEDMUL & _M32)) & _M32
    x = x ^ (x >> 16)
    x = _mul32_int64(x, _C1)
    x = x ^ (x >> 13)
    x = _mul32_int64(x, _C2)
    x = x ^ (x >> 16)
    return x >> 8


def jax_hash_array(shape, seed):
    import jax
    import jax.numpy as jnp

    n = int(np.prod(shape))

    @jax.jit
    def gen():
        x = jax.lax.iota(jnp.uint32, n) * jnp.uint32(_GOLD) + jnp.uint32(seed * _SEEDMUL & _M32)
        x = x ^ (x >> 16)
        x = x * jnp.uint32(_C1)
        x = x ^ (x >> 13)
        x = x * jnp.uint32(_C2)
        x = x ^ (x >> 16)
        v = (x >> 8).astype(jnp.float32) * jnp.float32(2.0 ** -22) - jnp.float32(2.0)
        return v.astype(jnp.bfloat16).reshape(shape)

    return gen()


def block_table_np(cfg):
    rng = np.random.default_rng(1000 + cfg.R * 131 + cfg.L)
    return rng.permutation(cfg.blocks).reshape(cfg.R, cfg.pages).astype(np.int32)


def jax_inputs(cfg):
    """The (q, kv_cache, block_table, seq_lens) of cfg as JAX arrays (the values the torch side
    builds too): hashed q and KV, a random permutation of the blocks, every request full."""
    import jax.numpy as jnp

    kv = jax_hash_array((cfg.blocks, H_KV, PAGE, 2 * D), SEED_KV)
    q = jax_hash_array((NQ * cfg.R, H_Q, D), SEED_Q)
    return q, kv, jnp.asarray(block_table_np(cfg)), jnp.full((cfg.R,), cfg.L, jnp.int32)


def flush_l2(x, buf):
    """x after an L2 flush: a reduction reading all of buf that depends on x (so it runs after
    whatever made x, and each flush is distinct), its result folded into x as zero (so whatever
    uses the result runs after the flush)."""
    import jax.numpy as jnp

    c = x.reshape(-1)[0].astype(jnp.float32) * 0.0
    s = jnp.sum(buf + c)
    return x + (s * 0.0).astype(x.dtype)


# ----------------------------------------------------------------------------- helpers
def _median(xs):
    return float(statistics.median(xs)) if xs else float("nan")


def _emit(kind, payload=""):
    print(f"@@{kind} {payload}", flush=True)


def _log(*a):
    print(*a, file=sys.stderr, flush=True)


def _save(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- cold, device clock
def cold_bracketed(step, n, with_call, flush=True):
    """A jitted f(x, buf, kv, bt, sl) -> (x, t0s, t1s): n calls x = step(x, kv, bt, sl), each right
    after an L2 flush (a reduction reading buf) and between two device-clock reads: the first after
    the flush, the call after it (through a select), the second after the call, the next flush after
    the second. with_call=False: the same brackets with no call in them; flush=False: no flush (a
    single hot call a bracket, for comparison)."""
    import jax
    import jax.numpy as jnp

    from jax_muse_attn import _ffi

    def f(x, buf, kv, bt, sl):
        t0s, t1s = [], []
        for _ in range(n):
            if flush:
                x = flush_l2(x, buf)  # after the previous bracket
            t0 = _ffi.device_clock(x)
            x = _ffi.order_after(x, t0)
            if with_call:
                x = step(x, kv, bt, sl)
            t1 = _ffi.device_clock(x)
            x = _ffi.order_after(x, t1)  # the next flush starts after the second read
            t0s.append(t0)
            t1s.append(t1)
        return x, jnp.stack(t0s), jnp.stack(t1s)
    return jax.jit(f)


def cold_device_time(f_call, f_empty, a, repeats, flush_bytes, warm=2):
    """One cold call on the device clock: the median bracket of f_call (cold_bracketed with the
    call) minus the median bracket of f_empty (without it), over every bracket of `repeats` runs
    of each, alternating."""
    from jax_muse_attn import _ffi

    def spans(g):
        _, t0s, t1s = g(*a)
        t0s, t1s = np.asarray(t0s), np.asarray(t1s)
        return [(_ffi.clock_ns(b) - _ffi.clock_ns(e)) * 1e-3 for e, b in zip(t0s, t1s)]

    for _ in range(warm):
        spans(f_call), spans(f_empty)
    call_us, empty_us = [], []
    for _ in range(repeats):
        call_us += spans(f_call)
        empty_us += spans(f_empty)
    return bracket_result(call_us, empty_us, flush_bytes=flush_bytes,
                          how="device clock: each call after an L2 flush between two clock reads; "
                              "median bracket with the call minus median bracket without it")


def bracket_result(call_us, empty_us, **extra):
    """A cold figure from timed brackets (ours on the device clock, FlashInfer between graph
    events): the median bracket with the call minus the median bracket without it, and every
    sample."""
    return dict(per_call_us=_median(call_us) - _median(empty_us), bracket_us=_median(empty_us),
                call_bracket_us=call_us, empty_bracket_us=empty_us, n=len(call_us), **extra)


# ----------------------------------------------------------------------------- JAX worker
def _start_config(args, res, cfg):
    """A worker's record for cfg, entered in res; None (recorded as skipped) past the deadline."""
    rec = dict(config=cfg.as_dict())
    res["configs"][cfg.name] = rec
    if args.deadline_at and time.time() > args.deadline_at:
        rec["status"] = "skipped"
        _save(args.result_file, res)
        _emit("step", f"{cfg.name} skipped (--budget-s)")
        return None
    return rec


def jax_worker(args):
    import jax
    import jax.numpy as jnp

    import jax_muse_attn
    from jax_muse_attn import _ffi, _validate, reference
    from jax_muse_attn.attention import _default_num_splits, resolve_backend

    dev = jax.devices()[0]
    kind, platform = resolve_backend("auto")
    configs = select_configs(args.configs, args.quick, "cpu" if platform == "cpu" else "gpu")
    _emit("plan", ",".join(c.name for c in configs))
    res = dict(mode=args.worker, xla_flags=os.environ.get("XLA_FLAGS", ""), jax=jax.__version__,
               jaxlib=_jaxlib_version(),
               backend=jax.default_backend(), platform=platform, device_kind=dev.device_kind,
               handlers=list(jax_muse_attn.registered_platforms()), auto_backend=kind,
               configs={}, floors={}, errors=[])
    _save(args.result_file, res)
    gpu = platform != "cpu"
    flush_bytes = FLUSH_BYTES_GPU if gpu else FLUSH_BYTES_CPU

    def wall(f, *a):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*a))
        return time.perf_counter() - t0

    def paired_per_call(time_1, time_n, n, repeats, warm):
        # Times a chain of 1 and of n calls alternately (after `warm` untimed pairs): both
        # samples, and the per-call figures (t_N - t_1) / (N - 1) in us, paired by repeat.
        for _ in range(warm):
            time_1(), time_n()
        s1, sn = [], []
        for _ in range(repeats):
            s1.append(time_1())
            sn.append(time_n())
        return s1, sn, [(b - c) / (n - 1) * 1e6 for b, c in zip(sn, s1)]

    def chain_time(f1, fN, n, a, repeats, warm=2):
        t1s, tns, per = paired_per_call(lambda: wall(f1, *a), lambda: wall(fN, *a), n, repeats, warm)
        return dict(per_call_us=_median(per), per_call_us_of_medians=(_median(tns) - _median(t1s)) / (n - 1) * 1e6,
                    n=n, t1_s=t1s, tN_s=tns)

    use_clock = not args.no_device_clock and platform in _ffi.CLOCK_REGISTERED
    res["device_clock"] = use_clock

    def device_chain_time(step, n, a, repeats, warm=2):
        g1, gn = (jax.jit(_ffi.clocked_chain(step, k)) for k in (1, n))

        def dev(g):
            t0, t1 = g(*a)
            return (_ffi.clock_ns(t1) - _ffi.clock_ns(t0)) * 1e-9

        d1s, dns, per = paired_per_call(lambda: dev(g1), lambda: dev(gn), n, repeats, warm)
        return dict(per_call_us=_median(per), n=n, d1_s=d1s, dN_s=dns,
                    how="device clock: (d_N - d_1) / (N - 1), paired by repeat, median")

    def pick_n(f1, a, cap):
        est = _median([wall(f1, *a) for _ in range(5)])
        return int(max(4, min(cap, args.target_ms * 1e-3 / max(est, 1e-6))))

    # ---- floors
    try:
        small = jnp.zeros((1,), jnp.float32)
        f = jax.jit(lambda x: x + 1)
        for _ in range(5):
            wall(f, small)
        res["floors"]["jax_dispatch_tiny_jit_us"] = _median([wall(f, small) for _ in range(50)]) * 1e6
        n1 = (1 << 30) if gpu else (16 << 20)
        xs = [jnp.zeros((n1 // 4,), jnp.float32), jnp.zeros((2 * n1 // 4,), jnp.float32)]
        ts = [[], []]
        for rep in range(args.repeats + 3):
            for j in (0, 1):
                t = wall(f, xs[j])
                if rep >= 3:
                    ts[j].append(t)
        dt = _median(ts[1]) - _median(ts[0])
        res["floors"]["jax_copy"] = dict(bytes_small=n1, bytes_large=2 * n1, t_small_s=ts[0], t_large_s=ts[1],
                                         GBps=2 * n1 / dt / 1e9 if dt > 0 else None,
                                         how="x+1 fusion, (t(2 GiB) - t(1 GiB)), read + write counted")
        del xs
    except Exception as e:  # pragma: no cover
        res["errors"].append(f"floors jax_copy: {e!r}")
    try:
        c0 = Config(256, 1)
        q0, kv0, bt0, sl0 = jax_inputs(c0)

        def noop(x):
            return jax_muse_attn.verify_attention(x, kv0, bt0, sl0, scale=SCALE, num_reqs=0, backend="ffi")

        f1 = jax.jit(lambda x: noop(x))

        def fn(x):
            for _ in range(args.chain):
                x = noop(x)
            return x

        r = chain_time(f1, jax.jit(fn), args.chain, (q0,), args.repeats)
        res["floors"]["ours_noop_call"] = dict(r, how="verify_attention(num_reqs=0): a custom call that reads nothing")
        if use_clock:
            r = device_chain_time(noop, args.chain, (q0,), args.repeats)
            res["floors"]["ours_noop_call_device"] = dict(r, how="the same on the device clock")
    except Exception as e:
        res["errors"].append(f"floors ours_noop_call: {e!r}")
    _save(args.result_file, res)

    buf = jnp.ones((flush_bytes // 4,), jnp.float32)  # f32: no convert that XLA could hoist and share
    ok_stats = jax.jit(lambda o, r: (jnp.max(jnp.abs(o.astype(jnp.float32) - r.astype(jnp.float32))),
                                     jnp.sum(~(jnp.abs(o.astype(jnp.float32) - r.astype(jnp.float32))
                                               <= ATOL + RTOL * jnp.abs(r.astype(jnp.float32))))))

    for cfg in configs:
        rec = _start_config(args, res, cfg)
        if rec is None:
            continue
        try:
            q, kv, bt, sl = jax_inputs(cfg)
            w = cfg.window
            shapes = _validate.check_inputs(q, kv, bt, sl, scale=SCALE, window=w, tokens_per_request=NQ)
            rec["num_splits"] = _default_num_splits(shapes, platform)
            if gpu:  # which kernels the handler launches for it (ffi/gpu/launch_plan.h)
                try:
                    rec["launch_plan"] = jax_muse_attn.launch_plan(q, kv, bt, window=w,
                                                                   tokens_per_request=NQ)
                except RuntimeError as e:  # no GPU handler in this build: the bench says so itself
                    rec["launch_plan"] = {"error": str(e)}

            def ours(x, kv, bt, sl, w=w):
                return jax_muse_attn.verify_attention(x, kv, bt, sl, scale=SCALE, window=w, backend="ffi")

            def ref(x, kv, bt, sl, w=w):
                return reference.verify_attention(x, kv, bt, sl, scale=SCALE, window=w)

            # A chain returns every call's output when it is checked (keep=True) and only the
            # last one when it is timed: outputs that leave the jit get fresh buffers each run,
            # which cost ~6 us a call (SWA R=1 on an H200: 18.2 vs 12.1 us; most likely XLA
            # updating its command buffer for them), a cost a decode step, whose attention
            # outputs stay inside the jit, never pays. Both forms run the same calls.
            def chain(step, n, keep=False):
                def f(x, kv, bt, sl):
                    outs = []
                    for _ in range(n):
                        x = step(x, kv, bt, sl)
                        outs.append(x)
                    return tuple(outs) if keep else x
                return jax.jit(f)

            def cold_chain(n, with_call, keep=False):
                def f(x, buf, kv, bt, sl):
                    outs = []
                    for _ in range(n):
                        x = flush_l2(x, buf)  # after the previous call, before the next
                        if with_call:
                            x = ours(x, kv, bt, sl)
                        outs.append(x)
                    return tuple(outs) if keep else x
                return jax.jit(f)

            ref1 = jax.jit(ref)
            check = dict(ok=True, max_abs_err=0.0, n_bad=0, outputs_checked=0)

            def check_chain(x0, outs):
                ins = (x0,) + tuple(outs[:-1])
                for xi, oi in zip(ins, outs):
                    m, nb = ok_stats(oi, ref1(xi, kv, bt, sl))
                    m, nb = float(m), int(nb)
                    check["max_abs_err"] = max(check["max_abs_err"], m) if math.isfinite(m) else float("nan")
                    check["n_bad"] += nb
                    check["outputs_checked"] += 1
                    if nb or not math.isfinite(m):
                        check["ok"] = False

            def same_as_checked(timed_out, checked_outs):
                # The timed jit (last output only) must give the checked chain's last output,
                # bit for bit (the kernel is deterministic).
                same = bool(np.array_equal(np.asarray(timed_out).view(np.uint16),
                                           np.asarray(checked_outs[-1]).view(np.uint16)))
                check["timed_equals_checked"] = check.get("timed_equals_checked", True) and same
                if not same:
                    check["ok"] = False

            def check_timed(timed, keep_all, *xs):
                # Every output of the chain (keep_all) against the reference, and the timed
                # jit's output against the last of them. Returns the checked outputs.
                outs = keep_all(*xs)
                check_chain(q, outs)
                same_as_checked(timed(*xs), outs)
                return outs

            a = (q, kv, bt, sl)
            f1 = chain(ours, 1)
            check_timed(f1, chain(ours, 1, keep=True), *a)
            n = pick_n(f1, a, args.chain) if check["ok"] else 0
            fN = chain(ours, n) if check["ok"] else None
            if check["ok"]:
                check_timed(fN, chain(ours, n, keep=True), *a)
            nc = min(args.cold_chain, max(n, 2))
            fc = cold_chain(nc, True) if check["ok"] else None
            cold_outs = None
            if check["ok"]:
                cold_outs = check_timed(fc, cold_chain(nc, True, keep=True), q, buf, kv, bt, sl)
            cold_dev = use_clock and args.cold_device
            nb = min(nc, COLD_BRACKETS)
            if check["ok"] and cold_dev:
                # The bracketed cold chain runs the same calls on the same inputs (the clock
                # reads and their selects change no value): its last output must be the checked
                # cold chain's, bit for bit.
                fcd = cold_bracketed(ours, nb, True)
                same_as_checked(fcd(q, buf, kv, bt, sl)[0], cold_outs[:nb])
            rec["check"] = check
            if not check["ok"]:
                _log(f"[{args.worker}] {cfg.name}: CHECK FAILED {check}")
                rec["status"] = "FAIL"
            else:
                rec["status"] = "ok"
                rec["ours"] = chain_time(f1, fN, n, a, args.repeats)
                if use_clock:
                    rec["ours_device"] = device_chain_time(ours, n, a, args.repeats)
                ff = cold_chain(nc, False)
                ac = (q, buf, kv, bt, sl)
                for _ in range(2):
                    wall(fc, *ac), wall(ff, *ac)
                tfc, tff = [], []
                for _ in range(args.repeats):
                    tfc.append(wall(fc, *ac))
                    tff.append(wall(ff, *ac))
                # Paired: each repeat's (flush, call) chain against the flush-only chain run right
                # after it, the median of those differences (the difference of two medians moved
                # by up to 10 us a call, once below zero).
                paired = [(a_ - b_) / nc * 1e6 for a_, b_ in zip(tfc, tff)]
                rec["ours_cold"] = dict(per_call_us=_median(paired), n=nc,
                                        flush_bytes=flush_bytes, flush_and_call_s=tfc, flush_only_s=tff,
                                        flush_only_chain_us_per_flush=_median(tff) / nc * 1e6)
                if cold_dev:
                    rec["ours_cold_device"] = cold_device_time(fcd, cold_bracketed(ours, nb, False),
                                                               (q, buf, kv, bt, sl), args.repeats,
                                                               flush_bytes)
                if args.time_reference:
                    r1 = chain(ref, 1)
                    nr = pick_n(r1, a, args.ref_chain)
                    rec["reference"] = chain_time(r1, chain(ref, nr), nr, a, args.repeats)
        except Exception as e:
            rec["status"] = "ERROR"
            rec["error"] = "".join(traceback.format_exception_only(type(e), e))[-2000:]
            _log(f"[{args.worker}] {cfg.name}: ERROR {rec['error']}")
        _save(args.result_file, res)
        us = rec.get("ours", {}).get("per_call_us")
        _emit("step", f"{cfg.name} {rec['status']}" + (f" {us:.1f} us" if us is not None else ""))
    return 0


def _jaxlib_version():
    try:
        import jaxlib

        return jaxlib.__version__
    except Exception:  # pragma: no cover
        return None


def torch_hash_array(shape, seed, dev):
    """jax_hash_array's values as a torch bf16 tensor (int64 arithmetic, in chunks)."""
    import torch

    total = int(np.prod(shape))
    out = torch.empty(total, dtype=torch.bfloat16, device=dev)
    step = 1 << 26
    for s0 in range(0, total, step):
        i = torch.arange(s0, min(total, s0 + step), dtype=torch.int64, device=dev)
        v = hash_values_int64(i, seed).to(torch.float32) * (2.0 ** -22) - 2.0
        out[s0:s0 + i.numel()] = v.to(torch.bfloat16)
    return out.view(*shape)


def torch_reference(q, k, v, bt, cfg):
    """fp32 verify attention over NHD K / V caches [blocks, 16, Hkv, D] (checks FlashInfer)."""
    import torch

    dev = q.device
    outs = []
    for r in range(cfg.R):
        pages = bt[r].long()
        kk = k[pages].reshape(-1, H_KV, D)[: cfg.L].float()
        vv = v[pages].reshape(-1, H_KV, D)[: cfg.L].float()
        qr = q[r * NQ:(r + 1) * NQ].float().view(NQ, H_KV, H_Q // H_KV, D)
        s = torch.einsum("tkgd,skd->kgts", qr, kk) * SCALE
        qpos = cfg.L - NQ + torch.arange(NQ, device=dev)
        kpos = torch.arange(cfg.L, device=dev)
        m = kpos[None, :] <= qpos[:, None]
        if cfg.window is not None:
            m &= (qpos[:, None] - kpos[None, :]) < cfg.window
        p = torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1)
        outs.append(torch.einsum("kgts,skd->tkgd", p, vv).reshape(NQ, H_Q, D))
    return torch.cat(outs, 0)


def nhd_caches(kv):
    """Our [blocks, Hkv, 16, 2D] cache -> FlashInfer's NHD (K, V), each [blocks, 16, Hkv, D]."""
    return (kv[..., :D].permute(0, 2, 1, 3).contiguous(), kv[..., D:].permute(0, 2, 1, 3).contiguous())


# ----------------------------------------------------------------------------- torch worker
def torch_worker(args):
    res = dict(mode="torch", configs={}, floors={}, errors=[])
    configs = [parse_config(n) for n in args.configs.split(",") if n]
    try:
        import torch
    except Exception as e:
        res["unavailable"] = f"torch not importable: {e!r}"
        _save(args.result_file, res)
        return 0
    res["torch"] = torch.__version__
    if not torch.cuda.is_available():
        res["unavailable"] = "torch sees no CUDA device"
        _save(args.result_file, res)
        return 0
    dev = torch.device("cuda")
    res["device"] = torch.cuda.get_device_name()

    def timed_us(work, per=1):
        """Device time of work() (CUDA events around it on the current stream), us / per."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / per

    # ---- floors (as in the anchors)
    try:
        n = 1 << 30
        src = torch.empty(n // 4, dtype=torch.float32, device=dev).uniform_()
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        torch.cuda.synchronize()
        ts = []
        for _ in range(20):
            ts.append(timed_us(functools.partial(dst.copy_, src)))
        res["floors"]["torch_copy"] = dict(bytes=n, us=ts, GBps=2 * n / (_median(ts) * 1e-6) / 1e9,
                                           how="1 GiB dst.copy_(src), read + write counted")
        del src, dst
        torch.cuda.empty_cache()
        x = torch.zeros(1, device=dev)
        g1, g100 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        x.add_(1)
        torch.cuda.synchronize()
        with torch.cuda.graph(g1):
            x.add_(1)
        with torch.cuda.graph(g100):
            for _ in range(100):
                x.add_(1)
        for _ in range(10):
            g1.replay(), g100.replay()
        torch.cuda.synchronize()
        thr, ink = [], []
        def g1_200():
            for _ in range(200):
                g1.replay()

        for _ in range(10):
            thr.append(timed_us(g1_200, per=200))
            ink.append(timed_us(g100.replay, per=100))
        res["floors"]["torch_empty_kernel"] = dict(graph1_back_to_back_us=_median(thr),
                                                   per_kernel_in_graph100_us=_median(ink))
    except Exception as e:
        res["errors"].append(f"torch floors: {e!r}")
    _save(args.result_file, res)

    try:
        t0 = time.time()
        import flashinfer as fi

        res["flashinfer"] = dict(version=getattr(fi, "__version__", "?"), file=fi.__file__,
                                 import_s=time.time() - t0)
    except Exception as e:
        res["unavailable"] = f"flashinfer not importable: {e!r}"
        _save(args.result_file, res)
        for c in configs:
            _emit("step", f"{c.name} unavailable")
        return 0
    flush = torch.empty((512 << 20) // 4, dtype=torch.float32, device=dev).uniform_()
    ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)

    def cold_in_graph(fn, n, repeats):
        """One cold call inside a CUDA graph, as the JAX worker times ours on the device clock: a
        graph of n (L2 flush, event, fn(), event) and one of n (flush, event, event); the median
        span between a pair of events with fn() minus the median without it, over `repeats`
        replays. Unlike the anchors' cold figure (one graph replay after a flush, timed by
        events around the replay), the graph's own launch is not in it."""
        def graph(with_call):
            evs = [(torch.cuda.Event(enable_timing=True, external=True),
                    torch.cuda.Event(enable_timing=True, external=True)) for _ in range(n)]
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for a, b in evs:
                    flush.sum(dtype=torch.float32)
                    a.record()
                    if with_call:
                        fn()
                    b.record()
            return g, evs

        (gc, ec), (ge, ee) = graph(True), graph(False)
        call_us, empty_us = [], []
        for rep in range(repeats + 2):
            for g, evs, acc in ((gc, ec, call_us), (ge, ee, empty_us)):
                g.replay()
                torch.cuda.synchronize()
                if rep >= 2:
                    acc += [a.elapsed_time(b) * 1e3 for a, b in evs]
        del gc, ge
        return bracket_result(call_us, empty_us,
                              how="CUDA graph of (flush 512 MiB, event, run, event): median span "
                                  "with run minus median span without it")

    for cfg in configs:
        rec = _start_config(args, res, cfg)
        if rec is None:
            continue
        try:
            kv = torch_hash_array((cfg.blocks, H_KV, PAGE, 2 * D), SEED_KV, dev)
            k, v = nhd_caches(kv)
            del kv
            q = torch_hash_array((NQ * cfg.R, H_Q, D), SEED_Q, dev)
            bt = torch.from_numpy(block_table_np(cfg)).to(dev)
            R, P = cfg.R, cfg.pages
            qo_indptr = torch.arange(R + 1, dtype=torch.int32, device=dev) * NQ
            kv_indptr = torch.arange(R + 1, dtype=torch.int32, device=dev) * P
            kv_indices = bt.reshape(-1).contiguous()
            last = torch.full((R,), cfg.L - (P - 1) * PAGE, dtype=torch.int32, device=dev)
            bufs = dict(qo_indptr_buf=torch.empty(R + 1, dtype=torch.int32, device=dev),
                        paged_kv_indptr_buf=torch.empty(R + 1, dtype=torch.int32, device=dev),
                        paged_kv_indices_buf=torch.empty(kv_indices.numel(), dtype=torch.int32, device=dev),
                        paged_kv_last_page_len_buf=torch.empty(R, dtype=torch.int32, device=dev))
            wr = fi.BatchPrefillWithPagedKVCacheWrapper(ws, kv_layout="NHD", use_cuda_graph=True,
                                                        backend="fa2", **bufs)
            wr.plan(qo_indptr, kv_indptr, kv_indices, last, H_Q, H_KV, D, PAGE, causal=True,
                    sm_scale=SCALE, window_left=(cfg.window - 1) if cfg.window else -1,
                    q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16, uniform_q_len=NQ)
            out = torch.full((NQ * R, H_Q, D), float("nan"), dtype=torch.bfloat16, device=dev)

            def fn():
                wr.run(q, (k, v), out=out)

            fn()
            torch.cuda.synchronize()
            want = torch_reference(q, k, v, bt, cfg)
            err = (out.float() - want).abs()
            bad = int((~(err <= ATOL + RTOL * want.abs())).sum())
            rec["check"] = dict(ok=bad == 0, n_bad=bad, max_abs_err=float(err.max()),
                                relerr=float((out.float() - want).norm() / want.norm()))
            del want, err
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    fn()
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g_hot, g_one = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
            with torch.cuda.graph(g_hot):
                for _ in range(20):
                    fn()
            with torch.cuda.graph(g_one):
                fn()
            for _ in range(3):
                g_hot.replay(), g_one.replay()
            torch.cuda.synchronize()
            hot, cold = [], []
            for _ in range(max(args.repeats, 10)):
                hot.append(timed_us(g_hot.replay, per=20))
            for _ in range(max(args.repeats, 20)):
                flush.sum(dtype=torch.float32)  # evicts L2, before the timed replay
                cold.append(timed_us(g_one.replay))
            rec.update(status="ok", hot_us=_median(hot), cold_us=_median(cold), hot_samples_us=hot,
                       cold_samples_us=cold, resolved_backend=getattr(wr, "_backend", None))
            try:  # cold timed as ours is on the device clock (a newer torch's external events)
                rec["cold_in_graph"] = cold_in_graph(fn, COLD_BRACKETS, max(args.repeats, 10))
            except Exception as e:
                rec["cold_in_graph"] = dict(error="".join(traceback.format_exception_only(type(e), e))[-500:])
            del g_hot, g_one
        except Exception as e:
            rec["status"] = "ERROR"
            rec["error"] = "".join(traceback.format_exception_only(type(e), e))[-2000:]
            _log(f"[torch] {cfg.name}: ERROR {rec['error']}")
        finally:
            q = k = v = out = None
            torch.cuda.empty_cache()
        _save(args.result_file, res)
        _emit("step", f"{cfg.name} {rec['status']}" + (f" FI hot {rec['hot_us']:.1f} us" if 'hot_us' in rec else ""))
    return 0


# ----------------------------------------------------------------------------- parent
class _Progress:
    def __init__(self):
        try:
            from tqdm import tqdm

            self.bar = tqdm(total=0, unit="step", file=sys.stderr, dynamic_ncols=True)
        except Exception:
            self.bar = None
        self.n = self.total = 0

    def add_total(self, k):
        self.total += k
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def step(self, msg):
        self.n += 1
        if self.bar is not None:
            self.bar.set_postfix_str(msg[:60])
            self.bar.update(1)
        else:
            print(f"[{self.n}/{self.total}] {msg}", file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _run_worker(mode, args, names, progress, tmpdir, env_extra):
    path = os.path.join(tmpdir, f"{mode}.json")
    cmd = [sys.executable, "-m", "jax_muse_attn.bench", "--worker", mode, "--result-file", path,
           "--repeats", str(args.repeats), "--chain", str(args.chain), "--ref-chain", str(args.ref_chain),
           "--cold-chain", str(args.cold_chain), "--target-ms", str(args.target_ms)]
    if args.no_device_clock:
        cmd += ["--no-device-clock"]
    deadline = env_extra.pop("_deadline_at", None)
    if deadline:
        cmd += ["--deadline-at", repr(deadline)]
    if names is not None:
        cmd += ["--configs", ",".join(names)]
    else:
        if args.configs:
            cmd += ["--configs", args.configs]
        if args.quick:
            cmd += ["--quick"]
    if env_extra.pop("_time_reference", False):
        cmd += ["--time-reference"]
    if env_extra.pop("_cold_device", False):
        cmd += ["--cold-device"]
    env = dict(os.environ, **env_extra)
    plan = None
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    for line in p.stdout:
        line = line.rstrip("\n")
        if line.startswith("@@plan "):
            plan = [n for n in line[7:].split(",") if n]
            if names is None:
                progress.add_total(len(plan) * len(args.mode_list))
        elif line.startswith("@@step "):
            progress.step(f"{mode}: {line[7:]}")
        else:
            print(line, file=sys.stderr)
    rc = p.wait()
    try:
        with open(path) as f:
            out = json.load(f)
    except Exception as e:
        out = dict(mode=mode, configs={}, floors={}, errors=[f"no result file: {e!r}"])
    out["returncode"] = rc
    out["wall_s"] = time.time() - t0
    if rc != 0:
        out.setdefault("errors", []).append(f"worker {mode} exited with {rc}")
    return out, plan


_LOADED = object()  # source_fingerprint's default: the extension this process imported
_FFI_SOURCES = (".h", ".cc", ".cmake", ".txt")  # what ffi_sha256 hashes and extension_stale compares
REBUILD = "pip install --no-build-isolation -e ."  # the advice where the extension is stale


def source_fingerprint(root=None, extension=_LOADED):
    """What the run measured, so that a result file names its code whatever --name says: SHA-256
    digests (first 12 hex digits) of the kernels' sources (ffi/) and of this package's Python
    (jax_muse_attn/*.py) in the checkout the package is imported from, and the git commit and
    whether those paths differ from it where git and the .git directory are there (the device
    machine's copy of a tree has none). None for what is not there (an installed wheel has no
    ffi/). The built extension the run loads is named too: `extension_sha256`, the digest of its
    file (`extension`, None where it is not built), and `extension_stale`, true where a kernel
    source is newer than that file (an editable install not rebuilt after an edit: the run then
    measured older kernels than `ffi_sha256` names; None where either is missing). The default
    `extension` is the one this process imported where `root` is the package's own checkout, and
    none for another `root`."""
    import hashlib

    own_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if extension is _LOADED and root not in (None, own_root):
        extension = None  # another tree's sources against this process's build: not comparable
    root = root or own_root
    if extension is _LOADED:
        from jax_muse_attn import _ffi
        extension = getattr(_ffi._MODULE, "__file__", None)

    def sources(sub, suffixes):
        """The source files under root/sub in a fixed order (None where sub is not there)."""
        top = os.path.join(root, sub)
        if not os.path.isdir(top):
            return None
        paths = []
        for dirpath, dirnames, files in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            paths += [os.path.join(dirpath, fn) for fn in sorted(files) if fn.endswith(suffixes)]
        return paths

    def digest(paths):
        if paths is None:
            return None
        h = hashlib.sha256()
        for path in paths:
            h.update(os.path.relpath(path, root).replace(os.sep, "/").encode() + b"\0")
            with open(path, "rb") as f:
                h.update(f.read() + b"\0")
        return h.hexdigest()[:12]

    ffi_files = sources("ffi", _FFI_SOURCES)
    out = dict(ffi_sha256=digest(ffi_files),
               python_sha256=digest(sources("jax_muse_attn", (".py",))), git_commit=None, git_dirty=None,
               extension_sha256=None, extension_stale=None)
    if extension and os.path.isfile(extension):
        with open(extension, "rb") as f:
            out["extension_sha256"] = hashlib.sha256(f.read()).hexdigest()[:12]
        if ffi_files:
            out["extension_stale"] = max(map(os.path.getmtime, ffi_files)) > os.path.getmtime(extension)
    if os.path.exists(os.path.join(root, ".git")):  # a directory, or a file in a git worktree
        git = ["git", "-C", root]
        try:
            commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True,
                                    timeout=10, check=True).stdout.strip()
            status = subprocess.run(git + ["status", "--porcelain", "--", "ffi", "jax_muse_attn"],
                                    capture_output=True, text=True, timeout=10, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            pass  # no git, or not a repository after all: neither is known
        else:
            out["git_commit"], out["git_dirty"] = commit, bool(status.strip())
    return out


def _sources_text(src):
    """The table header's account of source_fingerprint()'s result ("" for runs saved before
    session 38, which have none)."""
    if not src:
        return ""
    text = f", sources ffi {src.get('ffi_sha256')} python {src.get('python_sha256')}"
    if src.get("git_commit"):
        text += f" git {src['git_commit'][:12]}{'+dirty' if src.get('git_dirty') else ''}"
    if src.get("extension_sha256"):
        text += f", extension {src['extension_sha256']}"
        if src.get("extension_stale"):
            text += f" (OLDER THAN THE SOURCES: rebuild with {REBUILD})"
    return text


def _device_name(kind):
    s = (kind or "unknown").lower().replace("nvidia", "").strip()
    return re.sub(r"[^a-z0-9]+", "_", s).strip("_") or "unknown"


def _fmt(x, nd=1):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{nd}f}"


def build_summary(cfgs, modes, torch_res):
    """Per-config figures the table and plot use (also stored in the JSON)."""
    floors = {}
    for m, r in modes.items():
        for k, v in r.get("floors", {}).items():
            floors[f"{k}[{m}]"] = v
    for k, v in (torch_res or {}).get("floors", {}).items():
        floors[k] = v
    copy_gbps = (torch_res or {}).get("floors", {}).get("torch_copy", {}).get("GBps")
    copy_src = "torch_copy"
    if copy_gbps is None:
        for m, r in modes.items():
            copy_gbps = r.get("floors", {}).get("jax_copy", {}).get("GBps")
            copy_src = f"jax_copy[{m}]"
            if copy_gbps:
                break
    rows = []
    for c in cfgs:
        row = dict(config=c.name, kv_mb=c.kv_bytes / 1e6, kv_bytes=c.kv_bytes, L=c.L, R=c.R, window=c.window)
        status = []
        for m, r in modes.items():
            rc = r.get("configs", {}).get(c.name, {})
            status.append(rc.get("status", "missing"))
            row[f"ours_{m}_us"] = rc.get("ours", {}).get("per_call_us")
            row[f"ours_dev_{m}_us"] = rc.get("ours_device", {}).get("per_call_us")
            row[f"ours_cold_{m}_us"] = rc.get("ours_cold", {}).get("per_call_us")
            row[f"ours_cold_dev_{m}_us"] = rc.get("ours_cold_device", {}).get("per_call_us")
            row[f"check_{m}"] = rc.get("check")
            if rc.get("num_splits") is not None:  # the split count the call ran with
                row.setdefault("num_splits", rc["num_splits"])
            if rc.get("launch_plan") is not None:
                row.setdefault("launch_plan", rc["launch_plan"])
            if "reference" in rc:
                row["reference_us"] = rc["reference"]["per_call_us"]
        row["status"] = ("ok" if all(s == "ok" for s in status) else "FAIL" if "FAIL" in status
                         else "ERROR" if "ERROR" in status else "/".join(sorted(set(status))))
        first = next(iter(modes), None)
        t = row.get(f"ours_{first}_us") if first else None
        row["ours_GBps"] = c.kv_bytes / (t * 1e-6) / 1e9 if t and t > 0 else None
        row["pct_copy"] = 100 * row["ours_GBps"] / copy_gbps if row["ours_GBps"] and copy_gbps else None
        fr = (torch_res or {}).get("configs", {}).get(c.name, {})
        row["fi_hot_us"], row["fi_cold_us"] = fr.get("hot_us"), fr.get("cold_us")
        row["fi_cold_graph_us"] = fr.get("cold_in_graph", {}).get("per_call_us")
        row["fi_check"] = fr.get("check")
        row["ratio_to_fi_hot"] = t / row["fi_hot_us"] if t and row["fi_hot_us"] else None
        td = row.get(f"ours_dev_{first}_us") if first else None  # the same on the device clock
        row["pct_copy_dev"] = (100 * c.kv_bytes / (td * 1e-6) / 1e9 / copy_gbps
                               if td and td > 0 and copy_gbps else None)
        row["ratio_to_fi_hot_dev"] = td / row["fi_hot_us"] if td and row["fi_hot_us"] else None
        tc = row.get(f"ours_cold_{first}_us") if first else None
        row["ratio_to_fi_cold"] = tc / row["fi_cold_us"] if tc and row["fi_cold_us"] else None
        tcd = row.get(f"ours_cold_dev_{first}_us") if first else None  # both inside a graph
        row["ratio_to_fi_cold_graph"] = (tcd / row["fi_cold_graph_us"]
                                         if tcd and row["fi_cold_graph_us"] else None)
        for k in ("reference_us", "fi_hot_us", "fi_cold_us"):
            v = row.get(k)
            row[k.replace("_us", "_GBps")] = c.kv_bytes / (v * 1e-6) / 1e9 if v and v > 0 else None
        rows.append(row)
    return rows, floors, dict(GBps=copy_gbps, source=copy_src if copy_gbps else None)


def format_table(rows, mode_names, copy):
    m0 = mode_names[0]
    hdr = ["config", "KV MB", "splits"] + [f"ours {m} µs" for m in mode_names] + [
        "GB/s", "% copy", "×FI hot", f"ours {m0} dev µs", "% copy dev", "×FI dev", "FI hot µs",
        "FI cold µs", "ours cold µs", "ours cold dev µs", "FI cold graph µs", "×FI cold graph",
        "ref µs", "check"]
    lines = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    for r in rows:
        fail = r["status"] != "ok"
        cells = [r["config"], _fmt(r["kv_mb"]), _fmt(r.get("num_splits"), 0)]
        cells += ["FAIL" if fail and r.get(f"check_{m}") and not r[f"check_{m}"].get("ok") else _fmt(r.get(f"ours_{m}_us"))
                  for m in mode_names]
        fic = r.get("fi_check")
        cells += [_fmt(r.get("ours_GBps"), 0), _fmt(r.get("pct_copy"), 0), _fmt(r.get("ratio_to_fi_hot"), 2),
                  _fmt(r.get(f"ours_dev_{m0}_us")), _fmt(r.get("pct_copy_dev"), 0),
                  _fmt(r.get("ratio_to_fi_hot_dev"), 2),
                  _fmt(r.get("fi_hot_us")) + ("" if not fic or fic.get("ok") else " (FI wrong)"),
                  _fmt(r.get("fi_cold_us")), _fmt(r.get(f"ours_cold_{m0}_us")),
                  _fmt(r.get(f"ours_cold_dev_{m0}_us")), _fmt(r.get("fi_cold_graph_us")),
                  _fmt(r.get("ratio_to_fi_cold_graph"), 2), _fmt(r.get("reference_us")),
                  r["status"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"copy bandwidth floor: {_fmt(copy.get('GBps'), 0)} GB/s ({copy.get('source')}); "
                 f"GB/s and % copy from ours with command buffers {m0}; ×FI hot = ours {m0} / FlashInfer hot; "
                 f"dev: ours {m0} timed on the device clock (the same chains), % copy and ×FI of it; "
                 f"cold: ours = paired (flush, call) chains by the host's clock, FI = one graph replay "
                 f"after a flush (the anchors' way, its launch included); cold dev / graph: each call "
                 f"after a flush between two device timestamps inside the graph, ours and FI alike.")
    return "\n".join(lines)


def make_plot(rows, path, mode_names):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        return f"plot skipped: matplotlib not importable ({e!r})"
    impls = [(f"ours_{m}_us", f"ours (cmdbuf {m})") for m in mode_names] + [
        (f"ours_cold_{mode_names[0]}_us", "ours cold"),
        (f"ours_cold_dev_{mode_names[0]}_us", "ours cold (in graph, device clock)"),
        ("fi_hot_us", "FlashInfer fa2 hot"), ("fi_cold_us", "FlashInfer fa2 cold"),
        ("fi_cold_graph_us", "FlashInfer fa2 cold (in graph)"), ("reference_us", "jnp reference")]
    rs = sorted({r["R"] for r in rows})
    fig, axes = plt.subplots(2, len(rs), figsize=(4 * len(rs), 7), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    used = set()
    for j, R in enumerate(rs):
        sub = [r for r in rows if r["R"] == R]
        for k, (key, label) in enumerate(impls):
            col = colors[k % len(colors)]
            for row_i, conv in ((0, lambda r, t: t), (1, lambda r, t: r["kv_bytes"] / (t * 1e-6) / 1e9)):
                ax = axes[row_i][j]
                full = sorted([r for r in sub if r["window"] is None and r.get(key)], key=lambda r: r["L"])
                if full:
                    ax.plot([r["L"] for r in full], [conv(r, r[key]) for r in full], "o-", color=col)
                    used.add(k)
                swa = [r for r in sub if r["window"] is not None and r.get(key)]
                if swa:
                    ax.plot([r["L"] for r in swa], [conv(r, r[key]) for r in swa], "*", color=col, ms=12)
                    used.add(k)
        for row_i, yl in ((0, "µs per call"), (1, "GB/s (KV bytes read / time)")):
            ax = axes[row_i][j]
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("context (keys)")
            ax.set_ylabel(yl)
            ax.grid(True, which="both", alpha=0.3)
        axes[0][j].set_title(f"R = {R}")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[k % len(colors)], marker="o", label=impls[k][1]) for k in sorted(used)]
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8)
    fig.suptitle("verify attention, 16/2 heads, D 64, 8 tokens a request (lines: full attention; "
                 "★: SWA, window 2048 on the grid)", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# --budget-s parts: the first JAX worker (it also times the reference) 1.3, each other JAX worker
# 1, the torch worker (FlashInfer and the floors, ~10-15 s on an H200) this much.
TORCH_BUDGET_PART = 0.15


def worker_deadline(now, end, parts):
    """When the worker starting now must stop starting configs: its share, parts[0] of sum(parts)
    (its own and the parts of the workers after it), of the time left until end."""
    left = max(0.0, end - now)
    return now + left * parts[0] / sum(parts)


def parent(args):
    progress = _Progress()
    os.makedirs(args.out, exist_ok=True)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    source = source_fingerprint()  # the sources as the run starts (not as it ends)
    if source.get("extension_stale"):
        print("WARNING: the built extension is older than a kernel source under ffi/; this run "
              f"measures the old build (rebuild: {REBUILD})", file=sys.stderr)
    modes, plan, errors = {}, None, []
    t_start = time.time()
    # --budget-s: workers run one after the other; each, when it starts, gets its part of the time
    # left (worker_deadline), so what one leaves unused goes to those after it.
    torch_importable = importlib.util.find_spec("torch") is not None
    torch_runs = not args.no_flashinfer and torch_importable
    parts = [1.3] + [1.0] * (len(args.mode_list) - 1) + ([TORCH_BUDGET_PART] if torch_runs else [])
    t_end = t_start + args.budget_s if args.budget_s else None
    with tempfile.TemporaryDirectory() as tmp:
        for i, m in enumerate(args.mode_list):
            extra = {"XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + " " + MODES[m]).strip()}
            if t_end:
                extra["_deadline_at"] = worker_deadline(time.time(), t_end, parts[i:])
            if i == 0:  # the first mode's worker also times the reference and cold on the device clock
                extra["_time_reference"] = True
                extra["_cold_device"] = True
            res, p = _run_worker(m, args, plan, progress, tmp, extra)
            if plan is None:
                plan = p
            modes[m] = res
            errors += [f"[{m}] {e}" for e in res.get("errors", [])]
        torch_res = None
        if plan is None:
            plan = []
        if args.no_flashinfer:
            torch_res = dict(unavailable="skipped (--no-flashinfer)")
        elif not torch_importable:
            torch_res = dict(unavailable="torch not importable")
        elif all(r.get("platform") == "cpu" for r in modes.values()):
            torch_res = dict(unavailable="JAX runs on CPU: FlashInfer and GPU floors not run")
        else:
            progress.add_total(len(plan))
            extra = {}
            if args.flashinfer_path and os.path.isdir(args.flashinfer_path):  # torch worker only
                extra["PYTHONPATH"] = os.pathsep.join(
                    [args.flashinfer_path] + [x for x in [os.environ.get("PYTHONPATH")] if x])
            if t_end:
                extra["_deadline_at"] = t_end
            torch_res, _ = _run_worker("torch", args, plan, progress, tmp, extra)
            errors += [f"[torch] {e}" for e in torch_res.get("errors", [])]
            while progress.n < progress.total:
                progress.step("torch: " + str(torch_res.get("unavailable", "done")))
    progress.close()

    cfgs = [parse_config(n) for n in plan]
    env = next(iter(modes.values()), {})
    name = args.name or _device_name(env.get("device_kind") if env.get("platform") != "cpu" else "cpu")
    meta = dict(started=started, finished=datetime.datetime.now().isoformat(timespec="seconds"),
                argv=sys.argv, args={k: v for k, v in vars(args).items()}, name=name,
                modes={m: MODES[m] for m in modes}, tolerance=dict(atol=ATOL, rtol=RTOL),
                source=source, method=__doc__)
    return write_outputs(args.out, name, meta, cfgs, modes, torch_res, errors, args.repeats)


def write_outputs(out_dir, name, meta, cfgs, modes, torch_res, errors, repeats):
    """The table, plot and JSON of a run from its workers' raw figures (also --render)."""
    env = next(iter(modes.values()), {})
    rows, floors, copy = build_summary(cfgs, modes, torch_res)
    # Exit 1 on a failed check, an error or a crashed worker; configs skipped for --budget-s only warn.
    ok = bool(cfgs) and all(set(r["status"].split("/")) <= {"ok", "skipped"} for r in rows) and not any(
        r.get("returncode") for r in modes.values())
    skipped = [r["config"] for r in rows if r["status"] != "ok" and "skipped" in r["status"]]
    table = format_table(rows, list(modes), copy)
    fl = []
    for k, v in floors.items():
        if isinstance(v, dict):
            for kk in ("GBps", "per_call_us", "graph1_back_to_back_us", "per_kernel_in_graph100_us"):
                if v.get(kk) is not None:
                    fl.append(f"{k} {kk}={_fmt(v[kk], 2)}")
        else:
            fl.append(f"{k}={_fmt(v, 2)}")
    fi_state = torch_res.get("unavailable") or f"FlashInfer {torch_res.get('flashinfer', {}).get('version', '?')}"
    header = (f"device {env.get('device_kind')} ({env.get('platform')}), jax {env.get('jax')}, "
              f"{fi_state}, repeats {repeats}{_sources_text(meta.get('source'))}")
    text = "\n".join([header, "", table, "", "floors: " + "; ".join(fl)] + (["", "errors:"] + errors if errors else []))
    print(text)
    out = dict(meta=meta,
               configs=[c.as_dict() for c in cfgs], summary=rows, floors=floors, copy_floor=copy,
               workers=dict(modes, torch=torch_res), errors=errors, skipped=skipped,
               all_checks_passed=ok)
    jpath = os.path.join(out_dir, f"{name}.json")
    _save(jpath, out)
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write(text + "\n")
    msg = make_plot(rows, os.path.join(out_dir, f"{name}.png"), list(modes))
    print(msg or f"wrote {jpath}, {name}.md, {name}.png in {out_dir}")
    if skipped:
        print(f"{len(skipped)} config(s) not measured in every mode (--budget-s ran out): {', '.join(skipped)}")
    print("ALL CHECKS PASSED" if ok else "SOME CHECKS FAILED (or a config errored, or a worker crashed): exit 1")
    return 0 if ok else 1


def render(path, out_dir=None):
    """Re-renders a saved run (NAME.json: its workers' raw figures) into NAME.{json,md,png} with
    this version's summary, table and plot, e.g. after a column was added. Measures nothing.
    NAME is the file's, not the name the run was made under (results are renamed when archived:
    rendering one never writes over another run's files)."""
    with open(path) as f:
        saved = json.load(f)
    name = os.path.splitext(os.path.basename(path))[0]
    meta = dict(saved["meta"], name=name, rendered=datetime.datetime.now().isoformat(timespec="seconds"))
    if saved["meta"].get("name") != name:
        meta["run_name"] = saved["meta"].get("run_name", saved["meta"].get("name"))
    workers = saved["workers"]
    modes = {m: workers[m] for m in saved["meta"]["modes"] if m in workers}
    cfgs = [parse_config(c["name"]) for c in saved["configs"]]
    repeats = saved["meta"].get("args", {}).get("repeats")
    return write_outputs(out_dir or os.path.dirname(os.path.abspath(path)), name, meta,
                         cfgs, modes, workers.get("torch"), saved.get("errors", []), repeats)


DEFAULT_OUT = os.path.join("benchmarks", "results")


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m jax_muse_attn.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="", help="comma-separated config names or fnmatch patterns "
                    "(e.g. 'full128k-*,swa32k-r1'); default all of the grid")
    ap.add_argument("--quick", action="store_true",
                    help="a small grid (GPU: 5 configs; CPU: 2 tiny configs)")
    ap.add_argument("--out", default=None,
                    help=f"output folder (default {DEFAULT_OUT}; with --render, the saved run's folder)")
    ap.add_argument("--name", default=None, help="file stem (default from the device kind, e.g. h200)")
    ap.add_argument("--repeats", type=int, default=20, help="timed repeats a measurement (median)")
    ap.add_argument("--modes", default="on,off", help="command-buffer modes to run: on,off")
    ap.add_argument("--chain", type=int, default=40, help="max calls N in a chain (ours)")
    ap.add_argument("--ref-chain", type=int, default=10, help="max calls N in a reference chain")
    ap.add_argument("--cold-chain", type=int, default=30, help="(flush, call) pairs in the cold chain")
    ap.add_argument("--target-ms", type=float, default=30.0, help="N is cut so a chain runs about this long")
    ap.add_argument("--no-flashinfer", action="store_true", help="skip the torch/FlashInfer worker")
    ap.add_argument("--no-device-clock", action="store_true",
                    help="skip the device-clock timing of our chains (the 'dev' column)")
    ap.add_argument("--flashinfer-path", default="/tmp/site",
                    help="folder put first on PYTHONPATH of the torch/FlashInfer worker only, where it "
                         "exists (default /tmp/site, where the anchors' tarball is extracted)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="wall-clock budget: workers skip the configs left when their share runs out")
    ap.add_argument("--render", default=None, metavar="JSON",
                    help="measure nothing: re-render a saved run's table, plot and summary (NAME.json)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--deadline-at", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result-file", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--time-reference", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cold-device", action="store_true", help=argparse.SUPPRESS)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.render:
        return render(args.render, args.out)
    if args.worker == "torch":
        return torch_worker(args)
    if args.worker:
        return jax_worker(args)
    args.out = args.out or DEFAULT_OUT
    args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.mode_list if m not in MODES]
    if bad or not args.mode_list:
        raise SystemExit(f"--modes: unknown {bad}; choose from {list(MODES)}")
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
