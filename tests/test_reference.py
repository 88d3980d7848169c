"""The spec's semantics (README.md, Semantics), checked against the float64 oracle for every backend.

The `backend` fixture runs each test on the jnp reference and on this platform's FFI handler
(the CPU handler here, the CUDA handler on a GPU machine). The first tests check the oracle
itself against a dense float64 formula, so a bug there cannot hide a kernel bug.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import oracle
from conftest import INT32_MAX, INT32_MIN, PAGE, assert_close, check_case, make_case

# ---------------------------------------------------------------------------------------------
# The oracle against a second, dense formulation (contiguous cache, explicit mask matrix).


def _dense(q, kv, seq_lens, scale, window, nq, hkv):
    """float64 reference over a contiguous cache: request r owns blocks r*P .. r*P+P-1."""
    r_total = q.shape[0] // nq
    hq, d = q.shape[1], q.shape[2]
    p = kv.shape[0] // r_total
    out = np.zeros(q.shape, np.float64)
    for r in range(r_total):
        s_len = int(seq_lens[r])
        keys = kv[r * p:(r + 1) * p].astype(np.float64)  # [P, Hkv, 16, 2D]
        keys = keys.transpose(1, 0, 2, 3).reshape(hkv, p * PAGE, 2 * d)[:, :s_len]
        kpos = np.arange(s_len)
        for t in range(nq):
            qp = s_len - nq + t
            mask = kpos <= qp
            if window is not None:
                mask &= kpos > qp - window
            if not mask.any():
                continue
            for h in range(hq):
                kk = keys[h // (hq // hkv), :, :d][mask]
                vv = keys[h // (hq // hkv), :, d:][mask]
                sc = scale * kk @ q[r * nq + t, h].astype(np.float64)
                w = np.exp(sc - sc.max())
                out[r * nq + t, h] = w @ vv / w.sum()
    return out


@pytest.mark.parametrize("window", [None, 5, 40])
def test_oracle_matches_dense_formula(window):
    rng = np.random.default_rng(7)
    nq, hq, hkv, d, P = 8, 4, 2, 64, 6
    lens = [0, 3, 8, 9, 40, 96]
    R = len(lens)
    kv = rng.standard_normal((R * P, hkv, PAGE, 2 * d))
    q = rng.standard_normal((nq * R, hq, d))
    bt = np.arange(R * P, dtype=np.int32).reshape(R, P)
    ref = oracle.verify_attention(q, kv, bt, np.array(lens, np.int32), scale=0.3, window=window,
                                  tokens_per_request=nq)
    dense = _dense(q, kv, lens, 0.3, window, nq, hkv)
    np.testing.assert_allclose(ref, dense, rtol=1e-12, atol=1e-12)
    assert np.all(ref[: nq] == 0)  # seq_len 0
    assert np.all(ref[nq: nq + 5] == 0) and np.any(ref[nq + 5] != 0)  # seq_len 3: tokens 0..4 see nothing


def test_oracle_reads_only_allowed_slots():
    """Poison everything the spec forbids reading: the oracle stays finite and unchanged."""
    rng = np.random.default_rng(3)
    clean = make_case(rng, 4, [70, 5, 130, 17], P=12, window=16, poison=False, Hq=4, Hkv=2)
    ref_clean = clean.oracle()
    kv = clean.kv_np.astype(np.float32)
    bad = np.broadcast_to(~clean.readable[:, None, :, None], kv.shape)
    kv[bad] = np.nan
    ref_poison = oracle.verify_attention(clean.q_np, kv, clean.bt_np, clean.sl_np, scale=clean.scale,
                                         window=16, tokens_per_request=8)
    assert np.isfinite(ref_poison).all()
    np.testing.assert_array_equal(ref_clean, ref_poison)


# ---------------------------------------------------------------------------------------------
# Sanity properties with an obvious answer (computed from the inputs, not hard-coded).


def test_single_visible_key_returns_its_value(backend, rng):
    """NQ = 1, seq_len = 1: the only key gets weight 1, so the output is V[0] (bf16)."""
    c = make_case(rng, 2, [1, 1], P=4, NQ=1, Hq=16, Hkv=2)
    out = np.asarray(c.run(backend)).astype(np.float32)
    for r in range(2):
        blk = c.bt_np[r, 0]
        v = c.kv_np[blk, :, 0, 64:].astype(np.float32)  # [Hkv, D]
        np.testing.assert_array_equal(out[r], np.repeat(v, 8, axis=0))
    check_case(c, backend)


def test_identical_keys_average_values(backend, rng):
    """All keys equal: uniform weights, output = mean of the visible V."""
    c = make_case(rng, 1, [40], P=4, Hq=2, Hkv=1, poison=True)
    kv = c.kv_np.astype(np.float32)
    kv[:, :, :, :64] = np.where(np.isfinite(kv[:, :, :, :64]), 1.0, kv[:, :, :, :64])
    c.kv = jnp.asarray(kv, jnp.bfloat16)
    c.kv_np = np.asarray(c.kv)
    out = np.asarray(c.run(backend)).astype(np.float64)
    for t in range(8):
        qpos = 32 + t
        vals = np.stack([c.kv_np[c.bt_np[0, k // 16], 0, k % 16, 64:].astype(np.float64)
                         for k in range(qpos + 1)])
        np.testing.assert_allclose(out[t], np.broadcast_to(vals.mean(0), (2, 64)), atol=1e-2, rtol=2e-2)
    check_case(c, backend)


# ---------------------------------------------------------------------------------------------
# The case matrix.

SHORT = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 63, 64, 65,
         127, 128, 129, 191, 192, 31, 32, 33, 47, 48, 49, 100, 111, 112, 113, 150]
P_SHORT = 12  # 192 keys capacity


@pytest.mark.parametrize("R", [1, 2, 4, 16])
def test_short_contexts_full(backend, rng, R):
    for i in range(0, len(SHORT), R):
        c = make_case(rng, R, SHORT[i:i + R], P=P_SHORT)
        check_case(c, backend, what=f"lens {SHORT[i:i + R]}")


@pytest.mark.parametrize("R", [2, 16])
def test_short_contexts_q_2d(backend, rng, R):
    for i in range(0, len(SHORT), R):
        c = make_case(rng, R, SHORT[i:i + R], P=P_SHORT, q2d=True)
        check_case(c, backend, what=f"lens {SHORT[i:i + R]}")


def test_seq_lens_out_of_range_are_clamped(backend, rng):
    """Over capacity -> 16*P keys; negative -> 0 keys (the spec: run-time data is clamped)."""
    cap = PAGE * P_SHORT
    lens = [cap + 1, cap + 16, 1000, INT32_MAX, -1, -8, INT32_MIN, cap,
            cap - 1, 5, -100, cap + 7, 2 * cap, 0, INT32_MAX - 1, -2]
    c = make_case(rng, 16, lens, P=P_SHORT)
    out = check_case(c, backend)
    # and literally the same as passing the clamped values
    c2_sl = np.clip(c.sl_np, 0, cap).astype(np.int32)
    c.sl, c.sl_np = jnp.asarray(c2_sl), c2_sl
    np.testing.assert_array_equal(np.asarray(c.run(backend)).view(np.uint16), np.asarray(out).view(np.uint16))


LONG_P = 320  # 5120 keys capacity


def test_long_context_full(backend, rng):
    c = make_case(rng, 4, [3000, 4097, 5000, 5120], P=LONG_P)
    check_case(c, backend)


def test_long_context_full_r16(backend, rng):
    lens = [0, 1, 7, 8, 9, 63, 65, 129, 1000, 2047, 2048, 2049, 3001, 4095, 4999, 5120]
    c = make_case(rng, 16, lens, P=LONG_P)
    check_case(c, backend)


def test_swa_2048(backend, rng):
    e = 8 + 2048 - 1  # smallest seq_len whose token 0 still sees key 0
    lens = [0, 5, 8, 100, 2047, e - 1, e, e + 1, e + 2, e + 15, e + 16, e + 17, e + 64, 3000, 4500, 5120]
    c = make_case(rng, 16, lens, P=LONG_P, window=2048)
    check_case(c, backend)


@pytest.mark.parametrize("R", [1, 4])
def test_swa_2048_small_r(backend, rng, R):
    lens = [4999, 2055, 2056, 3333, 5120, 2100, 1, 2200]
    for i in range(0, len(lens), R):
        c = make_case(rng, R, lens[i:i + R], P=LONG_P, window=2048)
        check_case(c, backend, what=f"lens {lens[i:i + R]}")


@pytest.mark.parametrize("window", [1, 16, 64, 100])
def test_swa_small_windows(backend, rng, window):
    """Around the window edge (key_lo crossing 0, a page and a tile boundary) and far past it."""
    e = 8 + window - 1
    cap = 16 * 16
    lens = [e - 2, e - 1, e, e + 1, e + 2, e + 15, e + 16, e + 17, e + 63, e + 64, e + 65,
            3, 8, 9, 200, cap]
    lens = [min(max(x, 0), cap) for x in lens]
    c = make_case(rng, 16, lens, P=16, window=window)
    check_case(c, backend, what=f"window {window}")
    c = make_case(rng, 16, [cap - i for i in range(16)], P=16, window=window)
    check_case(c, backend, what=f"window {window} full table")


@pytest.mark.parametrize("stale", [-1, INT32_MIN, INT32_MAX, "num_blocks", "poisoned"])
@pytest.mark.parametrize("window", [None, 16])
def test_stale_block_table_entries(backend, rng, stale, window):
    """Entries before the window and past the last block hold one kind of garbage each."""
    lens = [200, 256, 100, 40, 17, 16, 0, 9, 129, 150, 70, 64, 65, 250, 33, 8]
    nb = 16 * 16 + 6
    if stale == "num_blocks":
        stale = nb
    elif stale == "poisoned":
        stale = None  # set below to a fully poisoned (never live) block
    c = make_case(rng, 16, lens, P=16, window=window, stale=stale)
    if stale is None:
        spare = np.flatnonzero(~c.readable.any(axis=1))
        assert spare.size
        live = np.zeros_like(c.bt_np, bool)
        for r, s in enumerate(lens):
            lo = 0 if window is None else max(0, s - 8 - window + 1)
            for page in range(lo // 16, -(-s // 16)):
                live[r, page] = True
        bt = np.where(live, c.bt_np, spare[0]).astype(np.int32)
        c.bt, c.bt_np = jnp.asarray(bt), bt
    check_case(c, backend, what=f"stale {stale}")


@pytest.mark.parametrize("window", [None, 64])
def test_bad_block_ids_where_keys_are_read(backend, rng, window):
    """Out-of-range ids in the live range: those keys are absent (masked, not dereferenced)."""
    lens = [256, 200, 129, 100, 65, 64, 40, 17, 16, 9, 8, 5, 1, 0, 250, 180]
    c = make_case(rng, 16, lens, P=16, window=window, bad_live=0.35)
    check_case(c, backend, what="35% bad")
    c = make_case(rng, 16, lens, P=16, window=window, bad_live=1.0)
    out = check_case(c, backend, what="all bad")
    assert not np.asarray(out).astype(np.float32).any()


@pytest.mark.parametrize("R,num_reqs", [(4, 0), (4, 1), (4, 3), (16, 0), (16, 5), (16, 15), (16, 16)])
def test_padding_num_reqs_int(backend, rng, R, num_reqs):
    """Padding requests: garbage seq_lens / block-table rows pointing at poison -> zero rows."""
    lens = list(rng.integers(1, PAGE * P_SHORT + 1, size=R))
    c = make_case(rng, R, lens, P=P_SHORT, num_reqs=num_reqs, extra_rows=3)
    out = np.asarray(check_case(c, backend, num_reqs=num_reqs)).astype(np.float32)
    assert not out[8 * num_reqs:].any()


@pytest.mark.parametrize("NQ", [1, 4, 16])
@pytest.mark.parametrize("window", [None, 16])
def test_tokens_per_request(backend, rng, NQ, window):
    lens = [0, 1, NQ - 1, NQ, NQ + 1, 16, 17, 63, 64, 65, 100, 150, 191, 192, 2, NQ + window if window else 33]
    lens = [max(x, 0) for x in lens]
    c = make_case(rng, 16, lens, P=P_SHORT, NQ=NQ, window=window)
    check_case(c, backend, what=f"NQ {NQ}")


def test_head_dim_128(backend, rng):
    c = make_case(rng, 4, [150, 9, 64, 191], P=P_SHORT, D=128, Hq=16, Hkv=2)
    check_case(c, backend)
    c = make_case(rng, 4, [150, 9, 64, 191], P=P_SHORT, D=128, Hq=16, Hkv=2, window=16, q2d=True)
    check_case(c, backend, what="swa 2d")


def test_unsharded_tp_view(backend, rng):
    """Hkv 16 / Hq 128: all TP ranks in one call, small context."""
    c = make_case(rng, 2, [100, 37], P=8, Hq=128, Hkv=16)
    check_case(c, backend)


# qpk 1, 16, 4 and also 4 / 3 / 5 with Hkv 3 / 2 / 1 (divisions by counts that are not powers of 2)
@pytest.mark.parametrize("hq,hkv", [(8, 8), (32, 2), (4, 1), (12, 3), (6, 2), (5, 1)])
def test_other_head_groupings(backend, rng, hq, hkv):
    c = make_case(rng, 4, [150, 9, 64, 191], P=P_SHORT, Hq=hq, Hkv=hkv)
    check_case(c, backend, what=f"Hq {hq} Hkv {hkv}")


def test_deterministic(backend, rng):
    c = make_case(rng, 16, [5000, 3000, 17, 0, 4096, 2049, 1, 5120, 999, 64, 65, 128, 4000, 10, 3500, 2500],
                  P=LONG_P)
    a = np.asarray(c.run(backend)).view(np.uint16)
    b = np.asarray(c.run(backend)).view(np.uint16)
    np.testing.assert_array_equal(a, b)
    c2 = make_case(rng, 16, [5000, 3000, 17, 0, 4096, 2049, 1, 5120, 999, 64, 65, 128, 4000, 10, 3500, 2500],
                   P=LONG_P, window=2048)
    a = np.asarray(c2.run(backend)).view(np.uint16)
    b = np.asarray(c2.run(backend)).view(np.uint16)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("window", [None, 16])
def test_reference_module_entry_point(rng, window):
    """jax_muse_attn.reference.verify_attention (no backend argument), eager and under jit."""
    import jax

    from jax_muse_attn import reference

    c = make_case(rng, 4, [191, 9, 0, 100], P=P_SHORT, window=window, num_reqs=3, extra_rows=1)
    kw = dict(scale=c.scale, window=window, num_reqs=3)
    out = reference.verify_attention(c.q, c.kv, c.bt, c.sl, **kw)
    assert_close(out, c.oracle(), q_shape=c.q.shape)
    f = jax.jit(lambda q, kv, bt, sl, n: reference.verify_attention(q, kv, bt, sl, scale=c.scale,
                                                                  window=window, num_reqs=n))
    assert_close(f(c.q, c.kv, c.bt, c.sl, jnp.int32(3)), c.oracle(), q_shape=c.q.shape)
