"""verify_attention under JAX transformations: derivatives are refused with an error that names
the differentiable reference; jax.vmap folds the batch into the requests and equals a Python
loop over the batch; the reference module's gradient matches a float64 formula."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_muse_attn
from conftest import PAGE, assert_close, bits, make_case
from jax_muse_attn import reference

R, P = 4, 12

# ---------------------------------------------------------------------------------------------
# Derivatives


def _call(backend, q, kv, bt, sl, **kw):
    return jax_muse_attn.verify_attention(q, kv, bt, sl, scale=0.125, backend=backend, **kw)


def _loss(backend, q, kv, bt, sl):
    return jnp.sum(_call(backend, q, kv, bt, sl).astype(jnp.float32) ** 2)


TRANSFORMS = {
    "grad_q": lambda f, q, kv: jax.grad(f, argnums=0)(q, kv),
    "grad_kv": lambda f, q, kv: jax.grad(f, argnums=1)(q, kv),
    "jit_grad": lambda f, q, kv: jax.jit(jax.grad(f))(q, kv),
    "vjp": lambda f, q, kv: jax.vjp(f, q, kv)[1](jnp.float32(1)),
    "jvp": lambda f, q, kv: jax.jvp(f, (q, kv), (jnp.ones_like(q), jnp.zeros_like(kv))),
    "linearize": lambda f, q, kv: jax.linearize(f, q, kv),
    "grad_of_vmap": lambda f, q, kv: jax.grad(lambda q: jnp.sum(jax.vmap(f, (0, None))(q, kv)))(
        q[None]),
}


@pytest.mark.parametrize("transform", list(TRANSFORMS))
def test_derivatives_are_refused_with_the_reference_named(backend, rng, transform):
    c = make_case(rng, R, [100, 9, 0, 191], P=P)
    f = functools.partial(lambda q, kv, bt, sl: _loss(backend, q, kv, bt, sl), bt=c.bt, sl=c.sl)
    with pytest.raises(NotImplementedError, match="inference kernel") as e:
        TRANSFORMS[transform](f, c.q, c.kv)
    assert "jax_muse_attn.reference.verify_attention" in str(e.value)
    assert "custom_partitioning" not in str(e.value)


def test_forward_call_inside_a_derivative(backend, rng):
    """A call whose inputs carry no tangent runs inside jax.grad, and stop_gradient on its inputs
    is the way to keep it there: the gradient of the rest is exact."""
    c = make_case(rng, R, [100, 9, 0, 191], P=P)
    att = _call(backend, c.q, c.kv, c.bt, c.sl).astype(jnp.float32)

    def loss(x):
        out = _call(backend, c.q, c.kv, c.bt, c.sl).astype(jnp.float32)
        return x * jnp.sum(out)

    np.testing.assert_allclose(jax.grad(loss)(jnp.float32(2.0)), jnp.sum(att), rtol=1e-6)

    def loss_q(q):
        out = _call(backend, jax.lax.stop_gradient(q), c.kv, c.bt, c.sl).astype(jnp.float32)
        return jnp.sum(out) * jnp.sum(q.astype(jnp.float32))

    g = jax.grad(loss_q)(c.q)
    np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(jnp.sum(att), np.float32), rtol=1e-2)


def _grad_float64(q, kv, bt, sl, w, *, scale, window, nq, num_reqs):
    """d sum(w * out) / d(q, kv_cache) in float64, row by row: s = scale q.K, p = softmax(s),
    out = p V; dV += p w, ds = p (w.V - w.out), dq = scale ds K, dK += scale ds q."""
    q, kv, w = (np.asarray(x).astype(np.float64) for x in (q, kv, w))
    nb, hkv, _, two_d = kv.shape
    d = two_d // 2
    hq = q.shape[1]
    dq, dkv = np.zeros_like(q), np.zeros_like(kv)
    for r in range(num_reqs):
        s_len = int(sl[r])
        for t in range(nq):
            qpos = s_len - nq + t
            lo = 0 if window is None else max(0, qpos - window + 1)
            keys = [k for k in range(lo, qpos + 1) if 0 <= bt[r, k // PAGE] < nb]
            if not keys:
                continue
            blk = np.array([bt[r, k // PAGE] for k in keys])
            slot = np.array([k % PAGE for k in keys])
            for h in range(hq):
                g = h // (hq // hkv)
                kk, vv = kv[blk, g, slot, :d], kv[blk, g, slot, d:]
                row = nq * r + t
                s = scale * kk @ q[row, h]
                p = np.exp(s - s.max())
                p /= p.sum()
                wr = w[row, h]
                ds = p * (vv @ wr - wr @ (p @ vv))
                dq[row, h] += scale * ds @ kk
                np.add.at(dkv, (blk, g, slot, slice(0, d)), scale * ds[:, None] * q[row, h][None, :])
                np.add.at(dkv, (blk, g, slot, slice(d, None)), p[:, None] * wr[None, :])
    return dq, dkv


def _assert_grad_close(got, want, what):
    got = np.asarray(got).astype(np.float64)
    assert np.isfinite(got).all(), f"{what}: non-finite gradient"
    tol = 1e-2 * np.abs(want).max() + 2e-2 * np.abs(want)
    bad = np.abs(got - want) > tol
    assert not bad.any(), f"{what}: {bad.sum()} of {bad.size} off; max err {np.abs(got - want).max():.3g}"


@pytest.mark.parametrize("window", [None, 16])
def test_reference_gradient_matches_float64(rng, window):
    """jax_muse_attn.reference.verify_attention (the differentiable form) against the analytic
    gradient in float64, through a shuffled block table with stale and bad ids, poisoned unread
    slots (their gradient is exactly zero, never NaN) and a padding request."""
    Hq, Hkv, NQ, scale = 4, 2, 4, 0.3
    c = make_case(rng, 3, [40, 3, 70], P=6, Hq=Hq, Hkv=Hkv, NQ=NQ, window=window, num_reqs=2,
                  bad_live=0.2, scale=scale)
    w = rng.standard_normal(c.q.shape).astype(np.float32)

    def loss(q, kv):
        out = reference.verify_attention(q, kv, c.bt, c.sl, scale=scale, window=window,
                                         num_reqs=2, tokens_per_request=NQ)
        return jnp.sum(out.astype(jnp.float32) * w)

    dq, dkv = jax.jit(jax.grad(loss, argnums=(0, 1)))(c.q, c.kv)
    assert dq.dtype == jnp.bfloat16 and dkv.dtype == jnp.bfloat16
    want_q, want_kv = _grad_float64(c.q_np, c.kv_np, c.bt_np, c.sl_np, w, scale=scale,
                                    window=window, nq=NQ, num_reqs=2)
    assert np.abs(want_q).max() > 0.1 and np.abs(want_kv).max() > 0.1  # not a trivial case
    _assert_grad_close(dq, want_q, "d/dq")
    _assert_grad_close(dkv, want_kv, "d/dkv_cache")
    unread = ~np.broadcast_to(c.readable[:, None, :, None], dkv.shape)
    assert not np.asarray(dkv).astype(np.float32)[unread].any()


def test_reference_directional_derivative_matches_finite_differences(rng):
    """The same gradient against central differences of the float64 oracle along one direction
    (independent of the formula above)."""
    import oracle

    c = make_case(rng, 2, [30, 50], P=4, Hq=2, Hkv=1, NQ=2, scale=0.3, poison=False)
    w = rng.standard_normal(c.q.shape)
    dq_dir = rng.standard_normal(c.q.shape)

    def loss(q, kv):
        out = reference.verify_attention(q, kv, c.bt, c.sl, scale=0.3, tokens_per_request=2)
        return jnp.sum(out.astype(jnp.float32) * w.astype(np.float32))

    dq = np.asarray(jax.grad(loss)(c.q, c.kv)).astype(np.float64)
    f = lambda q: np.sum(w * oracle.verify_attention(  # noqa: E731
        q, c.kv_np, c.bt_np, c.sl_np, scale=0.3, tokens_per_request=2))
    eps = 1e-4
    q0 = c.q_np.astype(np.float64)
    fd = (f(q0 + eps * dq_dir) - f(q0 - eps * dq_dir)) / (2 * eps)
    np.testing.assert_allclose(np.sum(dq * dq_dir), fd, rtol=2e-2, atol=1e-2)


# ---------------------------------------------------------------------------------------------
# vmap: a leading batch axis folded into the requests


B = 3


def _batch(rng, *, window=None, num_reqs=(R, R, R), bad_live=0.3, q2d=False, poison=True):
    """B problems of the same shapes, each with its own cache, table and garbage."""
    cases = [make_case(rng, R, list(rng.integers(0, PAGE * P + 1, size=R)), P=P, window=window,
                       num_reqs=n, extra_rows=1, bad_live=bad_live, q2d=q2d, poison=poison)
             for n in num_reqs]
    stack = lambda name: jnp.stack([getattr(c, name) for c in cases])  # noqa: E731
    return cases, stack("q"), stack("kv"), stack("bt"), stack("sl")


def _run(backend, window, q, kv, bt, sl, nr):
    # a fixed split count: the loop's calls and the folded call then cut keys alike
    kw = {} if backend == "reference" else {"num_splits": 2}
    return jax_muse_attn.verify_attention(q, kv, bt, sl, scale=0.125, window=window,
                                          num_reqs=nr, backend=backend, **kw)


def _assert_same(out, loop, cases_oracle):
    out = np.asarray(out)
    assert out.shape == np.asarray(loop).shape and out.dtype == jnp.bfloat16
    for b, want in enumerate(cases_oracle):
        assert_close(out[b], want, what=f"element {b}")
    if jax.default_backend() == "cpu":  # on a GPU the folded call may take another launch plan
        np.testing.assert_array_equal(bits(out), bits(loop))


NUM_REQS = {
    "none": None,
    "int": 3,
    "traced": "traced",  # one traced count for every element
    "batched": "batched",  # a traced count an element
}


@pytest.mark.parametrize("mode", list(NUM_REQS))
@pytest.mark.parametrize("window", [None, 16])
def test_vmap_matches_a_loop(backend, rng, mode, window):
    """Every argument batched: B caches with shuffled ids, stale and out-of-range ids in live
    pages (folded, an id invalid for its own cache must not reach another element's blocks),
    poisoned unread slots; num_reqs None, an int, traced, or traced per element."""
    per = {"none": (R, R, R), "int": (3, 3, 3), "traced": (2, 2, 2), "batched": (0, 4, 1)}[mode]
    cases, q, kv, bt, sl = _batch(rng, window=window, num_reqs=per)
    run = functools.partial(_run, backend, window)
    loop = jnp.stack([run(q[b], kv[b], bt[b], sl[b], None if mode == "none" else per[b])
                      for b in range(B)])
    want = [c.oracle() for c in cases]
    if mode in ("none", "int"):
        n = None if mode == "none" else 3
        out = jax.vmap(lambda q, kv, bt, sl: run(q, kv, bt, sl, n))(q, kv, bt, sl)
    elif mode == "traced":
        out = jax.jit(jax.vmap(run, in_axes=(0, 0, 0, 0, None)))(q, kv, bt, sl, jnp.int32(2))
    else:
        out = jax.vmap(run)(q, kv, bt, sl, jnp.array(per, jnp.int32))
    _assert_same(out, loop, want)
    for b, n in enumerate(per):
        assert not np.asarray(out[b]).astype(np.float32)[8 * n:].any()


# which of (q, kv_cache, block_table, seq_lens, num_reqs) carry the batch axis
AXES = {
    "q": (0, None, None, None, None),
    "kv_cache": (None, 0, None, None, None),
    "tables": (None, None, 0, 0, None),
    "num_reqs": (None, None, None, None, 0),
    "q_kv": (0, 0, None, None, None),
    "all_but_kv": (0, None, 0, 0, 0),
}


@pytest.mark.parametrize("axes", list(AXES))
def test_vmap_broadcasts_unbatched_arguments(backend, rng, axes):
    """Unbatched arguments are shared by every element, as in a loop that passes them each time
    (a shared cache is read through each element's own table, unoffset)."""
    in_axes = AXES[axes]
    # Poison only where each element's cache is read through its own table: a cache read
    # through another element's table would read that table's live slots, poisoned or not.
    own_tables = in_axes[1] == 0 and in_axes[2] == 0
    cases, q, kv, bt, sl = _batch(rng, bad_live=0.2, poison=own_tables)
    nr = jnp.array([4, 1, 3], jnp.int32)
    full = (q, kv, bt, sl, nr)
    args = [x if a == 0 else x[0] for x, a in zip(full, in_axes)]
    run = functools.partial(_run, backend, None)
    out = jax.vmap(run, in_axes=in_axes)(*args)
    pick = lambda x, a, b: x[b] if a == 0 else x  # noqa: E731
    loop = jnp.stack([run(*(pick(x, a, b) for x, a in zip(args, in_axes))) for b in range(B)])
    assert out.shape == (B,) + q.shape[1:]
    assert_close(out[0], np.asarray(loop[0]).astype(np.float64), what="element 0 vs loop")
    if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(bits(out), bits(loop))
    else:
        for b in range(B):
            assert_close(out[b], np.asarray(loop[b]).astype(np.float64), what=f"element {b}")


def test_vmap_nested_other_axes_and_jit(backend, rng):
    """vmap of vmap (the inner fold is folded again), the batch on axis 1 of q, vmap of a jitted
    call and jit of vmap, a 2-D q: all equal the loop."""
    cases, q, kv, bt, sl = _batch(rng, window=16, q2d=True)
    run = functools.partial(_run, backend, 16)
    nr = jnp.array([4, 2, 0], jnp.int32)
    loop = jnp.stack([run(q[b], kv[b], bt[b], sl[b], nr[b]) for b in range(B)])
    want = [c.oracle(num_reqs=int(n)) for c, n in zip(cases, nr)]

    nested = jax.vmap(jax.vmap(run))(*(x[None] for x in (q, kv, bt, sl, nr)))[0]
    _assert_same(nested, loop, want)
    swapped = jax.vmap(run, in_axes=(1, 0, 0, 0, 0))(jnp.swapaxes(q, 0, 1), kv, bt, sl, nr)
    _assert_same(swapped, loop, want)
    _assert_same(jax.vmap(jax.jit(run))(q, kv, bt, sl, nr), loop, want)
    _assert_same(jax.jit(jax.vmap(run))(q, kv, bt, sl, nr), loop, want)


def test_reference_module_vmaps(rng):
    """jax_muse_attn.reference.verify_attention is plain jnp: jax.vmap batches it directly."""
    cases, q, kv, bt, sl = _batch(rng, window=16, num_reqs=(4, 1, 2))
    nr = jnp.array([4, 1, 2], jnp.int32)
    f = lambda q, kv, bt, sl, n: reference.verify_attention(q, kv, bt, sl, scale=0.125,  # noqa: E731
                                                           window=16, num_reqs=n)
    out = jax.vmap(f)(q, kv, bt, sl, nr)
    for b, c in enumerate(cases):
        assert_close(out[b], c.oracle(), q_shape=c.q.shape, what=f"element {b}")


def test_vmap_refuses_caches_past_int32_block_ids():
    """A batched cache folds into one of B x num_blocks blocks: past int32 ids it is refused at
    trace time, naming kv_cache and the sizes (abstract shapes: nothing is allocated)."""
    nb = 2**30 + 1
    q = jax.ShapeDtypeStruct((2, 8, 2, 64), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((2, nb, 1, 16, 128), jnp.bfloat16)
    bt = jax.ShapeDtypeStruct((2, 1, 1), jnp.int32)
    sl = jax.ShapeDtypeStruct((2, 1), jnp.int32)
    for backend in ("reference", "ffi"):
        f = jax.vmap(functools.partial(jax_muse_attn.verify_attention, scale=0.125, backend=backend))
        with pytest.raises(ValueError, match=r"kv_cache.*2147483647.*got a batch of 2 caches"):
            jax.eval_shape(f, q, kv, bt, sl)


# ---------------------------------------------------------------------------------------------
# FP8 caches under the transformations: the scales batch with their cache, derivatives refused.

FP8_FORMATS = [("float8_e4m3fn", "tensor"), ("float8_e4m3fn", "token"),
               ("float8_e4m3fnuz", "tensor"), ("float8_e4m3fnuz", "token")]
FP8_IDS = [f"{d[7:]}-{k}" for d, k in FP8_FORMATS]


def _batch_fp8(rng, kv_dtype, scale_kind, *, window=None, num_reqs=(R, R, R), poison=True):
    """B FP8 problems of the same shapes, each with its own cache, scales, table and garbage."""
    cases = [make_case(rng, R, list(rng.integers(0, PAGE * P + 1, size=R)), P=P, window=window,
                       num_reqs=n, extra_rows=1, bad_live=0.3, poison=poison, kv_dtype=kv_dtype,
                       scale_kind=scale_kind)
             for n in num_reqs]
    stack = lambda name: jnp.stack([getattr(c, name) for c in cases])  # noqa: E731
    return cases, tuple(stack(n) for n in ("q", "kv", "bt", "sl", "k_scale", "v_scale"))


def _run_fp8(backend, window, q, kv, bt, sl, nr, ks, vs):
    kw = {} if backend == "reference" else {"num_splits": 2}
    return jax_muse_attn.verify_attention(q, kv, bt, sl, scale=0.125, window=window, num_reqs=nr,
                                          backend=backend, k_scale=ks, v_scale=vs, **kw)


@pytest.mark.parametrize("fmt", FP8_FORMATS, ids=FP8_IDS)
def test_vmap_fp8_matches_a_loop(backend, rng, fmt):
    """Every argument batched, scales too (per-tensor scales batched with their caches become
    per-token ones): one call equal to the loop and to each element's oracle; a vmap of a vmap
    folds again."""
    per = (4, 1, 3)
    cases, (q, kv, bt, sl, ks, vs) = _batch_fp8(rng, *fmt, window=16, num_reqs=per)
    nr = jnp.array(per, jnp.int32)
    run = functools.partial(_run_fp8, backend, 16)
    loop = jnp.stack([run(q[b], kv[b], bt[b], sl[b], nr[b], ks[b], vs[b]) for b in range(B)])
    want = [c.oracle() for c in cases]
    _assert_same(jax.vmap(run)(q, kv, bt, sl, nr, ks, vs), loop, want)
    _assert_same(jax.jit(jax.vmap(run))(q, kv, bt, sl, nr, ks, vs), loop, want)
    nested = jax.vmap(jax.vmap(run))(*(x[None] for x in (q, kv, bt, sl, nr, ks, vs)))[0]
    _assert_same(nested, loop, want)


# which of (q, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale) carry the batch axis
FP8_AXES = {
    "scales_shared": (0, 0, 0, 0, 0, None, None),  # one set of scales for B caches
    "cache_shared": (0, None, 0, 0, 0, 0, 0),  # B sets of scales of one cache: B caches folded
    "cache_and_scales_shared": (0, None, 0, 0, 0, None, None),
    "k_scale_only": (0, 0, 0, 0, 0, 0, None),
    "tables_only": (None, None, 0, 0, None, None, None),
}


@pytest.mark.parametrize("scale_kind", ["tensor", "token"])
@pytest.mark.parametrize("axes", list(FP8_AXES))
def test_vmap_fp8_broadcasts_unbatched_arguments(backend, rng, scale_kind, axes):
    """Unbatched arguments, scales among them, are shared by every element, as in a loop that
    passes them each time (no poison: an element reads another's cache or scales at its own
    slots)."""
    in_axes = FP8_AXES[axes]
    cases, (q, kv, bt, sl, ks, vs) = _batch_fp8(rng, "float8_e4m3fn", scale_kind, poison=False)
    full = (q, kv, bt, sl, jnp.array([4, 1, 3], jnp.int32), ks, vs)
    args = [x if a == 0 else x[0] for x, a in zip(full, in_axes)]
    run = functools.partial(_run_fp8, backend, None)
    out = jax.vmap(run, in_axes=in_axes)(*args)
    pick = lambda x, a, b: x[b] if a == 0 else x  # noqa: E731
    loop = jnp.stack([run(*(pick(x, a, b) for x, a in zip(args, in_axes))) for b in range(B)])
    assert out.shape == (B,) + q.shape[1:]
    for b in range(B):
        assert_close(out[b], np.asarray(loop[b]).astype(np.float64), what=f"element {b}")
    if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(bits(out), bits(loop))


@pytest.mark.parametrize("scale_kind", ["tensor", "token"])
@pytest.mark.parametrize("wrt", ["q", "k_scale", "v_scale", "q_jvp"])
def test_fp8_derivatives_are_refused(backend, rng, scale_kind, wrt):
    c = make_case(rng, R, [100, 9, 0, 191], P=P, kv_dtype="float8_e4m3fn", scale_kind=scale_kind)

    def loss(q, ks, vs):
        out = jax_muse_attn.verify_attention(q, c.kv, c.bt, c.sl, scale=0.125, backend=backend,
                                             k_scale=ks, v_scale=vs)
        return jnp.sum(out.astype(jnp.float32))

    args = (c.q, c.k_scale, c.v_scale)
    with pytest.raises(NotImplementedError, match="inference kernel") as e:
        if wrt == "q_jvp":
            jax.jvp(loss, args, tuple(jnp.ones_like(a) for a in args))
        else:
            jax.grad(loss, argnums=("q", "k_scale", "v_scale").index(wrt))(*args)
    assert "jax_muse_attn.reference.verify_attention" in str(e.value)
    # a call whose inputs carry no tangent runs inside a derivative
    g = jax.grad(lambda x: x * loss(*(jax.lax.stop_gradient(a) for a in args)))(jnp.float32(2.0))
    np.testing.assert_allclose(g, loss(*args), rtol=1e-6)


@pytest.mark.parametrize("scale_kind", ["tensor", "token"])
def test_reference_fp8_gradient(rng, scale_kind):
    """The reference module with an FP8 cache is differentiable in q and the scales: finite
    through poisoned unread bytes and scales, exactly zero at every scale that is not read, and
    along one direction equal to central differences of the float64 oracle (whose K and V are
    not rounded to bf16: the reference's rounding is differentiated as the identity)."""
    import oracle

    c = make_case(rng, 3, [40, 3, 70], P=6, Hq=4, Hkv=2, NQ=4, window=16, num_reqs=2,
                  bad_live=0.2, scale=0.3, kv_dtype="float8_e4m3fn", scale_kind=scale_kind)
    w = rng.standard_normal(c.q.shape).astype(np.float32)

    def loss(q, ks, vs):
        out = reference.verify_attention(q, c.kv, c.bt, c.sl, scale=0.3, window=16, num_reqs=2,
                                         tokens_per_request=4, k_scale=ks, v_scale=vs)
        return jnp.sum(out.astype(jnp.float32) * w)

    g = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(c.q, c.k_scale, c.v_scale)
    for x in g:
        assert np.isfinite(np.asarray(x).astype(np.float32)).all()
        assert np.abs(np.asarray(x).astype(np.float32)).max() > 0.01
    ks0, vs0 = (np.where(np.isfinite(s), s, 0.0).astype(np.float64) for s in (c.k_scale_np, c.v_scale_np))
    dirs = [rng.standard_normal(c.q.shape), rng.standard_normal(ks0.shape) * ks0,
            rng.standard_normal(vs0.shape) * vs0]
    if scale_kind == "token":
        unread = ~np.broadcast_to(c.readable[:, None, :], ks0.shape)
        assert not np.asarray(g[1])[unread].any() and not np.asarray(g[2])[unread].any()
        for d in dirs[1:]:
            d[unread] = 0.0  # a step there would move NaN scales
    f = lambda q, ks, vs: np.sum(w * oracle.verify_attention(  # noqa: E731
        q, c.kv_np, c.bt_np, c.sl_np, scale=0.3, window=16, num_reqs=2, tokens_per_request=4,
        k_scale=np.where(np.isfinite(c.k_scale_np), ks, c.k_scale_np),
        v_scale=np.where(np.isfinite(c.v_scale_np), vs, c.v_scale_np)))
    x0 = (c.q_np.astype(np.float64), ks0, vs0)
    eps = 1e-4
    for i, d in enumerate(dirs):
        plus = [x + eps * d if j == i else x for j, x in enumerate(x0)]
        minus = [x - eps * d if j == i else x for j, x in enumerate(x0)]
        fd = (f(*plus) - f(*minus)) / (2 * eps)
        got = np.sum(np.asarray(g[i]).astype(np.float64) * d)
        np.testing.assert_allclose(got, fd, rtol=3e-2, atol=3e-2, err_msg=f"argument {i}")
