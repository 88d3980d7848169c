"""Hypothesis properties over random problems of a fixed small shape set (so the compile cache
is reused across examples): R, lengths, windows, block permutations, poison, num_reqs."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import INT32_MAX, INT32_MIN, assert_close, bits, make_case, poison_slots

P = 16  # 256 keys capacity
CAP = 16 * P
SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

lengths = st.one_of(
    st.integers(0, CAP),
    st.sampled_from([0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 127, 128, 129, CAP - 1, CAP]),
    st.integers(INT32_MIN, INT32_MAX),  # run-time garbage: clamped to [0, 16*P]
)


@st.composite
def problems(draw):
    R = draw(st.sampled_from([1, 4, 16]))
    window = draw(st.sampled_from([None, 1, 16, 100]))
    lens = draw(st.lists(lengths, min_size=R, max_size=R))
    num_reqs = draw(st.integers(0, R))
    bad_live = draw(st.sampled_from([0.0, 0.0, 0.25]))
    seed = draw(st.integers(0, 2**32 - 1))
    traced = draw(st.booleans())
    return R, window, lens, num_reqs, bad_live, seed, traced


def _build(R, window, lens, num_reqs, bad_live, seed):
    rng = np.random.default_rng(seed)
    return rng, make_case(rng, R, lens, P=P, window=window, num_reqs=num_reqs, bad_live=bad_live)


@pytest.mark.parametrize("backend", ["reference", "ffi"])
@settings(max_examples=35, **SETTINGS)
@given(problems())
def test_matches_oracle(backend, prob):
    R, window, lens, num_reqs, bad_live, seed, traced = prob
    _, c = _build(R, window, lens, num_reqs, bad_live, seed)
    n = jnp.int32(num_reqs) if traced else num_reqs
    out = c.run(backend, num_reqs=n)
    assert_close(out, c.oracle(), q_shape=c.q.shape)
    assert not np.asarray(out).astype(np.float32)[8 * num_reqs:].any()


@pytest.mark.parametrize("backend", ["reference", "ffi"])
@settings(max_examples=25, **SETTINGS)
@given(problems())
def test_invariant_to_block_relabeling_and_poison(backend, prob):
    """Permuting the cache's blocks (and the table with them) and re-drawing every unreadable
    slot's garbage leaves the output bitwise unchanged."""
    R, window, lens, num_reqs, bad_live, seed, _ = prob
    rng, c = _build(R, window, lens, num_reqs, bad_live, seed)
    out = c.run(backend)
    nb = c.kv_np.shape[0]
    perm = rng.permutation(nb)  # new position of old block b: perm[b]
    kv = np.empty_like(c.kv_np)
    kv[perm] = c.kv_np
    readable = np.zeros_like(c.readable)
    readable[perm] = c.readable
    kv = poison_slots(rng, kv.astype(np.float32), ~readable)
    bt = c.bt_np.astype(np.int64)
    inside = (bt >= 0) & (bt < nb)
    bt = np.where(inside, perm[np.clip(bt, 0, nb - 1)], bt).astype(np.int32)
    c.kv, c.bt = jnp.asarray(kv, jnp.bfloat16), jnp.asarray(bt)
    np.testing.assert_array_equal(bits(c.run(backend)), bits(out))


@settings(max_examples=30, **SETTINGS)
@given(problems(), st.sampled_from([1, 2, 3, 4, 7, 1000]))
def test_ffi_matches_reference_any_splits(prob, num_splits):
    R, window, lens, num_reqs, bad_live, seed, _ = prob
    _, c = _build(R, window, lens, num_reqs, bad_live, seed)
    ffi = c.run("ffi", num_splits=num_splits)
    ref = c.run("reference")
    assert_close(ffi, np.asarray(ref).astype(np.float64), q_shape=c.q.shape, what="ffi vs reference")
    assert_close(ffi, c.oracle(), q_shape=c.q.shape, what="ffi vs oracle")
