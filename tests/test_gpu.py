"""Long contexts on the GPU's FFI handler against the float64 oracle (32k, 128k, 256k keys,
R = 16, full attention and SWA 2048, every unreadable slot poisoned), plus determinism.

The cache is generated on the device; the oracle runs on a sample of requests (all of them
where the key range is short). MUSE_ATTN_GPU_TEST_BACKEND=reference runs the same checks on the
jnp reference (to check the harness itself before a kernel exists).
"""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_muse_attn
import oracle
from conftest import (FP8_NAN_BYTES, FP8_SIGMA, INT32_MAX, INT32_MIN, PAGE, assert_close, bits,
                      live_range, make_case)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(jax.default_backend() != "gpu",
                       reason=f"no GPU: JAX sees only {jax.default_backend()}"),
]

BACKEND = os.environ.get("MUSE_ATTN_GPU_TEST_BACKEND", "ffi")
HQ, HKV, D, NQ, R = 16, 2, 64, 8, 16
SCALE = 1.0 / 8.0


def _lens(L):
    return [L, L + 1000, L - 1, L - 7, L - 8, L - 9, L - 17, L - 63, L - 64, L - 65, L // 2 + 3,
            2056, 2055, 100, 5, -3]


def build(seed, L, window, num_reqs=R, kv_dtype="bfloat16", scale_kind="tensor"):
    """A problem with capacity L keys a request, generated on the device."""
    rng = np.random.default_rng(seed)
    P = -(-L // PAGE)
    lens = _lens(L)
    live = []
    for r in range(num_reqs):
        lo, s = live_range(lens[r], P, NQ, window)
        if s > lo:
            live.append((r, np.arange(lo // PAGE, -(-s // PAGE)), lo, s))
    n_live = sum(len(p) for _, p, _, _ in live)
    nb = n_live + 64
    perm = rng.permutation(nb).astype(np.int64)
    spare = perm[n_live:]
    # Stale entries: random int32 (almost always out of range, either sign) or poisoned blocks.
    bt = rng.integers(INT32_MIN, INT32_MAX, size=(R, P), endpoint=True)
    bt = np.where(rng.random((R, P)) < 0.3, rng.choice(spare, size=(R, P)), bt)
    bt[:, -1] = np.where(rng.random(R) < 0.5, nb, -1)
    readable = np.zeros((nb, PAGE), bool)
    off = 0
    for r, pages, lo, s in live:
        ids = perm[off: off + len(pages)]
        off += len(pages)
        bt[r, pages] = ids
        keys = pages[:, None] * PAGE + np.arange(PAGE)[None, :]
        readable[ids] = (keys >= lo) & (keys < s)
    sl = np.array(lens, np.int64)
    clean = np.flatnonzero(readable.all(axis=1))
    for r in range(num_reqs, R):  # padding: garbage lengths, tables of clean live blocks
        sl[r] = INT32_MAX if r % 2 else L
        bt[r] = rng.choice(clean, size=P)
    bt = bt.astype(np.int32)
    sl = sl.astype(np.int32)

    k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(seed), 4)

    @jax.jit
    def make_kv(readable):
        kv = jax.random.normal(k1, (nb, HKV, PAGE, 2 * D), jnp.float32)
        kind = jax.random.randint(k2, (nb, HKV, PAGE, 1), 0, 4)
        sign = jnp.where(jax.random.bernoulli(k3, 0.5, (nb, HKV, PAGE, 2 * D)), 1.0, -1.0)
        is_k = jnp.arange(2 * D) < D
        junk = jnp.where(kind == 0, jnp.nan,
                         jnp.where(kind == 1, jnp.where(is_k, jnp.inf, 100.0) * sign,
                                   jnp.where(kind == 2, jnp.where(is_k, 12.0, 100.0) * sign, jnp.inf * sign)))
        return jnp.where(readable[:, None, :, None], kv, junk).astype(jnp.bfloat16)

    q = jax.random.normal(k4, (NQ * R, HQ, D), jnp.float32).astype(jnp.bfloat16)
    c = dict(q=q, bt=jnp.asarray(bt), sl=jnp.asarray(sl), bt_np=bt, sl_np=sl, lens=lens,
             window=window, num_reqs=num_reqs, P=P)
    if kv_dtype == "bfloat16":
        return dict(c, kv=make_kv(jnp.asarray(readable)))
    return dict(c, **make_fp8_kv(jax.random.PRNGKey(seed + 1), jnp.asarray(readable), kv_dtype,
                                 scale_kind))


def make_fp8_kv(key, readable, kv_dtype, scale_kind):
    """On the device, an FP8 cache as tests/conftest.py's make_fp8_cache builds one (values of
    standard deviation FP8_SIGMA, scales log-uniform in [3.5 sigma / max, 0.1], bytes clipped to
    the format's max), with FP8 NaN bytes or +-max decoys in unread slots and NaN / Inf / 1e30 in
    unread per-token scales."""
    nb = readable.shape[0]
    dtype = jnp.dtype(kv_dtype)
    fmax = float(jnp.finfo(dtype).max)
    lo, hi = np.log(3.5 * FP8_SIGMA / fmax), np.log(0.1)
    k = jax.random.split(key, 6)
    shape = () if scale_kind == "tensor" else (nb, HKV, PAGE)
    ks, vs = (jnp.exp(jax.random.uniform(k[i], shape, jnp.float32, lo, hi)) for i in (0, 1))
    max_byte = jnp.uint8(np.array(fmax, dtype).view(np.uint8))  # 0x7E (e4m3fn), 0x7F (fnuz)

    @jax.jit
    def make(readable, ks, vs):
        x = FP8_SIGMA * jax.random.normal(k[2], (nb, HKV, PAGE, 2 * D), jnp.float32)
        sk, sv = (s if scale_kind == "tensor" else s[..., None] for s in (ks, vs))
        x = jnp.concatenate([x[..., :D] / sk, x[..., D:] / sv], axis=-1)
        raw = jax.lax.bitcast_convert_type(jnp.clip(x, -fmax, fmax).astype(dtype), jnp.uint8)
        nan = jnp.asarray(FP8_NAN_BYTES[kv_dtype], jnp.uint8)
        junk = jnp.where(jax.random.bernoulli(k[3], 0.5, raw.shape),
                         nan[jax.random.randint(k[4], raw.shape, 0, len(nan))],
                         (raw & jnp.uint8(0x80)) | max_byte)  # +-max, the byte's own sign
        kv = jax.lax.bitcast_convert_type(jnp.where(readable[:, None, :, None], raw, junk), dtype)
        if scale_kind == "token":
            bad = jnp.asarray([jnp.nan, jnp.inf, -jnp.inf, 1e30], jnp.float32)
            pick = jax.random.randint(k[5], (2,) + shape, 0, 4)
            ks = jnp.where(readable[:, None, :], ks, bad[pick[0]])
            vs = jnp.where(readable[:, None, :], vs, bad[pick[1]])
        return kv, ks, vs

    kv, ks, vs = make(readable, ks, vs)
    return dict(kv=kv, k_scale=ks, v_scale=vs)


def run(c, **kw):
    scales = {k: c[k] for k in ("k_scale", "v_scale") if k in c}
    return jax_muse_attn.verify_attention(c["q"], c["kv"], c["bt"], c["sl"], scale=SCALE,
                                          window=c["window"], num_reqs=c["num_reqs"],
                                          backend=BACKEND, **scales, **kw)


def check(c, out, sample):
    """The oracle on the sampled requests (float64, only their slots are converted)."""
    kv_np = np.asarray(c["kv"])
    q_np = np.asarray(c["q"])
    scales = {k: np.asarray(c[k]) for k in ("k_scale", "v_scale") if k in c}
    ref = oracle.verify_attention(q_np, kv_np, c["bt_np"], c["sl_np"], scale=SCALE, window=c["window"],
                                  num_reqs=c["num_reqs"], tokens_per_request=NQ, requests=sample,
                                  **scales)
    o = np.asarray(out)
    assert o.shape == q_np.shape and o.dtype == jnp.bfloat16
    assert not np.isnan(o.astype(np.float32)).any(), "NaN in output"
    rows = np.concatenate([np.arange(NQ * r, NQ * (r + 1)) for r in sample])
    assert_close(o[rows], ref[rows], what=f"requests {sample}")
    pad = o[NQ * c["num_reqs"]:].astype(np.float32)
    assert not pad.any(), "padding rows not zero"


def _sample(L, window, num_reqs):
    if window is not None:
        return list(range(R))  # every key range is <= window + 7 keys: cheap
    short = [r for r, s in enumerate(_lens(L)) if min(max(s, 0), L) <= 4096]
    return sorted(set([0, 4, 9] + short + list(range(num_reqs, R))))


@pytest.mark.parametrize("window", [None, 2048], ids=["full", "swa2048"])
@pytest.mark.parametrize("L", [32 * 1024, 128 * 1024, 256 * 1024], ids=["32k", "128k", "256k"])
def test_long_context(L, window):
    c = build(L + (window or 0), L, window, num_reqs=R if L != 128 * 1024 else 13)
    out = run(c)
    check(c, out, _sample(L, window, c["num_reqs"]))
    np.testing.assert_array_equal(bits(run(c)), bits(out))  # bitwise determinism


FP8 = [("float8_e4m3fn", "tensor"), ("float8_e4m3fnuz", "token")]
FP8_IDS = ["e4m3fn-tensor", "e4m3fnuz-token"]


@pytest.mark.parametrize("fmt", FP8, ids=FP8_IDS)
@pytest.mark.parametrize("window", [None, 2048], ids=["full", "swa2048"])
@pytest.mark.parametrize("L", [32 * 1024, 128 * 1024], ids=["32k", "128k"])
def test_long_context_fp8(L, window, fmt):
    """An FP8 cache (NaN bytes and NaN / Inf scales wherever nothing is read) at long context."""
    c = build(L + (window or 0) + 7, L, window, num_reqs=R if L != 128 * 1024 else 13,
              kv_dtype=fmt[0], scale_kind=fmt[1])
    out = run(c)
    check(c, out, _sample(L, window, c["num_reqs"]))
    np.testing.assert_array_equal(bits(run(c)), bits(out))


@pytest.mark.parametrize("fmt", FP8, ids=FP8_IDS)
@pytest.mark.parametrize("num_splits", [1, 64])
def test_split_counts_32k_fp8(num_splits, fmt):
    c = build(13 + num_splits, 32 * 1024, None, kv_dtype=fmt[0], scale_kind=fmt[1])
    out = run(c, **({"num_splits": num_splits} if BACKEND == "ffi" else {}))
    check(c, out, [0, 4, 10, 11, 12, 15])


@pytest.mark.parametrize("num_splits", [1, 3, 64, 100_000])
def test_split_counts_32k(num_splits):
    c = build(11 + num_splits, 32 * 1024, None)
    out = run(c, **({"num_splits": num_splits} if BACKEND == "ffi" else {}))
    check(c, out, [0, 4, 10, 11, 12, 15])


# More than 128 segments a group (700 splits of 2064 tiles: 688 segments of 3 tiles): the merge's
# 8 warps a row loop over several batches of 16 segments each.
def test_split_counts_128k_many_segments():
    L = 128 * 1024
    c = build(29, L, None, num_reqs=13)
    out = run(c, **({"num_splits": 700} if BACKEND == "ffi" else {}))
    check(c, out, _sample(L, None, c["num_reqs"]))


def test_traced_num_reqs_long():
    c = build(5, 32 * 1024, 2048, num_reqs=R)
    f = jax.jit(lambda q, kv, bt, sl, n: jax_muse_attn.verify_attention(
        q, kv, bt, sl, scale=SCALE, window=2048, num_reqs=n, backend=BACKEND))
    for n in [16, 3, 0]:
        out = f(c["q"], c["kv"], c["bt"], c["sl"], jnp.int32(n))
        check(dict(c, num_reqs=n), out, list(range(R)))
    assert f._cache_size() == 1


# Serving scale: more groups than a wave of split CTAs (3 an SM) and 16-128 tiles a group, where
# the plan on an sm_90 GPU takes one segment a group by the ping-pong kernel (launch_plan.h rule
# 8), whose split kernel then writes the output itself with no merge (kernels.h
# split_writes_output). Ragged lengths (empty, shorter than the tokens, one page) beside full
# ones, absent pages, padding requests; a window whose keys start mid-page.
@pytest.mark.parametrize("window", [None, 1000], ids=["full", "swa1000"])
def test_serving_scale_one_split(window):
    rng = np.random.default_rng(41)
    P = 69
    n = 3 * jax.devices()[0].core_count // HKV + 8  # groups past one wave
    lens = rng.integers(1, P * PAGE + 1, size=n)
    lens[:6] = [0, 3, 8, 16, P * PAGE, P * PAGE - 1]
    c = make_case(rng, n, lens, P=P, window=window, bad_live=0.02, num_reqs=n - 7)
    if BACKEND == "ffi" and str(getattr(jax.devices()[0], "compute_capability", "")).startswith("9"):
        plan = jax_muse_attn.launch_plan(c.q, c.kv, c.bt, window=window, tokens_per_request=c.NQ)
        assert plan["num_splits"] == 1 and plan["split_kernel"] == "pingpong", plan
    out = c.run(BACKEND)
    assert_close(out, c.oracle(), q_shape=c.q.shape, what=f"rule 8, window {window}")
    np.testing.assert_array_equal(bits(c.run(BACKEND)), bits(out))


# Groups whose rows (tokens x query heads a KV head) are not a multiple of the rows a merge CTA
# holds (8 at one warp a row, fewer at 2-8 warps), so the last merge CTA has slots past the
# group's rows; every merge width (1-8 warps a row, one batch or several), both ways a warp weighs
# its segments (on one lane each, or on every lane: the launch plan's merge_by_lane), D 64 and 128,
# short requests (tokens with qpos < 0) and padding (from a review of the row-warp merge, version
# 10).
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("Hq,Hkv,NQ", [(6, 2, 3), (5, 1, 5)], ids=["rows9", "rows25"])
@pytest.mark.parametrize("window", [None, 100], ids=["full", "swa100"])
def test_merge_rows_past_the_group(D, Hq, Hkv, NQ, window):
    rng = np.random.default_rng(D + Hq + NQ + (window or 0))
    c = make_case(rng, 6, [40000, 2, 0, 5000, 1, 129], P=2600, D=D, Hq=Hq, Hkv=Hkv, NQ=NQ,
                  window=window, num_reqs=5)
    ref = c.oracle()
    by_lane = set()
    for splits in [1, 16, 17, 33, 65, 129, 300]:
        kw = {"num_splits": splits} if BACKEND == "ffi" else {}
        if BACKEND == "ffi":
            plan = jax_muse_attn.launch_plan(c.q, c.kv, c.bt, window=window, num_splits=splits,
                                             tokens_per_request=NQ)
            by_lane.add(plan["merge_by_lane"])
        out = c.run(BACKEND, **kw)
        what = f"D={D} Hq={Hq} Hkv={Hkv} NQ={NQ} window={window} splits={splits}"
        assert_close(out, ref, q_shape=c.q.shape, what=what)
        o = np.asarray(out).astype(np.float32)
        assert np.isfinite(o).all(), what
        assert not o[5 * NQ:].any(), f"padding rows not zero: {what}"
        np.testing.assert_array_equal(bits(c.run(BACKEND, **kw)), bits(out))
    # both of the merge's ways ran (only the forced one where MUSE_ATTN_LAUNCH forces it)
    if BACKEND == "ffi":
        forced = _forced("merge_by_lane")
        assert by_lane == ({forced == "1"} if forced else {True, False}), by_lane


def _forced(key):
    """The value MUSE_ATTN_LAUNCH forces for key (test_gpu_launch_modes.py sets it), or None."""
    for item in os.environ.get("MUSE_ATTN_LAUNCH", "").split(","):
        k, _, v = item.partition("=")
        if k == key:
            return v
    return None


def _split_kernel_here(default_on_sm90):
    """The split kernel the launch plan picks for these few-CTA cases at D = 64: the forced one
    (where it runs here), else default_on_sm90 on an sm_90 GPU and per_tile elsewhere."""
    from jax_muse_attn import _ffi
    d = _ffi.device_description(_ffi.current_platform())
    forced = _forced("split_kernel")
    if forced == "pingpong_two_pairs" and not d["has_two_pairs"]:
        forced = "pingpong"
    if forced in ("fill_ring", "pingpong", "pingpong_two_pairs") and d["vendor"] != "nvidia":
        forced = None
    if forced:
        return forced
    return default_on_sm90 if d["vendor"] == "nvidia" and d["compute_major"] == 9 else "per_tile"


# Segments of exactly two tiles (the split kernel takes them as one 128-key step on sm_90a):
# every kind of boundary in either tile -- the causal edge of the new tokens, the window's lower
# edge, a last tile that is partly past seq_len, absent pages (out-of-range ids) -- and segments
# of one tile beside them (a request's last), against the float64 oracle, bitwise repeatable.
# (Every case has at most 2 tiles a segment and few CTAs, so the launch plan picks that kernel.)
def _check_split_variant_case(c, window, splits, what, expected):
    """c at `splits` segments a group against the float64 oracle, bitwise repeatable; on the FFI
    backend first asserts that the launch plan's split kernel is expected() (the variant these
    cases are for; forced both ways in test_gpu_launch_modes.py)."""
    ref = c.oracle()
    kw = {"num_splits": splits} if BACKEND == "ffi" else {}
    if BACKEND == "ffi":
        plan = jax_muse_attn.launch_plan(c.q, c.kv, c.bt, window=window, num_splits=splits,
                                         tokens_per_request=c.NQ)
        assert plan["split_kernel"] == expected(), plan
    out = c.run(BACKEND, **kw)
    assert_close(out, ref, q_shape=c.q.shape, what=what)
    np.testing.assert_array_equal(bits(c.run(BACKEND, **kw)), bits(out))


@pytest.mark.parametrize("window,splits", [(None, 4), (None, 5), (100, 2), (64, 2), (130, 2)],
                         ids=["full-4", "full-5", "swa100-2", "swa64-2", "swa130-2"])
def test_two_tile_segments(window, splits):
    rng = np.random.default_rng(7 + splits + (window or 0))
    lens = [257, 300, 320, 383, 384, 385, 449, 512, 200, 140, 9]
    c = make_case(rng, len(lens), lens, P=32, window=window, bad_live=0.15, num_reqs=len(lens) - 1)
    _check_split_variant_case(c, window, splits, f"window={window} splits={splits}",
                              lambda: _split_kernel_here("two_tile"))


# Segments of exactly four tiles (D = 64: as many as the split kernel's stages; where the merge's
# CTAs fit beside the split CTAs the launch plan picks the kernel that issues all four tiles'
# copies in its prologue, and a request's last, shorter segment beside them takes the loop's
# refills): the causal edge, a window's lower edge, a last tile partly past seq_len, absent pages,
# against the float64 oracle, bitwise repeatable.
@pytest.mark.parametrize("window,splits,P", [(None, 4, 64), (None, 2, 32), (130, 1, 64), (180, 1, 64)],
                         ids=["full-4", "full-2", "swa130-1", "swa180-1"])
def test_four_tile_segments(window, splits, P):
    rng = np.random.default_rng(11 + splits + (window or 0))
    keys = P * PAGE
    lens = [keys, keys - 1, keys - 64, keys - 65, keys - 130, keys - 200, keys // 2 + 70, 260, 257,
            250, 9]
    c = make_case(rng, len(lens), lens, P=P, window=window, bad_live=0.15, num_reqs=len(lens) - 1)
    _check_split_variant_case(c, window, splits, f"window={window} splits={splits} P={P}",
                              lambda: _split_kernel_here("fill_ring"))


# The running max that jumps from tile to tile (the split kernel keeps a row's old max while a
# tile's exceeds it by at most kRescaleSlack, 8 in the exp2 domain (p <= 2^8), and rescales O only past
# that): each live key's K is multiplied by a gain that depends on its position, so the scores'
# scale changes by a factor of up to 64 between tiles (a jump of ~200 in the exp2 domain: a max
# that never moved would overflow exp2 to inf) or creeps up a few units a tile (P near 2^8 before
# the max moves), in segments of 3, 4, 8 and 32 tiles (the per-tile, four-tile and ping-pong
# kernels on an H200), against the float64 oracle, bitwise repeatable.
def _gain(pattern, key):
    tile = key // 64
    if pattern == "steps":  # x1, x4, x16, x64, x1, ... a tile: jumps far past the slack
        return 4.0 ** (tile % 4)
    if pattern == "falling":  # x64 first, then smaller: the max set by the first tile stays
        return 4.0 ** (3 - tile % 4)
    return 1.0 + 0.6 * tile  # "creep": ~3-5 a tile in the exp2 domain, past 8 over two or three


def _with_gains(c, pattern):
    kv = c.kv_np.astype(np.float32)
    D = kv.shape[-1] // 2
    nb = kv.shape[0]
    for r in range(c.num_reqs):
        for page in range(c.P):
            bid = int(c.bt_np[r, page])
            if not 0 <= bid < nb:
                continue
            for slot in np.flatnonzero(c.readable[bid]):
                kv[bid, :, slot, :D] *= _gain(pattern, page * PAGE + int(slot))
    kv_j = jnp.asarray(kv, jnp.bfloat16)
    return dataclasses.replace(c, kv=kv_j, kv_np=np.asarray(kv_j))


@pytest.mark.parametrize("pattern", ["steps", "falling", "creep"])
@pytest.mark.parametrize("splits", [1, 4, 8, 11])
def test_running_max_jumps(pattern, splits):
    rng = np.random.default_rng(3 + splits)
    lens = [2048, 2047, 1985, 1500, 777, 200, 9]
    c = make_case(rng, len(lens), lens, P=128, window=None, bad_live=0.05, num_reqs=len(lens) - 1)
    c = _with_gains(c, pattern)
    ref = c.oracle()
    kw = {"num_splits": splits} if BACKEND == "ffi" else {}
    out = c.run(BACKEND, **kw)
    what = f"pattern={pattern} splits={splits}"
    assert_close(out, ref, q_shape=c.q.shape, what=what)
    assert np.isfinite(np.asarray(out).astype(np.float32)).all(), what
    np.testing.assert_array_equal(bits(c.run(BACKEND, **kw)), bits(out))


@pytest.mark.parametrize("num_splits", [None, 1], ids=["default_splits", "one_split"])
def test_inputs_written_by_the_kernels_just_before(num_splits):
    """A chain of calls whose every input is written by a kernel right before it in the same jit:
    q by a fusion of the previous call's output (as layers chain), the cache, the block table,
    the lengths and num_reqs (traced) by fusions (a select, xors) that XLA cannot fold. Every
    launch that may start before the kernel ahead of it has finished (the merge after the split
    kernel; the split kernel after the previous kernel where the launch plan's split_pdl is on)
    must wait for that kernel's writes before it reads: a read too early sees stale data, wrong
    rows against the oracle. Such a race is narrow, so this is a regression check of those
    paths, not a proof. num_splits=1 makes segments of up to 32 tiles (the ping-pong kernel on
    an H200)."""
    rng = np.random.default_rng(11)
    lens = [2048, 1500, 777, 64, 9, 2047, 300, 1025]
    c = make_case(rng, len(lens), lens, P=128, window=None, bad_live=0.1, num_reqs=len(lens) - 1)
    steps = 4
    mask = np.int32(0x5A5A5A5A)
    bt_in, sl_in = jnp.asarray(c.bt_np ^ mask), jnp.asarray(c.sl_np ^ mask)
    nr_in = jnp.int32(c.num_reqs ^ int(mask))
    junk = jnp.full_like(c.kv, jnp.nan)
    kw = {"num_splits": num_splits} if BACKEND == "ffi" and num_splits else {}

    @jax.jit
    def chain(q, kv_a, kv_b, pick_a, bt_in, sl_in, nr_in, mask, one):
        kv = jnp.where(pick_a, kv_a, kv_b)
        bt, sl, nr = bt_in ^ mask, sl_in ^ mask, nr_in ^ mask
        qs, outs, x = [], [], q * one
        for _ in range(steps):
            qs.append(x)
            out = jax_muse_attn.verify_attention(x, kv, bt, sl, scale=c.scale, num_reqs=nr,
                                                 backend=BACKEND, tokens_per_request=c.NQ, **kw)
            outs.append(out)
            x = out + q * one  # the next call's q: a fusion of this output (no convergence)
        return qs, outs

    qs, outs = chain(c.q, c.kv, junk, jnp.bool_(True), bt_in, sl_in, nr_in, jnp.int32(mask),
                     jnp.bfloat16(1.0))
    for i, (q_i, out) in enumerate(zip(qs, outs)):
        ref = oracle.verify_attention(np.asarray(q_i), c.kv_np, c.bt_np, c.sl_np, scale=c.scale,
                                      num_reqs=c.num_reqs, tokens_per_request=c.NQ)
        assert_close(out, ref, q_shape=c.q.shape, what=f"call {i} of the chain")
