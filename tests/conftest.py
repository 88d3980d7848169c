"""Shared builders and checks of the jax_muse_attn test suite.

make_case() builds one verify-attention problem the way vLLM hands it over: a paged cache with
shuffled block ids, block-table entries outside each request's live range holding stale garbage
(out of range, negative, huge, or ids of poisoned blocks), and, with poison=True, NaN / +-Inf in
every cache slot that the spec (README.md, Semantics) says must never be read. Padding requests (>= num_reqs) get
garbage seq_lens and block-table rows that point at poisoned blocks.

With kv_dtype an FP8 format the cache holds FP8 bytes with K / V scales per tensor or per token
(scale_kind): unread slots hold FP8 NaN bit patterns or decoys, unread per-token scales NaN / Inf
/ decoys.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import zlib

import ml_dtypes
import numpy as np
import pytest

# Several pytest workers (-n) share one GPU: without this each preallocates 75 % of its memory
# when JAX starts and most GPU tests fail on out-of-memory (set before jax is imported; an
# explicit setting in the environment wins).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import oracle  # noqa: E402

import jax_muse_attn  # noqa: E402

PAGE = 16
BACKENDS = ("reference", "ffi")
FP8_DTYPES = ("float8_e4m3fn", "float8_e4m3fnuz")
SCALE_KINDS = ("tensor", "token")
# The FP8 test caches' dequantized values: normal with this standard deviation. The float64
# oracle does not round K and V to bf16 as every backend does (2^-9 relative each); at standard
# deviation 1 that alone takes up to the whole tolerance of assert_close (seen: 0.95 of it at one
# element), at 0.7 up to about half, leaving the kernels' own rounding the room it has with bf16.
FP8_SIGMA = 0.7
# Every NaN byte of each format (e4m3fn: S.1111.111; e4m3fnuz: the would-be -0).
FP8_NAN_BYTES = {"float8_e4m3fn": (0x7F, 0xFF), "float8_e4m3fnuz": (0x80,)}
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_host_harness(tmp_path_factory, name: str, source: str) -> str:
    """Compiles a small C++ program with the host compiler, with benchmarks/ and ffi/ on its
    include path (the headers kernel_bench shares with the tests); skips without a compiler."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    d = tmp_path_factory.mktemp(name)
    src, exe = d / "main.cc", d / name
    src.write_text(source)
    r = subprocess.run([cxx, "-O2", "-std=c++17", "-I", os.path.join(REPO_ROOT, "benchmarks"),
                        "-I", os.path.join(REPO_ROOT, "ffi"), "-o", str(exe), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return str(exe)


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Every backend that exists here: the jnp reference and this platform's FFI handler."""
    return request.param


@pytest.fixture
def rng(request):
    """A numpy Generator seeded from the test's id (reproducible, distinct per test)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@dataclasses.dataclass
class Case:
    q: jax.Array
    kv: jax.Array
    bt: jax.Array
    sl: jax.Array
    q_np: np.ndarray
    kv_np: np.ndarray
    bt_np: np.ndarray
    sl_np: np.ndarray
    R: int
    NQ: int
    P: int
    window: int | None
    scale: float
    num_reqs: int
    readable: np.ndarray  # [num_blocks, 16] slots that may be read
    # FP8: the scales (float32, shape () or [num_blocks, Hkv, 16]); None with a bf16 cache
    k_scale: jax.Array | None = None
    v_scale: jax.Array | None = None
    k_scale_np: np.ndarray | None = None
    v_scale_np: np.ndarray | None = None

    def scales(self) -> dict:
        """verify_attention's k_scale / v_scale arguments ({} with a bf16 cache)."""
        if self.k_scale is None:
            return {}
        return {"k_scale": self.k_scale, "v_scale": self.v_scale}

    def run(self, backend, num_reqs="default", **kw):
        nr = self.num_reqs if num_reqs == "default" else num_reqs
        return jax_muse_attn.verify_attention(
            self.q, self.kv, self.bt, self.sl, scale=self.scale, window=self.window, num_reqs=nr,
            backend=backend, tokens_per_request=self.NQ, **self.scales(), **kw)

    def oracle(self, num_reqs="default", requests=None):
        nr = self.num_reqs if num_reqs == "default" else num_reqs
        return oracle.verify_attention(
            self.q_np, self.kv_np, self.bt_np, self.sl_np, scale=self.scale, window=self.window,
            num_reqs=nr, tokens_per_request=self.NQ, requests=requests, k_scale=self.k_scale_np,
            v_scale=self.v_scale_np)


def live_range(seq_len, P, NQ, window):
    """(key_lo, seq_len clamped): the keys of a request that may be read."""
    s = min(max(int(seq_len), 0), PAGE * P)
    lo = 0 if window is None else max(0, s - NQ - window + 1)
    return lo, s


def make_case(rng, R, seq_lens, *, P, Hq=16, Hkv=2, D=64, NQ=8, window=None, poison=True,
              num_reqs=None, num_blocks=None, extra_rows=0, bad_live=0.0, q2d=False, scale=None,
              stale=None, kv_dtype="bfloat16", scale_kind="tensor"):
    """One problem. seq_lens: R raw values of the real requests (entries of padding requests,
    r >= num_reqs, are replaced by garbage). bad_live: fraction of live block-table entries
    replaced by out-of-range ids (those keys are absent). stale: a fixed garbage id for every
    stale entry (default: a random mix). kv_dtype: "bfloat16" or one of FP8_DTYPES, with
    scale_kind "tensor" or "token" (make_fp8_cache)."""
    seq_lens = [int(s) for s in seq_lens]
    assert len(seq_lens) == R
    nr = R if num_reqs is None else int(num_reqs)
    nb = num_blocks if num_blocks is not None else R * P + 6
    rows = R + extra_rows

    # Live pages of the real requests.
    live = []  # (r, page, key_lo, seq_len)
    for r in range(nr):
        lo, s = live_range(seq_lens[r], P, NQ, window)
        if s > lo:
            for page in range(lo // PAGE, -(-s // PAGE)):
                live.append((r, page, lo, s))
    assert len(live) <= nb - 2, "num_blocks too small for the live pages"
    perm = rng.permutation(nb)
    live_ids = perm[: len(live)]
    spare = perm[len(live):]  # never referenced by a live entry: fully poisoned

    bt = np.empty((rows, P), np.int64)
    readable = np.zeros((nb, PAGE), bool)

    def garbage(n):
        pool = np.array([-1, INT32_MIN, INT32_MAX, nb, nb + 1, nb + 1000, -PAGE, INT32_MIN + 1],
                        np.int64)
        pick = rng.integers(0, 3, size=n)
        vals = np.where(pick == 0, rng.choice(pool, size=n),
                        np.where(pick == 1, rng.integers(nb, INT32_MAX, size=n, endpoint=True),
                                 rng.choice(spare, size=n)))
        if stale is not None:
            vals[:] = stale
        return vals

    bt[:] = garbage(rows * P).reshape(rows, P)
    for (r, page, lo, s), bid in zip(live, live_ids):
        if bad_live and rng.random() < bad_live:
            bt[r, page] = rng.choice(np.array([-1, nb, nb + 7, INT32_MAX, INT32_MIN], np.int64))
            continue
        bt[r, page] = bid
        keys = page * PAGE + np.arange(PAGE)
        readable[bid] = (keys >= lo) & (keys < s)

    sl = np.array(seq_lens + [0] * extra_rows, np.int64)
    for r in range(nr, rows):  # padding requests and extra rows: garbage
        sl[r] = rng.choice(np.array([PAGE * P, PAGE * P - 3, PAGE * P + 100, INT32_MAX, -5,
                                     rng.integers(1, PAGE * P + 1)], np.int64))
        # Mostly clean live blocks of real requests (finite: a read shows as non-zero rows,
        # where NaN could be masked into a zero row), some poisoned ones.
        clean = np.flatnonzero(readable.all(axis=1))
        pool = clean if len(clean) and (r - nr) % 3 != 2 else spare
        bt[r] = rng.choice(pool, size=P)
    bt = bt.astype(np.int32)
    sl = sl.astype(np.int32)

    kv = rng.standard_normal((nb, Hkv, PAGE, 2 * D), dtype=np.float32)
    scales = {}
    if kv_dtype == "bfloat16":
        if poison:
            kv = poison_slots(rng, kv, ~readable)
        kv_j = jnp.asarray(kv, jnp.bfloat16)
        kv_np = np.asarray(kv_j)
    else:
        kv_np, k_scale, v_scale = make_fp8_cache(rng, kv, kv_dtype, scale_kind)
        if poison:
            kv_np = poison_fp8_slots(rng, kv_np, ~readable)
            if scale_kind == "token":
                k_scale, v_scale = (poison_scales(rng, s, ~readable) for s in (k_scale, v_scale))
        kv_j = jnp.asarray(kv_np)
        scales = dict(k_scale=jnp.asarray(k_scale), v_scale=jnp.asarray(v_scale),
                      k_scale_np=k_scale, v_scale_np=v_scale)
    q = rng.standard_normal((NQ * R, Hq, D), dtype=np.float32)
    if q2d:
        q = q.reshape(NQ * R, Hq * D)
    q_j = jnp.asarray(q, jnp.bfloat16)
    return Case(q=q_j, kv=kv_j, bt=jnp.asarray(bt), sl=jnp.asarray(sl), q_np=np.asarray(q_j),
                kv_np=kv_np, bt_np=bt, sl_np=sl, R=R, NQ=NQ, P=P, window=window,
                scale=float(scale if scale is not None else 1.0 / np.sqrt(D)), num_reqs=nr,
                readable=readable, **scales)


def make_fp8_cache(rng, kv, kv_dtype, scale_kind, sigma=FP8_SIGMA):
    """An FP8 cache of the values sigma * kv (kv [nb, Hkv, 16, 2D] standard normal), quantized as
    an engine quantizes: K and V scales log-uniform in [3.5 sigma / max, 0.1] (one pair per
    tensor, or per (block, KV head, slot)), bytes = fp8(clip(x / scale, +-max)) to nearest even.
    The bytes span the format from its subnormals up to its max (reached at 3.5 sigma with the
    smallest scales: 448 for e4m3fn, 240 for e4m3fnuz). Returns (the bytes as an ml_dtypes array,
    k_scale, v_scale: float32 of shape () or [nb, Hkv, 16])."""
    dtype = np.dtype(getattr(ml_dtypes, kv_dtype))
    fmax = float(ml_dtypes.finfo(dtype).max)
    nb, hkv, page, two_d = kv.shape
    d = two_d // 2
    shape = () if scale_kind == "tensor" else (nb, hkv, page)
    lo, hi = np.log(3.5 * sigma / fmax), np.log(0.1)
    k_scale, v_scale = (np.exp(rng.uniform(lo, hi, size=shape)).astype(np.float32)
                        for _ in range(2))
    out = np.empty(kv.shape, dtype)
    for part, s in ((slice(0, d), k_scale), (slice(d, None), v_scale)):
        x = sigma * kv[..., part] / (s if scale_kind == "tensor" else s[..., None])
        out[..., part] = np.clip(x, -fmax, fmax).astype(dtype)
    return out, k_scale, v_scale


def poison_fp8_slots(rng, kv8, bad_slots):
    """The FP8 form of poison_slots: every (block, head, slot) of bad_slots [nb, 16] holds, by one
    kind each, only NaN bytes (the format's NaN patterns), NaN keys with decoy values, or decoys
    (keys of +-max, which win any softmax they enter; values of +-max)."""
    kv8 = kv8.copy()
    nb, hkv, page, two_d = kv8.shape
    d = two_d // 2
    raw = kv8.view(np.uint8)
    idx = np.argwhere(np.broadcast_to(bad_slots[:, None, :], (nb, hkv, page)))
    if not len(idx):
        return kv8
    dtype = kv8.dtype
    nans = np.array(FP8_NAN_BYTES[dtype.name], np.uint8)
    fmax = ml_dtypes.finfo(dtype).max
    decoy = np.array([fmax, -fmax], dtype).view(np.uint8)
    kind = rng.integers(0, 3, size=len(idx))
    junk = rng.choice(nans, size=(len(idx), two_d))
    dec = rng.choice(decoy, size=(len(idx), two_d))
    junk[kind == 1, d:] = dec[kind == 1, d:]
    junk[kind == 2] = dec[kind == 2]
    raw[idx[:, 0], idx[:, 1], idx[:, 2]] = junk
    return kv8


def poison_scales(rng, scale, bad_slots):
    """Per-token scales [nb, Hkv, 16] with NaN, +-Inf or a decoy (1e30: a read key overflows its
    scores) at every (block, head, slot) of bad_slots [nb, 16]."""
    scale = scale.copy()
    nb, hkv, page = scale.shape
    bad = np.broadcast_to(bad_slots[:, None, :], (nb, hkv, page))
    junk = rng.choice(np.array([np.nan, np.inf, -np.inf, 1e30], np.float32), size=scale.shape)
    return np.where(bad, junk, scale).astype(np.float32)


def poison_slots(rng, kv, bad_slots):
    """kv [nb, Hkv, 16, 2D] float32 with every (block, slot) of bad_slots [nb, 16] replaced, per
    (block, head, slot), by one kind of garbage: all NaN, +-Inf keys, or a finite decoy (keys of
    +-12 that win any softmax they enter, values of +-100). A decoy read shows as a wrong value
    even where NaN would be masked into a zero row."""
    kv = kv.copy()
    nb, hkv, page, two_d = kv.shape
    d = two_d // 2
    idx = np.argwhere(np.broadcast_to(bad_slots[:, None, :], (nb, hkv, page)))
    if not len(idx):
        return kv
    kind = rng.integers(0, 4, size=len(idx))
    sign = rng.choice(np.array([-1.0, 1.0], np.float32), size=(len(idx), two_d))
    junk = np.empty((len(idx), two_d), np.float32)
    junk[kind == 0] = np.nan
    junk[kind == 1, :d] = np.inf * sign[kind == 1, :d]
    junk[kind == 1, d:] = 100.0 * sign[kind == 1, d:]
    junk[kind == 2, :d] = 12.0 * sign[kind == 2, :d]
    junk[kind == 2, d:] = 100.0 * sign[kind == 2, d:]
    junk[kind == 3, :] = np.where(rng.random((int((kind == 3).sum()), two_d)) < 0.5, np.inf, -np.inf)
    kv[idx[:, 0], idx[:, 1], idx[:, 2]] = junk
    return kv


def assert_close(out, ref, *, q_shape=None, what=""):
    """The spec's acceptance: bf16, q's shape, no NaN, |out - ref| <= 1e-2 + 2e-2 |ref|, and rows
    with no key (the oracle's all-zero rows) exactly zero."""
    if q_shape is not None:
        assert tuple(out.shape) == tuple(q_shape), f"{what}: shape {out.shape} != {q_shape}"
        assert out.dtype == jnp.bfloat16, f"{what}: dtype {out.dtype}"
    o = np.asarray(out).astype(np.float64)
    ref = np.asarray(ref, np.float64)
    assert o.shape == ref.shape
    assert np.isfinite(ref).all(), f"{what}: oracle not finite (test bug)"
    assert not np.isnan(o).any(), f"{what}: NaN in output at {np.argwhere(np.isnan(o))[:5].tolist()}"
    err = np.abs(o - ref)
    tol = 1e-2 + 2e-2 * np.abs(ref)
    bad = err > tol
    if bad.any():
        idx = np.argwhere(bad)
        i = tuple(idx[0])
        raise AssertionError(
            f"{what}: {bad.sum()} / {bad.size} elements out of tolerance; first at {i}: "
            f"out={o[i]!r} ref={ref[i]!r}; max err {err.max():.4g}; rows (first dim) "
            f"{sorted(set(idx[:, 0].tolist()))[:20]}")
    flat_o = o.reshape(o.shape[0], -1)
    flat_r = ref.reshape(ref.shape[0], -1)
    empty = np.all(flat_r == 0, axis=1)
    nz = empty & np.any(flat_o != 0, axis=1)
    assert not nz.any(), f"{what}: rows with no key not exactly zero: {np.flatnonzero(nz)[:20].tolist()}"


def check_case(case, backend, what="", **kw):
    """Runs one backend on case and checks it against the oracle; returns the output."""
    out = case.run(backend, **kw)
    nr = kw.get("num_reqs", "default")
    assert_close(out, case.oracle(num_reqs=nr), q_shape=case.q.shape, what=f"{backend} {what}")
    return out


def bits(x):
    return np.asarray(x).view(np.uint16)
