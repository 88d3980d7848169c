"""Trace-time refusals (the spec's "Inputs"; README.md, Semantics): every bad static property gives a TypeError /
ValueError naming the argument, eagerly and under jit, for every backend."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_muse_attn
from conftest import assert_close, bits, make_case
from jax_muse_attn import reference as ref_mod

R, NQ, HQ, HKV, D, P, NB = 2, 8, 16, 2, 64, 4, 12


def _good():
    return dict(
        q=jnp.zeros((NQ * R, HQ, D), jnp.bfloat16),
        kv_cache=jnp.zeros((NB, HKV, 16, 2 * D), jnp.bfloat16),
        block_table=jnp.zeros((R, P), jnp.int32),
        seq_lens=jnp.full((R,), 20, jnp.int32),
    )


def _call(backend, args, **kw):
    kw.setdefault("scale", 0.125)
    if backend == "reference-module":
        kw.pop("backend", None)
        kw.pop("num_splits", None)
        return ref_mod.verify_attention(args["q"], args["kv_cache"], args["block_table"],
                                        args["seq_lens"], **kw)
    return jax_muse_attn.verify_attention(args["q"], args["kv_cache"], args["block_table"],
                                          args["seq_lens"], backend=backend, **kw)


ENTRY = ["reference", "ffi", "auto", "reference-module"]

# (id, argument overrides, keyword overrides, exception, regex naming the argument)
ARRAY_CASES = [
    ("q f32", dict(q=jnp.zeros((NQ * R, HQ, D), jnp.float32)), {}, TypeError, r"\bq\b.*float32"),
    ("q f16", dict(q=jnp.zeros((NQ * R, HQ, D), jnp.float16)), {}, TypeError, r"\bq\b.*bfloat16"),
    ("q list", dict(q=[[0.0]]), {}, TypeError, r"\bq\b"),
    ("q rank 1", dict(q=jnp.zeros((NQ * R * HQ * D,), jnp.bfloat16)), {}, ValueError, r"\bq\b.*rank"),
    ("q rank 4", dict(q=jnp.zeros((NQ * R, HQ, D, 1), jnp.bfloat16)), {}, ValueError, r"\bq\b.*rank"),
    ("q head dim", dict(q=jnp.zeros((NQ * R, HQ, 128), jnp.bfloat16)), {}, ValueError, r"q\.shape\[2\]"),
    ("q 2d not multiple of D", dict(q=jnp.zeros((NQ * R, HQ * D + 3), jnp.bfloat16)), {}, ValueError,
     r"q\.shape\[1\]"),
    ("q heads not multiple of Hkv", dict(q=jnp.zeros((NQ * R, 3, D), jnp.bfloat16)), {}, ValueError,
     r"q heads"),
    ("q 2d heads not multiple", dict(q=jnp.zeros((NQ * R, 3 * D), jnp.bfloat16)), {}, ValueError, r"q heads"),
    ("q rows not multiple of NQ", dict(q=jnp.zeros((NQ * R + 3, HQ, D), jnp.bfloat16)), {}, ValueError,
     r"q\.shape\[0\]"),
    ("q no rows", dict(q=jnp.zeros((0, HQ, D), jnp.bfloat16)), {}, ValueError, r"q\.shape\[0\]"),
    ("q rows vs NQ 4", {}, dict(tokens_per_request=3), ValueError, r"q\.shape\[0\]"),
    ("kv f32", dict(kv_cache=jnp.zeros((NB, HKV, 16, 2 * D), jnp.float32)), {}, TypeError, r"kv_cache.*float32"),
    ("kv np f16", dict(kv_cache=np.zeros((NB, HKV, 16, 2 * D), np.float16)), {}, TypeError, r"kv_cache"),
    ("kv rank 3", dict(kv_cache=jnp.zeros((NB, HKV, 16 * 2 * D), jnp.bfloat16)), {}, ValueError, r"kv_cache.*rank"),
    ("kv page 8", dict(kv_cache=jnp.zeros((NB, HKV, 8, 2 * D), jnp.bfloat16)), {}, ValueError, r"kv_cache"),
    ("kv page 32", dict(kv_cache=jnp.zeros((NB, HKV, 32, 2 * D), jnp.bfloat16)), {}, ValueError, r"kv_cache"),
    ("kv D 32", dict(kv_cache=jnp.zeros((NB, HKV, 16, 64), jnp.bfloat16),
                     q=jnp.zeros((NQ * R, HQ, 32), jnp.bfloat16)), {}, ValueError, r"kv_cache"),
    ("kv 2D odd", dict(kv_cache=jnp.zeros((NB, HKV, 16, 129), jnp.bfloat16)), {}, ValueError, r"kv_cache"),
    ("kv no blocks", dict(kv_cache=jnp.zeros((0, HKV, 16, 2 * D), jnp.bfloat16)), {}, ValueError, r"kv_cache"),
    ("kv no heads", dict(kv_cache=jnp.zeros((NB, 0, 16, 2 * D), jnp.bfloat16)), {}, ValueError, r"kv_cache"),
    ("kv D vs q D", dict(kv_cache=jnp.zeros((NB, HKV, 16, 256), jnp.bfloat16)), {}, ValueError,
     r"q\.shape\[2\]"),
    ("bt f32", dict(block_table=jnp.zeros((R, P), jnp.float32)), {}, TypeError, r"block_table.*float32"),
    ("bt np int64", dict(block_table=np.zeros((R, P), np.int64)), {}, TypeError, r"block_table.*int64"),
    ("bt uint32", dict(block_table=jnp.zeros((R, P), jnp.uint32)), {}, TypeError, r"block_table"),
    ("bt rank 1", dict(block_table=jnp.zeros((R * P,), jnp.int32)), {}, ValueError, r"block_table.*rank"),
    ("bt rank 3", dict(block_table=jnp.zeros((R, P, 1), jnp.int32)), {}, ValueError, r"block_table.*rank"),
    ("bt rows < R", dict(block_table=jnp.zeros((R - 1, P), jnp.int32)), {}, ValueError, r"block_table\.shape\[0\]"),
    ("bt no pages", dict(block_table=jnp.zeros((R, 0), jnp.int32)), {}, ValueError, r"block_table\.shape\[1\]"),
    ("sl f32", dict(seq_lens=jnp.zeros((R,), jnp.float32)), {}, TypeError, r"seq_lens.*float32"),
    ("sl np int64", dict(seq_lens=np.zeros((R,), np.int64)), {}, TypeError, r"seq_lens.*int64"),
    ("sl int16", dict(seq_lens=jnp.zeros((R,), jnp.int16)), {}, TypeError, r"seq_lens"),
    ("sl rank 0", dict(seq_lens=jnp.zeros((), jnp.int32)), {}, ValueError, r"seq_lens.*rank"),
    ("sl rank 2", dict(seq_lens=jnp.zeros((R, 1), jnp.int32)), {}, ValueError, r"seq_lens.*rank"),
    ("sl rows < R", dict(seq_lens=jnp.zeros((R - 1,), jnp.int32)), {}, ValueError, r"seq_lens\.shape\[0\]"),
]

STATIC_CASES = [
    ("num_reqs -1", dict(num_reqs=-1), ValueError, r"num_reqs.*-1"),
    ("num_reqs R+1", dict(num_reqs=R + 1), ValueError, r"num_reqs.*3"),
    ("num_reqs huge", dict(num_reqs=10**12), ValueError, r"num_reqs"),
    ("num_reqs bool", dict(num_reqs=True), TypeError, r"num_reqs"),
    ("num_reqs float", dict(num_reqs=1.0), TypeError, r"num_reqs"),
    ("num_reqs str", dict(num_reqs="1"), TypeError, r"num_reqs"),
    ("num_reqs float array", dict(num_reqs=jnp.float32(1)), TypeError, r"num_reqs"),
    ("num_reqs vector", dict(num_reqs=jnp.array([1], jnp.int32)), ValueError, r"num_reqs"),
    ("num_reqs bool array", dict(num_reqs=jnp.bool_(True)), TypeError, r"num_reqs.*bool"),
    ("num_reqs numpy bool", dict(num_reqs=np.bool_(True)), TypeError, r"num_reqs.*bool"),
    ("scale 0", dict(scale=0.0), ValueError, r"scale"),
    ("scale past float32", dict(scale=1e39), ValueError, r"scale.*float32.*1e\+39.*inf"),
    ("scale x log2e past float32", dict(scale=3e38), ValueError, r"scale.*log2"),
    ("scale numpy past float32", dict(scale=np.float64(-1e39) * -1), ValueError, r"scale.*float32"),
    ("scale under float32", dict(scale=1e-50), ValueError, r"scale.*float32.*1e-50.*0\.0"),
    ("scale negative", dict(scale=-0.1), ValueError, r"scale"),
    ("scale nan", dict(scale=float("nan")), ValueError, r"scale"),
    ("scale inf", dict(scale=float("inf")), ValueError, r"scale"),
    ("scale str", dict(scale="0.1"), TypeError, r"scale"),
    ("scale None", dict(scale=None), TypeError, r"scale"),
    ("scale bool", dict(scale=True), TypeError, r"scale"),
    ("scale array", dict(scale=jnp.float32(0.1)), TypeError, r"scale"),
    ("window 0", dict(window=0), ValueError, r"window"),
    ("window negative", dict(window=-5), ValueError, r"window"),
    ("window float", dict(window=2048.0), TypeError, r"window"),
    ("window bool", dict(window=True), TypeError, r"window"),
    ("window past int32", dict(window=2**31), ValueError, r"window.*2147483647.*2147483648"),
    ("window huge", dict(window=10**30), ValueError, r"window"),
    ("NQ 0", dict(tokens_per_request=0), ValueError, r"tokens_per_request"),
    ("NQ 17", dict(tokens_per_request=17), ValueError, r"tokens_per_request"),
    ("NQ float", dict(tokens_per_request=8.0), TypeError, r"tokens_per_request"),
]

FFI_ONLY = [
    ("backend", dict(backend="gpu"), ValueError, r"backend"),
    ("num_splits 0", dict(num_splits=0), ValueError, r"num_splits"),
    ("num_splits -2", dict(num_splits=-2), ValueError, r"num_splits"),
    ("num_splits float", dict(num_splits=1.5), ValueError, r"num_splits"),
    ("num_splits bool", dict(num_splits=True), ValueError, r"num_splits"),
]


@pytest.mark.parametrize("entry", ENTRY)
@pytest.mark.parametrize("name,over,kw,exc,match", ARRAY_CASES, ids=[c[0] for c in ARRAY_CASES])
def test_bad_arrays(entry, name, over, kw, exc, match):
    args = {**_good(), **over}
    with pytest.raises(exc, match=match):
        _call(entry, args, **kw)


@pytest.mark.parametrize("entry", ENTRY)
@pytest.mark.parametrize("name,kw,exc,match", STATIC_CASES, ids=[c[0] for c in STATIC_CASES])
def test_bad_static(entry, name, kw, exc, match):
    with pytest.raises(exc, match=match):
        _call(entry, _good(), **kw)


@pytest.mark.parametrize("name,kw,exc,match", FFI_ONLY, ids=[c[0] for c in FFI_ONLY])
def test_bad_backend_args(name, kw, exc, match):
    kw = {"backend": "ffi", **kw}
    with pytest.raises(exc, match=match):
        jax_muse_attn.verify_attention(**_good(), scale=0.125, **kw)


@pytest.mark.parametrize("entry", ["reference", "ffi"])
@pytest.mark.parametrize("name,over,kw,exc,match",
                         [c for c in ARRAY_CASES if not c[0].startswith(("q list", "kv np", "bt np", "sl np"))],
                         ids=[c[0] for c in ARRAY_CASES if not c[0].startswith(("q list", "kv np", "bt np", "sl np"))])
def test_bad_arrays_under_jit(entry, name, over, kw, exc, match):
    """The same refusals at trace time inside jax.jit (arguments are tracers)."""
    args = {**_good(), **over}
    f = jax.jit(lambda q, kv, bt, sl: jax_muse_attn.verify_attention(q, kv, bt, sl, scale=0.125,
                                                                   backend=entry, **kw))
    with pytest.raises(exc, match=match):
        f(args["q"], args["kv_cache"], args["block_table"], args["seq_lens"])


def test_messages_name_expected_and_actual():
    with pytest.raises(TypeError) as e:
        jax_muse_attn.verify_attention(**{**_good(), "q": jnp.zeros((16, 16, 64), jnp.float32)}, scale=0.1)
    assert "bfloat16" in str(e.value) and "float32" in str(e.value)
    with pytest.raises(ValueError) as e:
        jax_muse_attn.verify_attention(**{**_good(), "block_table": jnp.zeros((1, 4), jnp.int32)}, scale=0.1)
    assert ">= 2" in str(e.value) and "(1, 4)" in str(e.value)
    with pytest.raises(ValueError) as e:
        jax_muse_attn.verify_attention(**_good(), scale=0.1, num_reqs=5)
    assert "[0, 2]" in str(e.value) and "5" in str(e.value)


def test_valid_edges_are_accepted(backend):
    """The boundaries of the checks are accepted: num_reqs 0 and R, extra table rows, q 2-D,
    window 1, tokens_per_request 1 and 16, a numpy int as num_reqs."""
    g = _good()
    for kw in [dict(num_reqs=0), dict(num_reqs=R), dict(num_reqs=np.int32(1)), dict(window=1),
               dict(window=10**6)]:
        out = jax_muse_attn.verify_attention(**g, scale=0.125, backend=backend, **kw)
        assert out.shape == g["q"].shape and out.dtype == jnp.bfloat16
        assert np.isfinite(np.asarray(out).astype(np.float32)).all()
    big = dict(g, block_table=jnp.zeros((R + 5, P), jnp.int32), seq_lens=jnp.zeros((R + 5,), jnp.int32),
               q=jnp.zeros((NQ * R, HQ * D), jnp.bfloat16))
    assert jax_muse_attn.verify_attention(**big, scale=0.125, backend=backend).shape == (NQ * R, HQ * D)
    for nq in (1, 16):
        out = jax_muse_attn.verify_attention(**dict(g, q=jnp.zeros((nq * R, HQ, D), jnp.bfloat16)),
                                             scale=0.125, backend=backend, tokens_per_request=nq)
        assert out.shape == (nq * R, HQ, D)


def test_gpu_grid_limit_is_refused_at_trace_time():
    """R x KV heads above the GPU grid's y limit (65535) is a ValueError while tracing for a GPU
    platform, not a launch failure (checked with abstract shapes: nothing is allocated)."""
    from jax_muse_attn import _validate, attention

    R, Hkv, D, NQ = 65536, 1, 64, 8
    q = jax.ShapeDtypeStruct((NQ * R, Hkv, D), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((4, Hkv, 16, 2 * D), jnp.bfloat16)
    bt = jax.ShapeDtypeStruct((R, 1), jnp.int32)
    sl = jax.ShapeDtypeStruct((R,), jnp.int32)
    nr = jax.ShapeDtypeStruct((), jnp.int32)
    shapes = _validate.check_inputs(q, kv, bt, sl, scale=0.125, window=None, tokens_per_request=NQ)
    for platform in ("CUDA", "ROCM"):
        with pytest.raises(ValueError, match="65535"):
            jax.eval_shape(lambda *a: attention._ffi_kernel(*a, shapes, 0.125, 2, platform, -1, ""),
                           q, kv, bt, sl, nr)
    # the CPU handler has no such limit: the same shapes trace
    out = jax.eval_shape(lambda *a: attention._ffi_kernel(*a, shapes, 0.125, 2, "cpu", -1, ""),
                         q, kv, bt, sl, nr)
    assert out.shape == q.shape


def test_launch_plan_refuses_what_a_call_refuses():
    """jax_muse_attn.launch_plan (shapes only) refuses bad shapes and split counts as
    verify_attention does, and answers for the current device (which plan where:
    tests/test_launch_plan.py, tests/test_gpu_launch_modes.py)."""
    g = _good()
    q, kv, bt = g["q"], g["kv_cache"], g["block_table"]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="num_splits"):
            jax_muse_attn.launch_plan(q, kv, bt, num_splits=bad)
    with pytest.raises(TypeError, match="kv_cache"):
        jax_muse_attn.launch_plan(q, kv.astype(jnp.float32), bt)
    with pytest.raises(ValueError, match="window"):
        jax_muse_attn.launch_plan(q, kv, bt, window=0)
    abstract = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (q, kv, bt)]
    plan = jax_muse_attn.launch_plan(*abstract, num_splits=3)
    assert plan["num_splits"] == 3, plan
    assert plan["split_kernel"] in ("per_tile", "two_tile", "fill_ring", "pingpong",
                                    "pingpong_two_pairs", "per_tile_cached"), plan
    assert plan["merge_warps"] in (1, 2, 4, 8) and isinstance(plan["merge_pdl"], bool), plan
    assert isinstance(plan["merge_by_lane"], bool), plan
    assert isinstance(plan["balance_segments"], bool), plan
    assert set(plan) == {"num_splits", "split_kernel", "merge_warps", "merge_pdl", "merge_by_lane",
                         "balance_segments"}
    assert jax_muse_attn.launch_plan(*abstract)["num_splits"] >= 1
    if jax.default_backend() == "gpu":
        big = 65536  # R x Hkv past the GPU grid: verify_attention's message
        with pytest.raises(ValueError, match="65535"):
            jax_muse_attn.launch_plan(jax.ShapeDtypeStruct((NQ * big, HKV, D), jnp.bfloat16),
                                      jax.ShapeDtypeStruct((NB, HKV, 16, 2 * D), jnp.bfloat16),
                                      jax.ShapeDtypeStruct((big, P), jnp.int32))


def test_auto_backend_says_when_a_gpu_falls_back_to_the_reference(monkeypatch):
    """backend='auto' on a GPU whose kernel this build lacks runs the jnp reference: it warns
    (a silent fallback would cost a serving engine its speed unnoticed); 'ffi' refuses; on the
    CPU, or with the kernel there, it is silent."""
    import warnings
    from jax_muse_attn import _ffi, attention
    assert attention.resolve_backend("auto")[0] == "ffi"  # this platform's handler is built
    monkeypatch.setattr(_ffi, "IMPORT_ERROR", None)
    monkeypatch.setattr(_ffi, "current_platform", lambda: "ROCM")
    monkeypatch.setattr(_ffi, "has_handler", lambda platform: False)
    with pytest.warns(RuntimeWarning, match="no handler for platform 'ROCM'"):
        assert attention.resolve_backend("auto") == ("reference", "ROCM")
    with pytest.raises(RuntimeError, match="no handler for platform 'ROCM'"):
        attention.resolve_backend("ffi")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert attention.resolve_backend("reference") == ("reference", "ROCM")
        monkeypatch.setattr(_ffi, "current_platform", lambda: "cpu")
        assert attention.resolve_backend("auto") == ("reference", "cpu")


def _all_error_cases():
    for name, over, kw, exc, _ in ARRAY_CASES:
        yield name, over, kw, exc
    for name, kw, exc, _ in STATIC_CASES:
        yield name, {}, kw, exc
    for name, kw, exc, _ in FFI_ONLY:
        yield name, {}, {"backend": "ffi", **kw}, exc


@pytest.mark.parametrize("name,over,kw,exc", list(_all_error_cases()),
                         ids=[c[0] for c in _all_error_cases()])
def test_every_message_names_argument_expected_and_actual(name, over, kw, exc):
    """"verify_attention: <argument> must be <expected>, got <actual>" for every refusal."""
    kw = {"backend": "reference", **kw}
    with pytest.raises(exc) as e:
        _call(kw.pop("backend"), {**_good(), **over}, **kw)
    assert re.match(r"verify_attention: \S.* must be \S.*, got \S", str(e.value)), str(e.value)


def test_scale_is_checked_as_float32():
    """The kernels take scale * log2(e) as a normal float32: the ends of that range are accepted
    (and give finite rows), one float past either end is refused before anything runs."""
    from jax_muse_attn import _validate

    g = _good()
    lo, hi = _validate.SCALE_MIN, _validate.SCALE_MAX
    assert np.isfinite(np.float32(hi) * _validate.LOG2E) and 1e38 < hi < 3e38
    for ok in (lo, hi, np.float32(0.5), np.float16(0.5)):
        for backend in ("reference", "ffi"):
            out = jax_muse_attn.verify_attention(**g, scale=ok, backend=backend)
            assert not np.isnan(np.asarray(out).astype(np.float32)).any(), (ok, backend)
    for bad in (float(np.nextafter(np.float32(hi), np.float32(np.inf))), float(np.finfo(np.float32).max),
                float(np.nextafter(np.float32(lo), np.float32(0))), 1e-50):
        with pytest.raises(ValueError, match="scale"):
            jax_muse_attn.verify_attention(**g, scale=bad)


@pytest.mark.parametrize("window", [2**31 - 1, 2**31 - 9, 2**20])
def test_window_near_int32_limit_is_full_attention(backend, window):
    """A window past every key (up to int32's limit) sees what full attention sees, also for
    requests shorter than their new tokens, where position - window + 1 is near int32's lower
    limit."""
    rng = np.random.default_rng(window)
    c = make_case(rng, 4, [3, 1, 40, 64], P=P)
    c.window = window
    out = c.run(backend)
    assert_close(out, c.oracle(), q_shape=c.q.shape)
    c.window = None
    np.testing.assert_array_equal(bits(out), bits(c.run(backend)))


def test_block_table_width_past_int32_keys_is_refused():
    """16 keys a page must stay addressable in int32 with room for a window: more pages than
    MAX_PAGES are refused (abstract shapes: nothing is allocated)."""
    from jax_muse_attn import _validate

    for backend in ("reference", "ffi"):
        bt = jax.ShapeDtypeStruct((R, _validate.MAX_PAGES + 1), jnp.int32)
        g = _good()
        f = lambda q, kv, bt, sl: jax_muse_attn.verify_attention(q, kv, bt, sl, scale=0.1,  # noqa: E731
                                                                backend=backend)
        with pytest.raises(ValueError, match=r"block_table\.shape\[1\] \(pages\) must be in \[1, 67108864\]"):
            jax.eval_shape(f, g["q"], g["kv_cache"], bt, g["seq_lens"])


# (dtype, value, the count it stands for with R = 2); 64-bit dtypes under x64
NUM_REQS_DTYPES = [
    ("uint32", 2**32 - 1, R),  # a plain cast would wrap to -1: all padding
    ("uint32", 2**31, R),
    ("uint8", 255, R),
    ("uint16", 1, 1),
    ("int8", -1, 0),
    ("int8", 127, R),
    ("int16", -300, 0),
    ("int32", 1, 1),
    ("int64", 2**32 + 1, R),  # a plain cast would wrap to 1
    ("int64", -(2**40), 0),
    ("uint64", 2**63, R),
    ("int64", 1, 1),
]


@pytest.mark.parametrize("traced", [True, False], ids=["traced", "concrete"])
@pytest.mark.parametrize("dtype,value,count", NUM_REQS_DTYPES,
                         ids=[f"{d} {v}" for d, v, _ in NUM_REQS_DTYPES])
def test_num_reqs_of_any_integer_dtype_is_clamped_not_wrapped(backend, dtype, value, count, traced):
    """A num_reqs array of another integer dtype is clamped to [0, R] in its own dtype before it
    becomes int32: the output is the one of the count it stands for, bitwise."""
    c = make_case(np.random.default_rng(5), R, [100, 37], P=P, num_reqs=count)
    want = c.run(backend, num_reqs=count)
    with jax.enable_x64(dtype.endswith("64")):
        n = jnp.asarray(value, dtype)
        assert n.dtype == np.dtype(dtype) and int(n) == value
        out = jax.jit(lambda n: c.run(backend, num_reqs=n))(n) if traced else c.run(backend, num_reqs=n)
    np.testing.assert_array_equal(bits(out), bits(want))


def test_num_reqs_numpy_array_past_int32_is_clamped(backend):
    """Host data (a numpy 0-d array) is clamped before JAX could narrow it."""
    c = make_case(np.random.default_rng(6), R, [100, 37], P=P)
    want = c.run(backend, num_reqs=R)
    for value, count in ((np.array(2**32 + 1, np.int64), R), (np.array(-(2**40), np.int64), 0),
                         (np.array(2**32 - 1, np.uint32), R)):
        np.testing.assert_array_equal(bits(c.run(backend, num_reqs=value)),
                                      bits(c.run(backend, num_reqs=count)))
    np.testing.assert_array_equal(bits(c.run(backend, num_reqs=np.array(R, np.int64))), bits(want))


# ---------------------------------------------------------------------------------------------
# FP8 caches and their scales: every bad combination refused at trace time, naming the argument.

FP8 = jnp.float8_e4m3fn
KV8 = jnp.zeros((NB, HKV, 16, 2 * D), FP8)
S0 = jnp.float32(0.05)
ST = jnp.full((NB, HKV, 16), 0.05, jnp.float32)

# (id, argument overrides, keyword overrides, exception, regex)
FP8_CASES = [
    ("fp8 without scales", dict(kv_cache=KV8), {}, TypeError, r"k_scale.*float32.*float8_e4m3fn.*None"),
    ("fp8 without v_scale", dict(kv_cache=KV8), dict(k_scale=S0), TypeError, r"v_scale.*None"),
    ("fp8 without k_scale", dict(kv_cache=KV8), dict(v_scale=S0), TypeError, r"k_scale.*None"),
    ("bf16 with scales", {}, dict(k_scale=S0, v_scale=S0), TypeError,
     r"k_scale must be None with a bfloat16 kv_cache.*float32 array of shape \(\)"),
    ("bf16 with v_scale", {}, dict(v_scale=ST), TypeError, r"v_scale must be None.*\(12, 2, 16\)"),
    ("scale float64", dict(kv_cache=KV8), dict(k_scale=np.float64(0.1), v_scale=S0), TypeError,
     r"k_scale.*float32.*float64"),
    ("scale bf16", dict(kv_cache=KV8), dict(k_scale=S0, v_scale=jnp.bfloat16(0.1)), TypeError,
     r"v_scale.*float32.*bfloat16"),
    ("scale int32", dict(kv_cache=KV8), dict(k_scale=jnp.int32(1), v_scale=S0), TypeError,
     r"k_scale.*float32.*int32"),
    ("scale python float", dict(kv_cache=KV8), dict(k_scale=0.1, v_scale=S0), TypeError,
     r"k_scale must be an array, got float"),
    ("scale rank 1", dict(kv_cache=KV8), dict(k_scale=jnp.zeros((1,), jnp.float32), v_scale=S0),
     ValueError, r"k_scale must be rank 0 or rank 3, got shape \(1,\)"),
    ("scale rank 2", dict(kv_cache=KV8), dict(k_scale=ST, v_scale=ST[..., 0]), ValueError,
     r"v_scale must be rank 0 or rank 3"),
    ("scale blocks", dict(kv_cache=KV8), dict(k_scale=jnp.zeros((NB + 1, HKV, 16), jnp.float32),
                                              v_scale=ST), ValueError,
     r"k_scale must be shape \(\) per tensor or \(12, 2, 16\).*got shape \(13, 2, 16\)"),
    ("scale heads", dict(kv_cache=KV8), dict(k_scale=ST, v_scale=jnp.zeros((NB, 1, 16), jnp.float32)),
     ValueError, r"v_scale must be shape .*\(12, 2, 16\).*got shape \(12, 1, 16\)"),
    ("scale slots", dict(kv_cache=KV8), dict(k_scale=ST[..., :8], v_scale=ST[..., :8]), ValueError,
     r"k_scale must be shape .*got shape \(12, 2, 8\)"),
    ("scale kinds mixed", dict(kv_cache=KV8), dict(k_scale=S0, v_scale=ST), ValueError,
     r"k_scale and v_scale must be of one kind.*got shapes \(\) and \(12, 2, 16\)"),
    ("scale kinds mixed 2", dict(kv_cache=KV8), dict(k_scale=ST, v_scale=S0), ValueError,
     r"k_scale and v_scale must be of one kind"),
    ("kv e5m2", dict(kv_cache=KV8.astype(jnp.float8_e5m2)), dict(k_scale=S0, v_scale=S0), TypeError,
     r"kv_cache must be of dtype bfloat16 / float8_e4m3fn / float8_e4m3fnuz, got float8_e5m2"),
    ("kv e4m3b11fnuz", dict(kv_cache=KV8.astype(jnp.float8_e4m3b11fnuz)), dict(k_scale=S0, v_scale=S0),
     TypeError, r"kv_cache.*float8_e4m3b11fnuz"),
    ("kv fp8 page 8", dict(kv_cache=KV8[:, :, :8]), dict(k_scale=S0, v_scale=S0), ValueError,
     r"kv_cache"),
    ("kv fp8 D vs q D", dict(kv_cache=jnp.zeros((NB, HKV, 16, 256), FP8)),
     dict(k_scale=S0, v_scale=S0), ValueError, r"q\.shape\[2\]"),
]


@pytest.mark.parametrize("entry", ENTRY)
@pytest.mark.parametrize("name,over,kw,exc,match", FP8_CASES, ids=[c[0] for c in FP8_CASES])
def test_bad_fp8_arguments(entry, name, over, kw, exc, match):
    args = {**_good(), **over}
    with pytest.raises(exc, match=match) as e:
        _call(entry, args, **kw)
    assert re.match(r"verify_attention: \S.* must be \S.*, got \S", str(e.value)), str(e.value)


HOST_ONLY = ("scale python float", "scale float64")


@pytest.mark.parametrize("entry", ["reference", "ffi"])
@pytest.mark.parametrize("name,over,kw,exc,match", [c for c in FP8_CASES if c[0] not in HOST_ONLY],
                         ids=[c[0] for c in FP8_CASES if c[0] not in HOST_ONLY])
def test_bad_fp8_arguments_under_jit(entry, name, over, kw, exc, match):
    """The same refusals inside jax.jit, every array a tracer (host values that jit itself
    converts to float32 arrays are not errors there)."""
    args = {**_good(), **over}
    names = sorted(kw)
    f = jax.jit(lambda q, kv, bt, sl, *s: jax_muse_attn.verify_attention(
        q, kv, bt, sl, scale=0.125, backend=entry, **dict(zip(names, s))))
    with pytest.raises(exc, match=match):
        f(args["q"], args["kv_cache"], args["block_table"], args["seq_lens"], *(kw[n] for n in names))


@pytest.mark.parametrize("kv_dtype", ["float8_e4m3fn", "float8_e4m3fnuz"])
@pytest.mark.parametrize("kind", ["tensor", "token"])
def test_valid_fp8_edges_are_accepted(backend, kv_dtype, kind):
    """Both formats with both scale kinds, numpy float32 scales, zero scales, num_reqs 0."""
    g = dict(_good(), kv_cache=jnp.zeros((NB, HKV, 16, 2 * D), jnp.dtype(kv_dtype)))
    s = np.float32(0.5) if kind == "tensor" else np.zeros((NB, HKV, 16), np.float32)
    for kw in [dict(), dict(num_reqs=0), dict(window=1)]:
        out = jax_muse_attn.verify_attention(**g, scale=0.125, backend=backend, k_scale=s,
                                             v_scale=jnp.asarray(s), **kw)
        assert out.shape == g["q"].shape and out.dtype == jnp.bfloat16
        assert np.isfinite(np.asarray(out).astype(np.float32)).all()


def test_launch_plan_takes_fp8_caches_without_scales():
    g = _good()
    for dtype in (jnp.float8_e4m3fn, jnp.float8_e4m3fnuz):
        kv = jax.ShapeDtypeStruct(g["kv_cache"].shape, dtype)
        assert (jax_muse_attn.launch_plan(g["q"], kv, g["block_table"], num_splits=2)
                == dict(jax_muse_attn.launch_plan(g["q"], g["kv_cache"], g["block_table"], num_splits=2),
                        split_kernel="per_tile"))  # the FP8 cache's split kernel
        assert (jax_muse_attn.default_num_splits(g["q"], kv, g["block_table"])
                == jax_muse_attn.default_num_splits(g["q"], g["kv_cache"], g["block_table"]))
    with pytest.raises(TypeError, match="kv_cache.*float8_e5m2"):
        jax_muse_attn.launch_plan(g["q"], g["kv_cache"].astype(jnp.float8_e5m2), g["block_table"])
