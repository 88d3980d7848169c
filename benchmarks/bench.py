"""Benchmark of jax_muse_attn.verify_attention against FlashInfer, the jnp reference and the floors.

    python benchmarks/bench.py [--quick] [--grid serving] [--configs PAT,...] [--kv-dtypes bf16,fp8] [--num-splits N]
                               [--modes on,off] [--budget-s S] [--out DIR] [--name NAME]
    python benchmarks/bench.py --render benchmarks/results/h200.json   # redraw, measure nothing

The grid is one tensor-parallel rank of Muse Spark verify attention: 16 q heads / 2 KV heads,
D 64, bf16, 8 new tokens a request, 16-key pages, shuffled block ids, every request at the full
context, causal, scale 1/8; SWA (window 2048) at 32k and full attention at 2k, 8k, 32k, 128k, each
for R = 1, 2, 4, 8, 16 requests. Config names: ``full32k-r4``, ``swa32k-r16``, ``swa2k-w256-r2``
(``--configs`` takes comma-separated names or fnmatch patterns, e.g. ``'full128k-*,swa*'``; any
name that parses runs, on the grid or not; ``-drafts``, ``-tree`` or ``-lse`` after a name runs
the drafts target's call beside it: ragged draft counts, a token tree, the lse returned). A ``-fp8`` suffix (``full32k-r4-fp8``) reads a
float8_e4m3fn cache with per-tensor scales 1 (every peer's fastest form); ``--kv-dtypes bf16,fp8``
runs each selected config with both caches. ``--grid serving`` is serving scale: R = 32-256 at
SWA 32k and full 2k / 8k, 32-128 at 32k, 32-64 at 128k, and ragged batches (``ragged1k-128k-r64``:
64 requests of lengths drawn log-uniformly in [1k, 128k] from a seed of the name; ``-w2048``
with a window).

Measured in one run, every implementation on the same values: ours (``verify_attention(...,
backend="ffi")``) hot, per call from chains of dependent calls inside one jit, by the host's wall
clock and the device's own clock, with XLA command buffers on and off; ours cold (after an L2
flush, by device timestamps); every timed output checked against ``jax_muse_attn.reference``
first (exit code 1 on a failure); the jnp reference; FlashInfer fa2 and XQA (its speculative-decoding
kernel) where torch and flashinfer import, each checked before it is timed;
the copy, empty-kernel, two-dependent-kernel, no-op-call and dispatch floors; and each config's launch plan
(``jax_muse_attn.launch_plan``). ``MUSE_ATTN_LAUNCH`` (the launch plan's debug override, e.g.
``merge_pdl=0``) and ``--num-splits`` apply to every timed call and to the recorded plan. The
method in full: benchmarks/README.md.

Writes DIR/NAME.json (every raw sample), NAME.md (the table) and NAME.png (with matplotlib).
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import functools
import hashlib
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
import zlib

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
LAUNCH_ENV = "MUSE_ATTN_LAUNCH"
FLUSH_BYTES_GPU = 256 << 20
FLUSH_BYTES_CPU = 4 << 20
COLD_BRACKETS = 10    # (flush, call) brackets a jit for the cold figure (x repeats samples)
XQA_APPROX_RELERR = 0.06  # XQA's FP8 kernel (Q and P in FP8) measures ~0.04 here: timed, marked
REF_CHAIN = 10        # most calls in a chain of the reference
# The jnp reference gathers every request's keys and scores them in fp32: past this many bytes of
# that a config's check runs it over slices of the requests, and its time is not measured.
REF_BYTES = 4 << 30
TARGET_S = 0.03       # N is cut so that a chain runs about this long
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ----------------------------------------------------------------------------- configs
KV_DTYPES = ("bf16", "fp8")
KV_SCALE = 1.0  # the FP8 configs' per-tensor k_scale = v_scale


class Config:
    """One benchmark config: R requests of context L each, or (ragged: span = (lo, hi)) of
    lengths drawn log-uniformly in [lo, hi] from a seed of the name, L their longest."""

    def __init__(self, L, R, window=None, kv="bf16", span=None, call="chain"):
        self.R, self.window, self.kv, self.span, self.call = int(R), window, kv, span, call
        self.L = int(L) if span is None else max(self.lens)

    @property
    def lens(self):
        if self.span is None:
            return (self.L,) * self.R
        lo, hi = self.span
        rng = np.random.default_rng(zlib.crc32(f"ragged {lo} {hi} {self.R}".encode()))
        x = np.exp(rng.uniform(math.log(lo), math.log(hi), self.R))
        return tuple(int(v) for v in np.clip(np.round(x), lo, hi))

    @property
    def name(self):
        suffix = ("" if self.kv == "bf16" else f"-{self.kv}") + ("" if self.call == "chain" else f"-{self.call}")
        if self.span is not None:
            w = "" if self.window is None else f"-w{self.window}"
            return f"ragged{_k(self.span[0])}-{_k(self.span[1])}{w}-r{self.R}{suffix}"
        if self.window is None:
            return f"full{_k(self.L)}-r{self.R}{suffix}"
        w = "" if self.window == SWA_WINDOW else f"-w{self.window}"
        return f"swa{_k(self.L)}{w}-r{self.R}{suffix}"

    @property
    def fp8(self):
        return self.kv == "fp8"

    @property
    def ragged(self):
        return self.span is not None

    def with_kv(self, kv):
        return Config(self.L, self.R, self.window, kv, self.span, self.call)

    def with_call(self, call):
        return Config(self.L, self.R, self.window, self.kv, self.span, call)

    def draft_kwargs(self):
        """The drafts target's arguments of a non-chain call (numpy): drafts: per-request counts
        6, 4, 2, 8, ...; tree: one 8-draft tree a request (depths 0 1 1 2 2 2 3 3, a row's
        mask its ancestors and itself); lse: the chain with return_lse."""
        if self.call == "drafts":
            return dict(draft_lens=np.array([NQ - ((r + 1) % 4) * 2 for r in range(self.R)], np.int32))
        if self.call == "tree":
            parent = (-1, 0, 0, 1, 1, 2, 3, 5)[:NQ]
            bits, depth = [], []
            for t, up in enumerate(parent):
                bits.append((1 << t) | (bits[up] if up >= 0 else 0))
                depth.append(depth[up] + 1 if up >= 0 else 0)
            return dict(tree_mask=np.tile(np.array(bits, np.uint32), (self.R, 1)),
                        draft_depths=np.tile(np.array(depth, np.int32), (self.R, 1)))
        if self.call == "lse":
            return dict(return_lse=True)
        return {}

    @property
    def pages(self):
        """Block-table columns: the longest request's pages."""
        return -(-self.L // PAGE)

    @property
    def request_pages(self):
        return tuple(-(-n // PAGE) for n in self.lens)

    @property
    def blocks(self):
        return sum(self.request_pages)

    def _keys(self, n):
        return n if self.window is None else n - max(0, n - NQ - (self.window - 1))

    @property
    def keys_read(self):
        """Keys a request must read: its context, or the window span of its 8 tokens (ragged:
        the mean over the requests)."""
        return self._keys(self.L) if self.span is None else self.keys_total / self.R

    @property
    def keys_total(self):
        return sum(self._keys(n) for n in self.lens)

    @property
    def kv_bytes(self):
        return self.keys_total * H_KV * D * 2 * (1 if self.fp8 else 2)  # K and V

    def as_dict(self):
        return dict(name=self.name, L=self.L, R=self.R, window=self.window, kv=self.kv, keys_read=self.keys_read,
                    kv_bytes=self.kv_bytes, q_heads=H_Q, kv_heads=H_KV, head_dim=D, page=PAGE,
                    tokens=NQ, scale=SCALE, lens=list(self.lens) if self.ragged else None, call=self.call)


def _k(n):
    return f"{n // 1024}k" if n % 1024 == 0 else f"{n}"


def _n(text):
    return int(text[:-1]) * 1024 if text.endswith("k") else int(text)


CALLS = ("drafts", "tree", "lse")  # the drafts target's calls beside the chain (Config.draft_kwargs)
CONFIG_RE = (r"(?:(full|swa)(\d+k?)(?:-w(\d+))?-r(\d+)(?:-(fp8))?"
             r"|ragged(\d+k?)-(\d+k?)(?:-w(\d+))?-r(\d+)(?:-(fp8))?)(?:-(drafts|tree|lse))?")


def parse_config(name):
    m = re.fullmatch(CONFIG_RE, name)
    if not m:
        raise ValueError(f"bad config name {name!r} (e.g. full32k-r4, swa32k-r1, swa2k-w256-r2, full8k-r4-fp8, "
                         f"ragged1k-128k-r64)")
    if m.group(6):
        lo, hi = _n(m.group(6)), _n(m.group(7))
        if not 0 < lo <= hi:
            raise ValueError(f"bad config name {name!r}: a ragged span needs 0 < lo <= hi")
        return Config(hi, int(m.group(9)), int(m.group(8)) if m.group(8) else None, m.group(10) or "bf16",
                      span=(lo, hi), call=m.group(11) or "chain")
    window = None if m.group(1) == "full" else int(m.group(3) or SWA_WINDOW)
    return Config(_n(m.group(2)), int(m.group(4)), window, m.group(5) or "bf16", call=m.group(11) or "chain")


# The serving-scale grid (--grid serving): a TP8 rank verifies 32-256 requests a step; at 32k and
# 128k as many as the GPU holds comfortably; ragged batches of lengths in 1k-128k.
SERVING_R = (32, 48, 64, 128, 256)
SERVING_NAMES = (
    [f"swa32k-r{r}" for r in SERVING_R] + [f"full2k-r{r}" for r in SERVING_R]
    + [f"full8k-r{r}" for r in SERVING_R] + [f"full32k-r{r}" for r in (32, 64, 128)]
    + [f"full128k-r{r}" for r in (32, 64)]
    + [f"ragged1k-128k-r{r}" for r in (16, 64, 256)] + ["ragged1k-128k-w2048-r64"])
GRIDS = ("default", "serving")


def full_grid(grid="default"):
    if grid == "serving":
        return [parse_config(n) for n in SERVING_NAMES]
    return ([Config(SWA_CONTEXT, r, SWA_WINDOW) for r in R_VALUES]
            + [Config(L, r) for L in FULL_CONTEXTS for r in R_VALUES])


QUICK_GPU = ("swa32k-r1", "swa32k-r16", "full2k-r1", "full32k-r4", "full128k-r16")
QUICK_CPU = ("full1k-r1", "swa2k-w256-r2")


def select_configs(patterns, quick, platform, kv_dtypes=("bf16",), grid="default"):
    """The configs of a run: the grid (or the quick one), or those the patterns name, each with
    every cache dtype of kv_dtypes (a name with its own -fp8 suffix keeps it)."""
    if quick:
        grid = [parse_config(n) for n in (QUICK_CPU if platform == "cpu" else QUICK_GPU)]
    else:
        grid = full_grid(grid)
    grid = [c.with_kv(kv) for c in grid for kv in kv_dtypes]
    if not patterns:
        return grid
    out = []
    for pat in (p.strip() for p in patterns.split(",")):
        if not pat:
            continue
        # A pattern without the -fp8 suffix names a config whatever its cache.
        hits = [c for c in grid if fnmatch.fnmatch(c.name, pat) or fnmatch.fnmatch(c.with_kv("bf16").name, pat)]
        if not hits:
            c = parse_config(pat)
            hits = [c] if c.fp8 else [c.with_kv(kv) for kv in kv_dtypes]
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
    """The hash on int64 numpy arrays or torch tensors (24-bit integers; see jax_hash_array)."""
    x = (_mul32_int64(i, _GOLD) + (seed * _SEEDMUL & _M32)) & _M32
    x = x ^ (x >> 16)
    x = _mul32_int64(x, _C1)
    x = x ^ (x >> 13)
    x = _mul32_int64(x, _C2)
    x = x ^ (x >> 16)
    return x >> 8


def jax_hash_array(shape, seed, dtype="bfloat16"):
    """The hashed values as a JAX array of dtype (bfloat16, or float8_e4m3fn: the same float32
    values rounded to nearest even, exact in both, as torch rounds them)."""
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
        return v.astype(dtype).reshape(shape)

    return gen()


def block_table_np(cfg):
    """[R, pages]: a random permutation of the blocks; a ragged request's row holds its own
    pages first, then block 0 (never read: past its seq_len)."""
    rng = np.random.default_rng(1000 + cfg.R * 131 + cfg.L)
    perm = rng.permutation(cfg.blocks).astype(np.int32)
    if not cfg.ragged:
        return perm.reshape(cfg.R, cfg.pages)
    table = np.zeros((cfg.R, cfg.pages), np.int32)
    at = 0
    for r, n in enumerate(cfg.request_pages):
        table[r, :n] = perm[at:at + n]
        at += n
    return table


def jax_inputs(cfg):
    """(q, kv_cache, block_table, seq_lens) of cfg as JAX arrays (the torch worker builds the same
    values): hashed q and KV, a random permutation of the blocks, every request full."""
    import jax.numpy as jnp

    kv = jax_hash_array((cfg.blocks, H_KV, PAGE, 2 * D), SEED_KV,
                        "float8_e4m3fn" if cfg.fp8 else "bfloat16")
    q = jax_hash_array((NQ * cfg.R, H_Q, D), SEED_Q)
    return q, kv, jnp.asarray(block_table_np(cfg)), jnp.asarray(cfg.lens, jnp.int32)


def flush_l2(x, buf):
    """x after an L2 flush: a reduction over buf that depends on x (so it runs after whatever made
    x, and no two flushes merge), folded into x as zero (so whatever uses x runs after it)."""
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


def _error_text(e):
    return "".join(traceback.format_exception_only(type(e), e))[-2000:]


def bracket_result(call_us, empty_us, **extra):
    """A cold figure from timed brackets: the median bracket with the call minus the median
    bracket without it, and every sample."""
    return dict(per_call_us=_median(call_us) - _median(empty_us), bracket_us=_median(empty_us),
                call_bracket_us=call_us, empty_bracket_us=empty_us, n=len(call_us), **extra)


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


# ----------------------------------------------------------------------------- JAX worker
def jax_worker(args):
    import jax
    import jax.numpy as jnp

    import device_clock as dc
    import jax_muse_attn
    from jax_muse_attn import reference

    dev = jax.devices()[0]
    gpu = jax.default_backend() != "cpu"
    configs = select_configs(args.configs, args.quick, "gpu" if gpu else "cpu", args.kv_dtype_list, args.grid)
    _emit("plan", ",".join(c.name for c in configs))
    res = dict(mode=args.worker, xla_flags=os.environ.get("XLA_FLAGS", ""), jax=jax.__version__,
               backend=jax.default_backend(), device_kind=dev.device_kind,
               handlers=list(jax_muse_attn.registered_platforms()),
               launch_override=os.environ.get(LAUNCH_ENV, ""), num_splits=args.num_splits,
               configs={}, floors={}, errors=[])
    _save(args.result_file, res)
    try:  # a bad MUSE_ATTN_LAUNCH or --num-splits: say so once, measure nothing
        sds = jax.ShapeDtypeStruct
        jax_muse_attn.launch_plan(sds((NQ, H_Q, D), jnp.bfloat16), sds((4, H_KV, PAGE, 2 * D), jnp.bfloat16),
                                  sds((1, 4), jnp.int32), num_splits=args.num_splits)
    except (ValueError, RuntimeError) as e:
        res["fatal"] = str(e)
        _save(args.result_file, res)
        return 2
    flush_bytes = FLUSH_BYTES_GPU if gpu else FLUSH_BYTES_CPU

    def wall(f, *a):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*a))
        return time.perf_counter() - t0

    def chain_time(f1, fN, n, a):
        t1s, tns, per = dc.paired_per_call(lambda: wall(f1, *a), lambda: wall(fN, *a), n, args.repeats)
        return dict(per_call_us=_median(per), n=n, t1_s=t1s, tN_s=tns)

    use_clock = not args.no_device_clock and dc.available()
    res["device_clock"] = use_clock

    def device_chain_time(step, n, a):
        return dc.chain_per_call(step, n, a, args.repeats)

    def pick_n(f1, a, cap):
        est = _median([wall(f1, *a) for _ in range(5)])
        return int(min(cap, max(4, TARGET_S / max(est, 1e-6))))

    # ---- floors
    try:
        small = jnp.zeros((1,), jnp.float32)
        inc = jax.jit(lambda x: x + 1)
        for _ in range(5):
            wall(inc, small)
        res["floors"]["jax_dispatch_tiny_jit_us"] = _median([wall(inc, small) for _ in range(50)]) * 1e6
        n1 = (1 << 30) if gpu else (16 << 20)
        xs = [jnp.zeros((n1 // 4,), jnp.float32), jnp.zeros((2 * n1 // 4,), jnp.float32)]
        ts = [[], []]
        for rep in range(args.repeats + 3):
            for j in (0, 1):
                t = wall(inc, xs[j])
                if rep >= 3:
                    ts[j].append(t)
        dt = _median(ts[1]) - _median(ts[0])
        res["floors"]["jax_copy"] = dict(GBps=2 * n1 / dt / 1e9 if dt > 0 else None,
                                         t_small_s=ts[0], t_large_s=ts[1],
                                         how="x+1 over n and 2n bytes: 2n / (t(2n) - t(n))")
        del xs
    except Exception as e:  # pragma: no cover
        res["errors"].append(f"floors jax_copy: {e!r}")
    try:
        q0, kv0, bt0, sl0 = jax_inputs(Config(256, 1))

        def noop(x):
            return jax_muse_attn.verify_attention(x, kv0, bt0, sl0, scale=SCALE, num_reqs=0, backend="ffi")

        def noop_chain(x):
            for _ in range(args.chain):
                x = noop(x)
            return x

        r = chain_time(jax.jit(noop), jax.jit(noop_chain), args.chain, (q0,))
        res["floors"]["ours_noop_call"] = r
        if use_clock:
            res["floors"]["ours_noop_call_device"] = device_chain_time(noop, args.chain, (q0,))
    except Exception as e:
        res["errors"].append(f"floors ours_noop_call: {e!r}")
    if use_clock:
        try:
            # Two dependent kernels a step, each as short as a kernel gets: the clock's one-thread
            # kernel, then the elementwise select that reads it. About twice the cost of one
            # kernel boundary, what a call of two launches (split, merge) pays once.
            res["floors"]["two_dependent_kernels_device"] = device_chain_time(
                lambda x: dc.order_after(x, dc.device_clock(x)), args.chain, (jnp.zeros((8,), jnp.float32),))
        except Exception as e:
            res["errors"].append(f"floors two_dependent_kernels: {e!r}")
    _save(args.result_file, res)

    buf = jnp.ones((flush_bytes // 4,), jnp.float32)  # f32: no convert that XLA could hoist and share

    @jax.jit
    def ok_stats(o, r):
        err = jnp.abs(o.astype(jnp.float32) - r.astype(jnp.float32))
        return jnp.max(err), jnp.sum(~(err <= ATOL + RTOL * jnp.abs(r.astype(jnp.float32))))

    for cfg in configs:
        rec = _start_config(args, res, cfg)
        if rec is None:
            continue
        try:
            q, kv, bt, sl = jax_inputs(cfg)
            w = cfg.window
            rec["launch_plan"] = jax_muse_attn.launch_plan(q, kv, bt, window=w, tokens_per_request=NQ,
                                                           num_splits=args.num_splits,
                                                           drafts=cfg.call in ("drafts", "tree"))
            scales = dict(k_scale=jnp.float32(KV_SCALE), v_scale=jnp.float32(KV_SCALE)) if cfg.fp8 else {}

            drafts = {k: v if isinstance(v, bool) else jnp.asarray(v) for k, v in cfg.draft_kwargs().items()}
            first = (lambda r: r[0]) if cfg.call == "lse" else (lambda r: r)  # out; lse left in the jit

            def ours(x, kv, bt, sl, w=w):
                return first(jax_muse_attn.verify_attention(x, kv, bt, sl, scale=SCALE, window=w, backend="ffi",
                                                            num_splits=args.num_splits, **scales, **drafts))

            def ref(x, kv, bt, sl, w=w, d=drafts):
                return first(reference.verify_attention(x, kv, bt, sl, scale=SCALE, window=w, **scales, **d))

            # A chain returns every call's output when it is checked (keep=True) and only the
            # last when it is timed: outputs that leave the jit get fresh buffers every run, a
            # cost of several us a call that a decode step, whose attention outputs stay inside
            # the jit, never pays. Both forms run the same calls.
            def chain(step, n, keep=False):
                def f(x, kv, bt, sl):
                    outs = []
                    for _ in range(n):
                        x = step(x, kv, bt, sl)
                        outs.append(x)
                    return tuple(outs) if keep else x
                return jax.jit(f)

            def cold_bracketed(n, with_call, keep=False):
                # n calls, each right after an L2 flush and between two clock reads: the first
                # after the flush, the call after the first (order_after), the second after the
                # call, the next flush after the second. Without the call: the empty brackets.
                def f(x, buf, kv, bt, sl):
                    outs, t0s, t1s = [], [], []
                    for _ in range(n):
                        x = flush_l2(x, buf)
                        t0 = dc.device_clock(x)
                        x = dc.order_after(x, t0)
                        if with_call:
                            x = ours(x, kv, bt, sl)
                            outs.append(x)
                        t1 = dc.device_clock(x)
                        x = dc.order_after(x, t1)
                        t0s.append(t0)
                        t1s.append(t1)
                    return (tuple(outs) if keep else x), jnp.stack(t0s), jnp.stack(t1s)
                return jax.jit(f)

            # The reference's gathered K/V (bf16) and fp32 scores, over slices of the requests
            # where the whole would not fit beside the cache.
            per_request = cfg.pages * PAGE * (H_KV * 2 * D * 2 + H_Q * NQ * 4 * 2)
            chunk = max(1, min(cfg.R, REF_BYTES // per_request))
            # (first request, end, the reference's jit over them with their draft operands)
            slices = [(r0, min(cfg.R, r0 + chunk),
                       jax.jit(functools.partial(ref, d={k: v if isinstance(v, bool) else v[r0:r0 + chunk]
                                                          for k, v in drafts.items()})))
                      for r0 in range(0, cfg.R, chunk)]

            def ref1(x, kv, bt, sl):
                if len(slices) == 1:
                    return slices[0][2](x, kv, bt, sl)
                return jnp.concatenate([f(x[NQ * r0:NQ * r1], kv, bt[r0:r1], sl[r0:r1]) for r0, r1, f in slices])
            check = dict(ok=True, max_abs_err=0.0, n_bad=0, outputs_checked=0, timed_equals_checked=True)

            def check_timed(timed, keep_all, *xs, outputs=lambda r: r):
                # Every output of the chain (keep_all) against the reference fed the same input,
                # then the timed jit's output against the last of them, bit for bit.
                outs = outputs(keep_all(*xs))
                for xi, oi in zip((q,) + tuple(outs[:-1]), outs):
                    m, nb = (float(v) for v in ok_stats(oi, ref1(xi, kv, bt, sl)))
                    check["max_abs_err"] = max(check["max_abs_err"], m) if math.isfinite(m) else float("nan")
                    check["n_bad"] += int(nb)
                    check["outputs_checked"] += 1
                    check["ok"] &= nb == 0 and math.isfinite(m)
                last = outputs(timed(*xs))
                same = bool(np.array_equal(np.asarray(last).view(np.uint16), np.asarray(outs[-1]).view(np.uint16)))
                check["timed_equals_checked"] &= same
                check["ok"] &= same

            a = (q, kv, bt, sl)
            f1 = chain(ours, 1)
            check_timed(f1, chain(ours, 1, keep=True), *a)
            n = pick_n(f1, a, args.chain) if check["ok"] else 0
            fN = chain(ours, n) if check["ok"] else None
            if check["ok"]:
                check_timed(fN, chain(ours, n, keep=True), *a)
            cold = use_clock and args.first
            nb = min(COLD_BRACKETS, args.chain)
            if check["ok"] and cold:
                fc = cold_bracketed(nb, True)
                check_timed(fc, cold_bracketed(nb, True, keep=True), q, buf, kv, bt, sl,
                            outputs=lambda r: r[0])
            rec["check"] = check
            if not check["ok"]:
                _log(f"[{args.worker}] {cfg.name}: CHECK FAILED {check}")
                rec["status"] = "FAIL"
            else:
                rec["status"] = "ok"
                rec["ours"] = chain_time(f1, fN, n, a)
                if use_clock:
                    rec["ours_device"] = device_chain_time(ours, n, a)
                if cold:
                    rec["ours_cold_device"] = cold_device_time(fc, cold_bracketed(nb, False),
                                                               (q, buf, kv, bt, sl), args.repeats, flush_bytes)
                if args.first and chunk >= cfg.R:
                    r1 = chain(ref, 1)
                    nr = pick_n(r1, a, min(REF_CHAIN, args.chain))
                    rec["reference"] = chain_time(r1, chain(ref, nr), nr, a)
        except Exception as e:
            rec["status"] = "ERROR"
            rec["error"] = _error_text(e)
            _log(f"[{args.worker}] {cfg.name}: ERROR {rec['error']}")
        _save(args.result_file, res)
        us = rec.get("ours", {}).get("per_call_us")
        _emit("step", f"{cfg.name} {rec['status']}" + (f" {us:.1f} us" if us is not None else ""))
    return 0


def cold_device_time(f_call, f_empty, a, repeats, flush_bytes, warm=2):
    """Cold on the device clock: the median bracket of f_call minus the median bracket of f_empty
    (cold_bracketed with and without the call), over every bracket of `repeats` runs of each."""
    import device_clock as dc

    def spans(g):
        _, t0s, t1s = g(*a)
        return [(dc.clock_ns(b) - dc.clock_ns(e)) * 1e-3 for e, b in zip(np.asarray(t0s), np.asarray(t1s))]

    for _ in range(warm):
        spans(f_call), spans(f_empty)
    call_us, empty_us = [], []
    for _ in range(repeats):
        call_us += spans(f_call)
        empty_us += spans(f_empty)
    return bracket_result(call_us, empty_us, flush_bytes=flush_bytes)


# ----------------------------------------------------------------------------- torch worker
def torch_hash_array(shape, seed, dev, dtype=None):
    """jax_hash_array's values as a torch tensor, bf16 or dtype (int64 arithmetic, in chunks)."""
    import torch

    dtype = dtype or torch.bfloat16
    total = int(np.prod(shape))
    out = torch.empty(total, dtype=dtype, device=dev)
    step = 1 << 26
    for s0 in range(0, total, step):
        i = torch.arange(s0, min(total, s0 + step), dtype=torch.int64, device=dev)
        v = hash_values_int64(i, seed).to(torch.float32) * (2.0 ** -22) - 2.0
        out[s0:s0 + i.numel()] = v.to(dtype)
    return out.view(*shape)


def torch_reference(q, k, v, bt, cfg, tree_mask=None):
    """fp32 verify attention over NHD K / V caches [blocks, 16, Hkv, D] (checks the peers); an
    FP8 cache is dequantized with KV_SCALE. tree_mask (numpy uint32 [R, NQ], full attention):
    draft t sees the context and the drafts of its bits."""
    import torch

    dev = q.device
    outs = []
    for r, L in enumerate(cfg.lens):
        pages = bt[r].long()
        kk = k[pages].reshape(-1, H_KV, D)[:L].float() * (KV_SCALE if cfg.fp8 else 1.0)
        vv = v[pages].reshape(-1, H_KV, D)[:L].float() * (KV_SCALE if cfg.fp8 else 1.0)
        qr = q[r * NQ:(r + 1) * NQ].float().view(NQ, H_KV, H_Q // H_KV, D)
        s = torch.einsum("tkgd,skd->kgts", qr, kk) * SCALE
        qpos = L - NQ + torch.arange(NQ, device=dev)
        kpos = torch.arange(L, device=dev)
        m = kpos[None, :] <= qpos[:, None]
        if tree_mask is not None:
            j = (kpos - (L - NQ)).clamp(0, NQ - 1)
            bits = torch.tensor([int(b) for b in tree_mask[r]], dtype=torch.int64, device=dev)
            m = (kpos[None, :] < L - NQ) | (((bits[:, None] >> j[None, :]) & 1) == 1)
        if cfg.window is not None:
            m &= (qpos[:, None] - kpos[None, :]) < cfg.window
        p = torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1)
        outs.append(torch.einsum("kgts,skd->tkgd", p, vv).reshape(NQ, H_Q, D))
    return torch.cat(outs, 0)


def nhd_caches(kv):
    """Our [blocks, Hkv, 16, 2D] cache -> FlashInfer's NHD (K, V), each [blocks, 16, Hkv, D]."""
    return (kv[..., :D].permute(0, 2, 1, 3).contiguous(), kv[..., D:].permute(0, 2, 1, 3).contiguous())


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

    try:  # floors: the copy rate, an empty kernel
        n = 1 << 30
        src = torch.empty(n // 4, dtype=torch.float32, device=dev).uniform_()
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        torch.cuda.synchronize()
        ts = [timed_us(lambda: dst.copy_(src)) for _ in range(20)]
        res["floors"]["torch_copy"] = dict(bytes=n, us=ts, GBps=2 * n / (_median(ts) * 1e-6) / 1e9,
                                           how="1 GiB dst.copy_(src), read + write counted")
        del src, dst
        torch.cuda.empty_cache()
        x = torch.zeros(1, device=dev)
        g100 = torch.cuda.CUDAGraph()
        x.add_(1)
        torch.cuda.synchronize()
        with torch.cuda.graph(g100):
            for _ in range(100):
                x.add_(1)
        for _ in range(10):
            g100.replay()
        torch.cuda.synchronize()
        res["floors"]["torch_empty_kernel"] = dict(
            per_kernel_in_graph100_us=_median([timed_us(g100.replay, per=100) for _ in range(10)]))
    except Exception as e:
        res["errors"].append(f"torch floors: {e!r}")
    _save(args.result_file, res)

    try:
        import flashinfer as fi

        res["flashinfer"] = dict(version=getattr(fi, "__version__", "?"), file=fi.__file__)
    except Exception as e:
        res["unavailable"] = f"flashinfer not importable: {e!r}"
        _save(args.result_file, res)
        for c in configs:
            _emit("step", f"{c.name} unavailable")
        return 0
    flush = torch.empty((512 << 20) // 4, dtype=torch.float32, device=dev).uniform_()
    ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)

    def cold_in_graph(fn, n, repeats):
        """One cold call inside a CUDA graph, as ours is timed on the device clock: a graph of n
        (flush, event, fn(), event) and one of n (flush, event, event); the median span with
        fn() minus the median span without it, over `repeats` replays."""
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
        return bracket_result(call_us, empty_us, flush_bytes=flush.numel() * 4)

    def hot_in_graph(fn):
        """us per call: CUDA graphs of 20 calls, replayed (warmed up off the default stream)."""
        st = torch.cuda.Stream()
        st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(st)
        torch.cuda.synchronize()
        g_hot = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g_hot):
            for _ in range(20):
                fn()
        for _ in range(3):
            g_hot.replay()
        torch.cuda.synchronize()
        return [timed_us(g_hot.replay, per=20) for _ in range(max(args.repeats, 10))]

    def check_peer(out, want, approx_relerr=None):
        """Our tolerance, element by element; a peer that misses it but whose relative error
        (Frobenius) stays within approx_relerr computes another approximation by design (XQA's
        Hopper FP8 kernel rounds Q and P to FP8): timed, and marked with its error."""
        err = (out.float() - want).abs()
        bad = int((~(err <= ATOL + RTOL * want.abs())).sum())
        rel = float((out.float() - want).norm() / want.norm()) if bool(torch.isfinite(out).all()) else float("nan")
        ok = bad == 0
        approx = not ok and approx_relerr is not None and rel <= approx_relerr
        return dict(ok=ok, approx=approx, timed=ok or approx, n_bad=bad, max_abs_err=float(err.max()),
                    relerr=rel)

    def time_peer(rec, name, fn, out, want, approx_relerr=None):
        """Run fn once (first call outside any graph: module load), check out against want, then
        time it hot and cold; a peer that fails its check is recorded, not timed."""
        sub = rec.setdefault(name, {})
        try:
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            sub["check"] = chk = check_peer(out, want, approx_relerr)
            if not chk["timed"]:
                sub["status"] = "FAIL"
                return
            hot = hot_in_graph(fn)
            sub.update(status="ok", hot_us=_median(hot), hot_samples_us=hot)
            try:  # needs torch's external events (recorded inside a graph)
                sub["cold_in_graph"] = cold_in_graph(fn, COLD_BRACKETS, max(args.repeats, 10))
            except Exception as e:
                sub["cold_in_graph"] = dict(error=_error_text(e)[-500:])
        except Exception as e:
            sub.update(status="ERROR", error=_error_text(e)[-2000:])
            _log(f"[torch] {rec['config']['name']} {name}: ERROR {sub['error']}")

    try:
        from flashinfer.decode import _make_xqa_mtp_causal_mask, xqa_batch_decode_with_kv_cache
    except Exception as e:
        xqa_batch_decode_with_kv_cache = None
        res["xqa_unavailable"] = f"flashinfer's XQA not importable: {e!r}"
    ws_xqa = torch.zeros(256 << 20, dtype=torch.uint8, device=dev)  # first 8 MiB: semaphores, zeroed

    for cfg in configs:
        rec = _start_config(args, res, cfg)
        if rec is None:
            continue
        q = k = v = out = want = None
        # A drafts call is compared with ours; XQA also runs a tree at full attention (its mask
        # is a tree's; it places draft t at ctx + t, so a tree's window by depth is not its).
        tree = cfg.draft_kwargs()["tree_mask"] if cfg.call == "tree" and cfg.window is None else None
        if cfg.call != "chain" and tree is None:
            rec.update(status="ok", fa2=dict(status="n/a"), xqa=dict(status="n/a"))
            _save(args.result_file, res)
            _emit("step", f"{cfg.name} n/a (peers run the chain)")
            continue
        try:
            kv_t = torch.float8_e4m3fn if cfg.fp8 else torch.bfloat16
            kv = torch_hash_array((cfg.blocks, H_KV, PAGE, 2 * D), SEED_KV, dev, kv_t)
            k, v = nhd_caches(kv)
            del kv
            q = torch_hash_array((NQ * cfg.R, H_Q, D), SEED_Q, dev)
            bt = torch.from_numpy(block_table_np(cfg)).to(dev)
            want = torch_reference(q, k, v, bt, cfg, tree)
            R = cfg.R
            i32 = dict(dtype=torch.int32, device=dev)
            out = torch.empty((NQ * R, H_Q, D), dtype=torch.bfloat16, device=dev)

            # FlashInfer fa2: batch prefill over the paged cache, causal, one plan a config.
            qo_indptr = torch.arange(R + 1, **i32) * NQ
            kv_indptr = torch.tensor(np.concatenate([[0], np.cumsum(cfg.request_pages)]), **i32)
            kv_indices = torch.cat([bt[r, :n] for r, n in enumerate(cfg.request_pages)]).contiguous()
            last = torch.tensor([n - (p - 1) * PAGE for n, p in zip(cfg.lens, cfg.request_pages)], **i32)
            bufs = dict(qo_indptr_buf=torch.empty(R + 1, **i32), paged_kv_indptr_buf=torch.empty(R + 1, **i32),
                        paged_kv_indices_buf=torch.empty(kv_indices.numel(), **i32),
                        paged_kv_last_page_len_buf=torch.empty(R, **i32))
            if tree is not None:  # fa2 runs the chain's causal mask only
                rec["fa2"] = dict(status="n/a")
            else:
                try:
                    wr = fi.BatchPrefillWithPagedKVCacheWrapper(ws, kv_layout="NHD", use_cuda_graph=True,
                                                                backend="fa2", **bufs)
                    wr.plan(qo_indptr, kv_indptr, kv_indices, last, H_Q, H_KV, D, PAGE, causal=True,
                            sm_scale=SCALE, window_left=(cfg.window - 1) if cfg.window else -1,
                            q_data_type=torch.bfloat16, kv_data_type=kv_t, uniform_q_len=NQ)
                    fa2_scales = dict(k_scale=KV_SCALE, v_scale=KV_SCALE) if cfg.fp8 else {}
                    time_peer(rec, "fa2", lambda: wr.run(q, (k, v), out=out, **fa2_scales), out, want)
                except Exception as e:
                    rec["fa2"] = dict(status="ERROR", error=_error_text(e)[-2000:])
                    _log(f"[torch] {cfg.name} fa2: ERROR {rec['fa2']['error']}")

            # XQA: the 8 drafts a request are the last 8 of seq_len keys, causal by its mask bits;
            # an FP8 cache takes one scale for K and V (bmm1 = scale * kv_scale, bmm2 = kv_scale).
            if xqa_batch_decode_with_kv_cache is None:
                rec["xqa"] = dict(status="unavailable", error=res["xqa_unavailable"])
            else:
                xqa_args = dict(
                    query=q, kv_cache=(k, v), workspace_buffer=ws_xqa, block_tables=bt,
                    seq_lens=torch.tensor(cfg.lens, **i32).view(torch.uint32), max_seq_len=cfg.L,
                    bmm1_scale=SCALE * (KV_SCALE if cfg.fp8 else 1.0), bmm2_scale=KV_SCALE if cfg.fp8 else 1.0,
                    window_left=(cfg.window - 1) if cfg.window else -1, kv_layout="NHD", q_len_per_req=NQ,
                    mask=(_make_xqa_mtp_causal_mask(R, NQ, dev) if tree is None else  # uint16 pairs
                          torch.from_numpy(tree.view(np.int32)).to(dev).view(R, NQ, 1).view(torch.uint16)),
                    out=out)
                time_peer(rec, "xqa", lambda: xqa_batch_decode_with_kv_cache(**xqa_args), out, want,
                          approx_relerr=XQA_APPROX_RELERR)
            rec["status"] = "ok"
        except Exception as e:
            rec["status"] = "ERROR"
            rec["error"] = _error_text(e)
            _log(f"[torch] {cfg.name}: ERROR {rec['error']}")
        finally:
            q = k = v = out = want = None
            torch.cuda.empty_cache()
        _save(args.result_file, res)
        figs = " ".join(f"{n} {rec[n]['hot_us']:.1f} us" if "hot_us" in rec.get(n, {}) else
                        f"{n} {rec.get(n, {}).get('status', '-')}" for n in ("fa2", "xqa"))
        _emit("step", f"{cfg.name} {rec['status']} {figs}")
    return 0


# ----------------------------------------------------------------------------- parent
class _Progress:
    def __init__(self):
        self.n = self.total = 0

    def step(self, msg):
        self.n += 1
        _log(f"[{self.n}/{self.total}] {msg}")


def _run_worker(mode, args, names, progress, tmpdir, env_extra, deadline=None, first=False):
    path = os.path.join(tmpdir, f"{mode}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--result-file", path,
           "--repeats", str(args.repeats), "--chain", str(args.chain), "--kv-dtypes", args.kv_dtypes,
           "--grid", args.grid]
    if args.num_splits:
        cmd += ["--num-splits", str(args.num_splits)]
    if args.no_device_clock:
        cmd += ["--no-device-clock"]
    if deadline:
        cmd += ["--deadline-at", repr(deadline)]
    if first:
        cmd += ["--first"]
    if names is not None:
        cmd += ["--configs", ",".join(names)]
    else:
        cmd += (["--configs", args.configs] if args.configs else []) + (["--quick"] if args.quick else [])
    plan = None
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=dict(os.environ, **env_extra), text=True)
    for line in p.stdout:
        line = line.rstrip("\n")
        if line.startswith("@@plan "):
            plan = [n for n in line[7:].split(",") if n]
            if names is None:  # the first worker names the configs every worker runs
                progress.total += len(plan) * len(args.mode_list)
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


# What the run measured, whatever --name says: digests of the kernels' sources and the package's
# Python, the git commit where there is one, and the built extension (stale where a kernel source
# is newer than it: an editable install not rebuilt after an edit).
_FFI_SOURCES = (".h", ".cc", ".cmake", ".txt")
REBUILD = "pip install --no-build-isolation -e ."


def source_fingerprint(root=ROOT, extension=None):
    def sources(sub, suffixes):
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
    out = dict(ffi_sha256=digest(ffi_files), python_sha256=digest(sources("jax_muse_attn", (".py",))),
               git_commit=None, git_dirty=None, extension_sha256=None, extension_stale=None)
    if extension and os.path.isfile(extension):
        with open(extension, "rb") as f:
            out["extension_sha256"] = hashlib.sha256(f.read()).hexdigest()[:12]
        if ffi_files:
            out["extension_stale"] = max(map(os.path.getmtime, ffi_files)) > os.path.getmtime(extension)
    if os.path.exists(os.path.join(root, ".git")):
        git = ["git", "-C", root]
        try:
            commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True,
                                    timeout=10, check=True).stdout.strip()
            status = subprocess.run(git + ["status", "--porcelain", "--", "ffi", "jax_muse_attn"],
                                    capture_output=True, text=True, timeout=10, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            pass
        else:
            out["git_commit"], out["git_dirty"] = commit, bool(status.strip())
    return out


def _loaded_extension():
    from jax_muse_attn import _ffi

    return getattr(_ffi._MODULE, "__file__", None)


def _sources_text(src):
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
    if x is None or isinstance(x, str) or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{nd}f}"


def _ratio(a, b):
    return a / b if a and b else None


def build_summary(cfgs, modes, torch_res):
    """Per-config figures of the table and the plot (stored in the JSON too)."""
    torch_res = torch_res or {}
    floors = {f"{k}[{m}]": v for m, r in modes.items() for k, v in r.get("floors", {}).items()}
    floors.update(torch_res.get("floors", {}))
    copy = dict(GBps=torch_res.get("floors", {}).get("torch_copy", {}).get("GBps"), source="torch_copy")
    for m, r in modes.items():
        if copy["GBps"] is None:
            copy = dict(GBps=r.get("floors", {}).get("jax_copy", {}).get("GBps"), source=f"jax_copy[{m}]")
    if copy["GBps"] is None:
        copy["source"] = None
    first = next(iter(modes), None)
    rows = []
    for c in cfgs:
        row = dict(config=c.name, kv_mb=c.kv_bytes / 1e6, kv_bytes=c.kv_bytes, L=c.L, R=c.R, window=c.window)
        status = []
        for m, r in modes.items():
            rc = r.get("configs", {}).get(c.name, {})
            status.append(rc.get("status", "missing"))
            row[f"ours_{m}_us"] = rc.get("ours", {}).get("per_call_us")
            row[f"ours_dev_{m}_us"] = rc.get("ours_device", {}).get("per_call_us")
            row[f"check_{m}"] = rc.get("check")
            if rc.get("launch_plan") is not None:
                row.setdefault("launch_plan", rc["launch_plan"])
            if "ours_cold_device" in rc:
                row["ours_cold_dev_us"] = rc["ours_cold_device"]["per_call_us"]
            if "reference" in rc:
                row["reference_us"] = rc["reference"]["per_call_us"]
        row["num_splits"] = row.get("launch_plan", {}).get("num_splits")
        row["status"] = ("ok" if all(s == "ok" for s in status) else "FAIL" if "FAIL" in status
                         else "ERROR" if "ERROR" in status else "/".join(sorted(set(status))))
        fr = torch_res.get("configs", {}).get(c.name, {})
        fa2 = fr.get("fa2", fr)  # a record from before XQA ran beside fa2 holds fa2's figures itself
        xqa = fr.get("xqa", {})
        row["fi_hot_us"] = fa2.get("hot_us")
        row["fi_cold_us"] = fa2.get("cold_in_graph", {}).get("per_call_us")
        row["fi_check"] = fa2.get("check")
        row["fi_status"] = fa2.get("status")
        row["xqa_hot_us"] = xqa.get("hot_us")
        row["xqa_cold_us"] = xqa.get("cold_in_graph", {}).get("per_call_us")
        row["xqa_check"] = xqa.get("check")
        row["xqa_status"] = xqa.get("status")
        t, td = row.get(f"ours_{first}_us"), row.get(f"ours_dev_{first}_us")
        for key, us in (("", t), ("_dev", td)):
            gbps = c.kv_bytes / (us * 1e-6) / 1e9 if us and us > 0 else None
            row[f"ours{key}_GBps"] = gbps
            row[f"pct_copy{key}"] = 100 * gbps / copy["GBps"] if gbps and copy["GBps"] else None
            row[f"ratio_to_fi_hot{key}"] = _ratio(us, row["fi_hot_us"])
            row[f"ratio_to_xqa_hot{key}"] = _ratio(us, row["xqa_hot_us"])
        row["ratio_to_fi_cold"] = _ratio(row.get("ours_cold_dev_us"), row["fi_cold_us"])
        row["ratio_to_xqa_cold"] = _ratio(row.get("ours_cold_dev_us"), row["xqa_cold_us"])
        rows.append(row)
    # An FP8 config beside the same config with a bf16 cache, a drafts call beside the chain
    # call of its config, where the run has both.
    by_name = {r["config"]: r for r in rows}
    for c, row in zip(cfgs, rows):
        chain = by_name.get(c.with_call("chain").name) if c.call != "chain" else None
        for key, col in (("", f"ours_{first}_us"), ("_dev", f"ours_dev_{first}_us")):
            row[f"ratio_to_chain{key}"] = _ratio(row.get(col), chain.get(col)) if chain else None
        twin = by_name.get(c.with_kv("bf16").name) if c.fp8 else None
        for key, col in (("", f"ours_{first}_us"), ("_dev", f"ours_dev_{first}_us")):
            row[f"ratio_to_bf16{key}"] = _ratio(row.get(col), twin.get(col)) if twin else None
    return rows, floors, copy


def _plan_text(plan):
    """The launch plan in a few characters: the split kernel, +pdl where the merge is a
    programmatic dependent launch."""
    if not plan or "split_kernel" not in plan:
        return "–"
    kernel = "fill_ring" if plan.get("split_fill_ring") else plan["split_kernel"]  # an older record's flag
    return kernel + ("+pdl" if plan.get("merge_pdl") else "")


def format_table(rows, mode_names, copy):
    m0 = mode_names[0]
    fp8 = any(r.get("ratio_to_bf16") or "-fp8" in r["config"] for r in rows)
    drafts = any(r["config"].endswith(tuple("-" + c for c in CALLS)) for r in rows)
    hdr = ["config", "KV MB", "splits", "split kernel", f"ours µs ({' / '.join(mode_names)})",
           "ours dev µs", "GB/s dev", "% copy (host / dev)"] + (["× bf16 (host / dev)"] if fp8 else []) + (
           ["× chain (host / dev)"] if drafts else []) + [
           "FI hot µs", "× FI hot (host / dev)", "XQA hot µs", "× XQA hot (host / dev)",
           "cold µs, ours / FI / XQA", "× FI cold", "ref µs", "check"]
    lines = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    for r in rows:
        def ours(m):
            chk = r.get(f"check_{m}")
            return "FAIL" if chk and not chk.get("ok") else _fmt(r.get(f"ours_{m}_us"))
        cells = [r["config"], _fmt(r["kv_mb"]), _fmt(r.get("num_splits"), 0), _plan_text(r.get("launch_plan")),
                 " / ".join(ours(m) for m in mode_names), _fmt(r.get(f"ours_dev_{m0}_us")),
                 _fmt(r.get("ours_dev_GBps"), 0),
                 f"{_fmt(r.get('pct_copy'), 0)} / {_fmt(r.get('pct_copy_dev'), 0)}"]
        if fp8:
            cells.append(f"{_fmt(r.get('ratio_to_bf16'), 2)} / {_fmt(r.get('ratio_to_bf16_dev'), 2)}")
        if drafts:
            cells.append(f"{_fmt(r.get('ratio_to_chain'), 2)} / {_fmt(r.get('ratio_to_chain_dev'), 2)}")
        cells += [_peer_cell(r, "fi"), f"{_fmt(r.get('ratio_to_fi_hot'), 2)} / {_fmt(r.get('ratio_to_fi_hot_dev'), 2)}",
                  _peer_cell(r, "xqa"), f"{_fmt(r.get('ratio_to_xqa_hot'), 2)} / {_fmt(r.get('ratio_to_xqa_hot_dev'), 2)}",
                  f"{_fmt(r.get('ours_cold_dev_us'))} / {_fmt(r.get('fi_cold_us'))} / {_fmt(r.get('xqa_cold_us'))}",
                  _fmt(r.get("ratio_to_fi_cold"), 2), _fmt(r.get("reference_us")), r["status"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"µs a call; host: wall clock, dev: the device's clock (the same chains), command buffers "
                  f"{m0} unless named; % copy against {_fmt(copy.get('GBps'), 0)} GB/s ({copy.get('source')}); "
                  f"cold: each call after an L2 flush, inside the jit or graph, by device timestamps; "
                  f"FI = FlashInfer fa2; XQA = FlashInfer's XQA (TensorRT-LLM's speculative-decoding "
                  f"kernel); ≈: a peer outside our tolerance by design, timed, with its relative error; "
                  f"× bf16: the FP8 call over the same config's bf16 call; × chain: a drafts-target call "
                  f"(-drafts: ragged counts, -tree: a token tree, -lse: lse returned) over the chain call."]
    return "\n".join(lines)


def _peer_cell(r, peer):
    """A peer's hot figure, or why there is none: FAIL (wrong, not timed), its error text's
    status, or ≈ and its relative error where it computes another approximation by design."""
    chk, status = r.get(f"{peer}_check") or {}, r.get(f"{peer}_status")
    if chk and not chk.get("ok") and not chk.get("approx"):
        return "FAIL" + (f" (err {chk['relerr']:.2g})" if chk.get("relerr") is not None else "")
    if r.get(f"{peer}_hot_us") is None:
        return status if status in ("ERROR", "unavailable") else "–"
    text = _fmt(r[f"{peer}_hot_us"])
    return text + (f" ≈ (err {chk['relerr']:.2g})" if chk.get("approx") else "")


def make_plot(rows, path, mode_names):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except Exception as e:
        return f"plot skipped: matplotlib not importable ({e!r})"
    m0 = mode_names[0]
    # (key, label, cache): a line joins the configs of one cache dtype.
    impls = [(f"ours_{m}_us", f"ours (command buffers {m})", "bf16") for m in mode_names] + [
        (f"ours_dev_{m0}_us", "ours, device clock", "bf16"), ("ours_cold_dev_us", "ours cold", "bf16"),
        ("fi_hot_us", "FlashInfer fa2 hot", "bf16"), ("fi_cold_us", "FlashInfer fa2 cold", "bf16"),
        ("xqa_hot_us", "XQA hot", "bf16"), ("reference_us", "jnp reference", "bf16")]
    if any(r["config"].endswith("-fp8") for r in rows):
        impls += [(f"ours_dev_{m0}_us", "ours FP8, device clock", "fp8"), ("fi_hot_us", "FlashInfer fa2 FP8 hot", "fp8"),
                  ("xqa_hot_us", "XQA FP8 hot", "fp8")]
    rs = sorted({r["R"] for r in rows})
    fig, axes = plt.subplots(2, len(rs), figsize=(4 * len(rs), 7), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    used = set()
    for j, R in enumerate(rs):
        for k, (key, _, kv) in enumerate(impls):
            sub = [r for r in rows if r["R"] == R and r["config"].endswith("-fp8") == (kv == "fp8")
                   and not r["config"].startswith("ragged")  # a ragged batch has no one context
                   and not r["config"].endswith(tuple("-" + c for c in CALLS))]  # drafts calls: the table
            col = colors[k % len(colors)]
            for row_i, conv in ((0, lambda r, t: t), (1, lambda r, t: r["kv_bytes"] / (t * 1e-6) / 1e9)):
                ax = axes[row_i][j]
                full = sorted([r for r in sub if r["window"] is None and r.get(key)], key=lambda r: r["L"])
                swa = [r for r in sub if r["window"] is not None and r.get(key)]
                if full:
                    ax.plot([r["L"] for r in full], [conv(r, r[key]) for r in full],
                            "o--" if kv == "fp8" else "o-", color=col)
                if swa:
                    ax.plot([r["L"] for r in swa], [conv(r, r[key]) for r in swa], "*", color=col, ms=12)
                if full or swa:
                    used.add(k)
        for row_i, yl in ((0, "µs per call"), (1, "GB/s (KV bytes read / time)")):
            ax = axes[row_i][j]
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("context (keys)")
            ax.set_ylabel(yl)
            ax.grid(True, which="both", alpha=0.3)
        axes[0][j].set_title(f"R = {R}")
    handles = [Line2D([], [], color=colors[k % len(colors)], marker="o", label=impls[k][1]) for k in sorted(used)]
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8)
    fig.suptitle("verify attention, 16/2 heads, D 64, 8 tokens a request (lines: full attention; "
                 "★: SWA, window 2048 on the grid)", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# --budget-s parts: the first JAX worker (it also times the reference and cold) 1.3, each other
# JAX worker 1, the torch worker (FlashInfer and the floors: seconds) this much.
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
    source = source_fingerprint(extension=_loaded_extension())  # the sources as the run starts
    if source.get("extension_stale"):
        _log(f"WARNING: the built extension is older than a source under ffi/; this run measures "
             f"the old build (rebuild: {REBUILD})")
    modes, plan, errors = {}, None, []
    # --budget-s: the workers run one after the other; each, when it starts, gets its part of the
    # time left, so what one leaves unused goes to those after it.
    torch_runs = not args.no_flashinfer and importlib.util.find_spec("torch") is not None
    parts = [1.3] + [1.0] * (len(args.mode_list) - 1) + ([TORCH_BUDGET_PART] if torch_runs else [])
    t_end = time.time() + args.budget_s if args.budget_s else None
    with tempfile.TemporaryDirectory() as tmp:
        for i, m in enumerate(args.mode_list):
            env = {"XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + " " + MODES[m]).strip()}
            deadline = worker_deadline(time.time(), t_end, parts[i:]) if t_end else None
            res, p = _run_worker(m, args, plan, progress, tmp, env, deadline, first=i == 0)
            if res.get("fatal"):
                _log(f"bench: {res['fatal']}")
                return 2
            plan = plan if plan is not None else p
            modes[m] = res
            errors += [f"[{m}] {e}" for e in res.get("errors", [])]
        plan = plan or []
        if args.no_flashinfer:
            torch_res = dict(unavailable="skipped (--no-flashinfer)")
        elif not torch_runs:
            torch_res = dict(unavailable="torch not importable")
        elif all(r.get("backend") == "cpu" for r in modes.values()):
            torch_res = dict(unavailable="JAX runs on the CPU: FlashInfer and the GPU floors not run")
        else:
            progress.total += len(plan)
            env = {}
            if not args.flashinfer_jit:  # a module missing from the install fails that peer, fast
                env["FLASHINFER_DISABLE_JIT"] = "1"
            if args.flashinfer_path:  # the torch worker's only
                rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
                env["PYTHONPATH"] = os.pathsep.join([args.flashinfer_path] + rest)
            torch_res, _ = _run_worker("torch", args, plan, progress, tmp, env, t_end)
            errors += [f"[torch] {e}" for e in torch_res.get("errors", [])]

    cfgs = [parse_config(n) for n in plan]
    env = next(iter(modes.values()), {})
    name = args.name or _device_name(env.get("device_kind") if env.get("backend") != "cpu" else "cpu")
    meta = dict(started=started, finished=datetime.datetime.now().isoformat(timespec="seconds"),
                argv=sys.argv, args={k: v for k, v in vars(args).items()}, name=name,
                modes={m: MODES[m] for m in modes}, tolerance=dict(atol=ATOL, rtol=RTOL),
                launch_override=os.environ.get(LAUNCH_ENV, ""), source=source)
    return write_outputs(args.out, name, meta, cfgs, modes, torch_res, errors)


def write_outputs(out_dir, name, meta, cfgs, modes, torch_res, errors):
    """The table, plot and JSON of a run from its workers' raw figures (also --render)."""
    env = next(iter(modes.values()), {})
    rows, floors, copy = build_summary(cfgs, modes, torch_res)
    # Exit 1 on a failed check, an error or a crashed worker; configs skipped for --budget-s only warn.
    ok = bool(cfgs) and all(set(r["status"].split("/")) <= {"ok", "skipped"} for r in rows) and not any(
        r.get("returncode") for r in modes.values())
    skipped = [r["config"] for r in rows if r["status"] != "ok" and "skipped" in r["status"]]
    fl = []
    for k, v in floors.items():
        if isinstance(v, dict):
            fl += [f"{k} {kk}={_fmt(v[kk], 2)}" for kk in ("GBps", "per_call_us", "per_kernel_in_graph100_us")
                   if v.get(kk) is not None]
        else:
            fl.append(f"{k}={_fmt(v, 2)}")
    fi_state = (torch_res or {}).get("unavailable") or \
        f"FlashInfer {(torch_res or {}).get('flashinfer', {}).get('version', '?')}"
    args = meta.get("args", {})
    pinned = [f"{LAUNCH_ENV}={meta['launch_override']}"] if meta.get("launch_override") else []
    pinned += [f"--num-splits {args['num_splits']}"] if args.get("num_splits") else []
    header = (f"device {env.get('device_kind')} ({env.get('backend', env.get('platform'))}), jax {env.get('jax')}, "
              f"{fi_state}, repeats {args.get('repeats')}{_sources_text(meta.get('source'))}"
              + (f"; {', '.join(pinned)}" if pinned else ""))
    text = "\n".join([header, "", format_table(rows, list(modes), copy), "", "floors: " + "; ".join(fl)]
                     + (["", "errors:"] + errors if errors else []))
    print(text)
    out = dict(meta=meta, configs=[c.as_dict() for c in cfgs], summary=rows, floors=floors, copy_floor=copy,
               workers=dict(modes, torch=torch_res), errors=errors, skipped=skipped, all_checks_passed=ok)
    jpath = os.path.join(out_dir, f"{name}.json")
    _save(jpath, out)
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write(text + "\n")
    msg = make_plot(rows, os.path.join(out_dir, f"{name}.png"), list(modes))
    print(msg or f"wrote {jpath}, {name}.md, {name}.png")
    if skipped:
        print(f"{len(skipped)} config(s) not measured in every mode (--budget-s ran out): {', '.join(skipped)}")
    print("ALL CHECKS PASSED" if ok else "SOME CHECKS FAILED (or a config errored, or a worker crashed): exit 1")
    return 0 if ok else 1


def render(path, out_dir=None):
    """Re-renders a saved run (NAME.json, its workers' raw figures) into NAME.{json,md,png} with
    this file's summary, table and plot; measures nothing. NAME is the file's own stem, so a
    renamed copy never writes over the run it was copied from."""
    with open(path) as f:
        saved = json.load(f)
    name = os.path.splitext(os.path.basename(path))[0]
    meta = dict(saved["meta"], name=name, rendered=datetime.datetime.now().isoformat(timespec="seconds"))
    workers = saved["workers"]
    modes = {m: workers[m] for m in saved["meta"]["modes"] if m in workers}
    cfgs = [parse_config(c["name"]) for c in saved["configs"]]
    return write_outputs(out_dir or os.path.dirname(os.path.abspath(path)), name, meta, cfgs, modes,
                         workers.get("torch"), saved.get("errors", []))


DEFAULT_OUT = os.path.join(HERE, "results")


def build_parser():
    ap = argparse.ArgumentParser(prog="python benchmarks/bench.py", description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="", help="comma-separated config names or fnmatch patterns "
                    "(e.g. 'full128k-*,swa32k-r1'); default: the whole grid")
    ap.add_argument("--quick", action="store_true", help="a small grid (GPU: 5 configs; CPU: 2 tiny ones)")
    ap.add_argument("--grid", default="default", choices=GRIDS,
                    help="default: SWA 32k and full 2k-128k at R 1-16; serving: R 32-256 and ragged batches")
    ap.add_argument("--kv-dtypes", default="bf16", help="the caches each config runs with, in order: "
                    "bf16, fp8 (float8_e4m3fn, per-tensor scales) or bf16,fp8")
    ap.add_argument("--num-splits", type=int, default=None, metavar="N",
                    help="pin the split count of every call (default: the launch plan's)")
    ap.add_argument("--modes", default="on,off", help="XLA command-buffer modes to run, in order: on,off")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="wall-clock budget: workers skip the configs left when their share runs out")
    ap.add_argument("--out", default=None, help=f"output folder (default {os.path.relpath(DEFAULT_OUT)}; "
                    "with --render, the saved run's folder)")
    ap.add_argument("--name", default=None, help="file stem (default from the device kind, e.g. h200)")
    ap.add_argument("--repeats", type=int, default=20, help="timed repeats a measurement (median)")
    ap.add_argument("--chain", type=int, default=40, help="most calls N in a timed chain")
    ap.add_argument("--no-flashinfer", action="store_true", help="skip the torch / FlashInfer worker")
    ap.add_argument("--no-device-clock", action="store_true",
                    help="skip the device-clock timings (the dev and cold columns)")
    ap.add_argument("--flashinfer-path", default=None, metavar="DIR",
                    help="a folder put first on the FlashInfer worker's PYTHONPATH (only there)")
    ap.add_argument("--flashinfer-jit", action="store_true",
                    help="let FlashInfer compile a module it lacks (minutes a module); by default that peer fails")
    ap.add_argument("--render", default=None, metavar="JSON",
                    help="measure nothing: redraw a saved run's table, plot and summary")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--deadline-at", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result-file", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--first", action="store_true", help=argparse.SUPPRESS)
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.render:
        return render(args.render, args.out)
    if args.num_splits is not None and args.num_splits < 1:
        ap.error("--num-splits must be >= 1")
    if args.repeats < 1 or args.chain < 2:
        ap.error("--repeats must be >= 1 and --chain >= 2")
    args.kv_dtype_list = tuple(k.strip() for k in args.kv_dtypes.split(",") if k.strip())
    bad = [k for k in args.kv_dtype_list if k not in KV_DTYPES]
    if bad or not args.kv_dtype_list:
        ap.error(f"--kv-dtypes: unknown {bad}; choose from {list(KV_DTYPES)}")
    if args.worker == "torch":
        return torch_worker(args)
    if args.worker:
        return jax_worker(args)
    args.out = args.out or DEFAULT_OUT
    args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.mode_list if m not in MODES]
    if bad or not args.mode_list:
        ap.error(f"--modes: unknown {bad}; choose from {list(MODES)}")
    for pat in (p.strip() for p in args.configs.split(",")):
        if pat and not any(ch in pat for ch in "*?[") and not re.fullmatch(CONFIG_RE, pat):
            ap.error(f"--configs: bad config name {pat!r} (e.g. full32k-r4, swa32k-r1, full8k-r4-fp8, "
                     f"ragged1k-128k-r64, 'full128k-*')")
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
