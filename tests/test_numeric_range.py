"""The numeric range of the contract: scores (scale * log2(e) * q.K) and P.V sums must fit fp32.

Outside it, where q.K is too large (a score overflows to +inf) every backend makes the row NaN,
and where a P.V sum passes the fp32 range the row is +-inf; the other rows of the call stay
exact. A score below -3.4e38 is outside the contract and not pinned here: the CPU handler and
the reference drop the key, NVIDIA's matrix units made such a row NaN.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_close, make_case

R, P, NQ, HQ, HKV, D = 4, 8, 8, 16, 2, 64
QPK = HQ // HKV


def _case(rng):
    return make_case(rng, R, [100, 77, 128, 20], P=P, Hq=HQ, Hkv=HKV, D=D, NQ=NQ, poison=False)


def _keys(c, r):
    """(blocks, slots) of request r's keys."""
    keys = np.arange(int(c.sl_np[r]))
    return c.bt_np[r, keys // 16], keys % 16


def _with(c, q, kv):
    c.q, c.kv = jnp.asarray(q, jnp.bfloat16), jnp.asarray(kv, jnp.bfloat16)
    c.q_np, c.kv_np = np.asarray(c.q), np.asarray(c.kv)
    return c


def _rows(r, g):
    """Output index (rows, heads) of request r, KV head g's group."""
    return slice(NQ * r, NQ * (r + 1)), slice(g * QPK, (g + 1) * QPK)


def _agree(a, b, what):
    """Same NaN and +-inf positions, finite values within the spec's tolerance of each other."""
    a, b = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(np.isposinf(a), np.isposinf(b), err_msg=f"{what}: +inf positions")
    np.testing.assert_array_equal(np.isneginf(a), np.isneginf(b), err_msg=f"{what}: -inf positions")
    fin = np.isfinite(a)
    assert np.all(np.abs(a[fin] - b[fin]) <= 1e-2 + 2e-2 * np.abs(b[fin])), f"{what}: finite values"


def _in_range_rows(out, c, bad):
    """Every (row, head) outside `bad` matches the float64 oracle."""
    o = np.asarray(out).astype(np.float64)
    want = c.oracle()
    keep = np.ones(o.shape[:2], bool)
    for rows, heads in bad:
        keep[rows, heads] = False
    assert_close(o[keep], want[keep], what="in-range rows")


def test_score_overflow_gives_nan_rows(rng):
    """q and K of 1e19: q.K overflows fp32 on request 0's KV head 0 (its 64 rows are NaN on both
    backends); q.K at about 2.8e38 with scale 1 is finite but overflows times log2(e), as the
    kernels compute it (request 2, KV head 1): NaN there too."""
    c = _case(rng)
    q, kv = c.q_np.astype(np.float32), c.kv_np.astype(np.float32)
    blk, slot = _keys(c, 0)
    kv[blk, 0, slot, :D] = 1e19
    q[_rows(0, 0)] = 1e19
    x = np.float32(2.1e18)  # 64 x^2 = 2.8e38 < 3.4e38 < 64 x^2 log2(e)
    blk, slot = _keys(c, 2)
    kv[blk, 1, slot, :D] = x
    q[_rows(2, 1)] = x
    c = _with(c, q, kv)
    c.scale = 1.0
    outs = {b: c.run(b) for b in ("reference", "ffi")}
    for b, out in outs.items():
        o = np.asarray(out).astype(np.float32)
        for r, g in ((0, 0), (2, 1)):
            assert np.isnan(o[_rows(r, g)]).all(), f"{b}: request {r} KV head {g} not NaN"
        _in_range_rows(out, c, [_rows(0, 0), _rows(2, 1)])
    _agree(outs["ffi"], outs["reference"], "ffi vs reference")


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_value_sum_overflow_gives_inf(rng, sign):
    """Values near the bf16 maximum under equal scores: their sum passes 3.4e38 and the rows are
    +-inf on both backends; the other rows are exact."""
    c = _case(rng)
    kv = c.kv_np.astype(np.float32)
    blk, slot = _keys(c, 2)
    kv[blk, 1, slot, :D] = 0.0  # equal scores: every p is 1
    kv[blk, 1, slot, D:] = sign * 3e38
    c = _with(c, c.q_np.astype(np.float32), kv)
    outs = {b: c.run(b) for b in ("reference", "ffi")}
    for b, out in outs.items():
        o = np.asarray(out).astype(np.float32)[_rows(2, 1)]
        assert (o == sign * np.inf).all(), f"{b}: {o.ravel()[:4]}"
        _in_range_rows(out, c, [_rows(2, 1)])
    _agree(outs["ffi"], outs["reference"], "ffi vs reference")
