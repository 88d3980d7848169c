"""FP8 KV cache (README.md, Semantics: FP8 KV cache) on every backend here: the jnp reference and
this platform's FFI handler, both formats (float8_e4m3fn, float8_e4m3fnuz), both scale kinds (per
tensor, per (block, KV head, slot)).

Against the float64 oracle (tests/oracle.py dequantizes on its own, without the bf16 rounding)
on the cases of the bf16 suite, with FP8 NaN bytes and decoys in every unread slot and NaN / Inf /
decoy per-token scales wherever a scale is not read. Then the rule itself, bitwise: an FP8 call
equals the same backend's call on the bf16 cache of its dequantized values (numpy and ml_dtypes:
bf16(fp32(scale * x))), so the reference's and the handler's dequantized K and V are the rule's,
bit for bit.
"""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_muse_attn
from conftest import (BACKENDS, FP8_DTYPES, INT32_MAX, INT32_MIN, PAGE, SCALE_KINDS, assert_close,
                      bits, make_case)
from jax_muse_attn import _ffi, reference

FORMATS = [(dt, kind) for dt in FP8_DTYPES for kind in SCALE_KINDS]
FORMAT_IDS = [f"{dt[7:]}-{kind}" for dt, kind in FORMATS]


@pytest.fixture(params=FORMATS, ids=FORMAT_IDS)
def fmt(request):
    """(kv_dtype, scale_kind)"""
    return request.param


def _check_all(c, what, backends=BACKENDS, **kw):
    """Every backend on one case against one oracle computation; returns the outputs."""
    want = c.oracle(num_reqs=kw.get("num_reqs", "default"))
    outs = {}
    for backend in backends:
        outs[backend] = c.run(backend, **kw)
        assert_close(outs[backend], want, q_shape=c.q.shape, what=f"{backend} {what}")
    return outs


SHORT = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 63, 64, 65,
         127, 128, 129, 191, 192, 31, 32, 33, 47, 48, 49, 100, 111, 112, 113, 150]
LONG_P = 320
SWA_E = 8 + 2048 - 1  # the smallest seq_len whose token 0 still sees key 0 (window 2048)

# The bf16 suite's cases (tests/test_reference.py), as keyword arguments of make_case.
SCENARIOS = {
    "short_full_a": dict(R=16, seq_lens=SHORT[:16], P=12),
    "short_full_b": dict(R=16, seq_lens=SHORT[16:], P=12, q2d=True),
    "long_full": dict(R=4, seq_lens=[3000, 4097, 5000, 5120], P=LONG_P),
    "swa_2048": dict(R=16, seq_lens=[0, 5, 8, 100, 2047, SWA_E - 1, SWA_E, SWA_E + 1, SWA_E + 16,
                                     SWA_E + 17, SWA_E + 64, 3000, 4500, 5120, 2200, 1],
                     P=LONG_P, window=2048),
    "swa_1": dict(R=16, seq_lens=[6, 7, 8, 9, 10, 23, 24, 25, 71, 72, 73, 3, 8, 9, 200, 256],
                  P=16, window=1),
    "swa_100": dict(R=16, seq_lens=[105, 106, 107, 108, 109, 122, 123, 124, 170, 171, 172, 3, 8, 9,
                                    200, 256], P=16, window=100),
    "d128": dict(R=4, seq_lens=[150, 9, 64, 191], P=12, D=128),
    "d128_swa_q2d": dict(R=4, seq_lens=[150, 9, 64, 191], P=12, D=128, window=16, q2d=True),
    "heads_128_16": dict(R=2, seq_lens=[100, 37], P=8, Hq=128, Hkv=16),
    "heads_8_8": dict(R=4, seq_lens=[150, 9, 64, 191], P=12, Hq=8, Hkv=8),
    "heads_12_3": dict(R=4, seq_lens=[150, 9, 64, 191], P=12, Hq=12, Hkv=3),
    "padding": dict(R=16, seq_lens=[100, 37, 191, 5, 64, 0, 17, 150, 1, 2, 3, 4, 5, 6, 7, 8], P=12,
                    num_reqs=5, extra_rows=3),
    "padding_all": dict(R=4, seq_lens=[100, 37, 191, 5], P=12, num_reqs=0, extra_rows=2),
    "below_nq": dict(R=16, seq_lens=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 15, 16, 17, 2], P=4),
    "seq_lens_clamped": dict(R=16, seq_lens=[193, 208, 1000, INT32_MAX, -1, -8, INT32_MIN, 192,
                                             191, 5, -100, 199, 384, 0, INT32_MAX - 1, -2], P=12),
    "bad_live_ids": dict(R=16, seq_lens=[256, 200, 129, 100, 65, 64, 40, 17, 16, 9, 8, 5, 1, 0,
                                         250, 180], P=16, window=64, bad_live=0.35),
    "stale_int32_min": dict(R=16, seq_lens=[200, 256, 100, 40, 17, 16, 0, 9, 129, 150, 70, 64, 65,
                                            250, 33, 8], P=16, window=16, stale=INT32_MIN),
    "stale_num_blocks": dict(R=16, seq_lens=[200, 256, 100, 40, 17, 16, 0, 9, 129, 150, 70, 64, 65,
                                             250, 33, 8], P=16, stale=16 * 16 + 6),
    "nq_1": dict(R=16, seq_lens=[0, 1, 2, 16, 17, 63, 64, 65, 100, 150, 191, 192, 2, 33, 5, 9],
                 P=12, NQ=1),
    "nq_16_swa": dict(R=16, seq_lens=[0, 1, 15, 16, 17, 63, 64, 65, 100, 150, 191, 192, 2, 32, 5,
                                      9], P=12, NQ=16, window=16),
}


def _scenario_formats():
    """Each case in both formats and with both scale kinds: (e4m3fn, tensor) + (e4m3fnuz, token)
    or (e4m3fn, token) + (e4m3fnuz, tensor), alternately."""
    for i, name in enumerate(SCENARIOS):
        for j in ((0, 3) if i % 2 == 0 else (1, 2)):
            yield pytest.param(name, FORMATS[j], id=f"{name}-{FORMAT_IDS[j]}")


@pytest.mark.parametrize("scenario,fmt", list(_scenario_formats()))
def test_cases_against_the_oracle(rng, scenario, fmt):
    kw = dict(SCENARIOS[scenario])
    R, lens = kw.pop("R"), kw.pop("seq_lens")
    c = make_case(rng, R, lens, kv_dtype=fmt[0], scale_kind=fmt[1], **kw)
    outs = _check_all(c, scenario)
    if c.num_reqs < R:
        for backend, out in outs.items():
            assert not np.asarray(out).astype(np.float32)[c.NQ * c.num_reqs:].any(), backend


LONG_LENS = [0, 1, 7, 8, 9, 63, 64, 65, 129, 1000, 2055, 2056, 3001, 4097, 5000, 5120]


@pytest.mark.parametrize("window", [None, 2048])
def test_split_counts(rng, fmt, window):
    """The handler's segments (1 to past the tiles), the same bits on every call."""
    c = make_case(rng, 16, LONG_LENS, P=LONG_P, window=window, bad_live=0.02, kv_dtype=fmt[0],
                  scale_kind=fmt[1])
    want = c.oracle()
    for num_splits in (1, 3, 7, 24, 64, 1000):
        out = c.run("ffi", num_splits=num_splits)
        assert_close(out, want, q_shape=c.q.shape, what=f"splits {num_splits}")
        np.testing.assert_array_equal(bits(c.run("ffi", num_splits=num_splits)), bits(out))


# ---------------------------------------------------------------------------------------------
# The rule, bitwise.


def dequantized_bf16(c):
    """The bf16 cache of an FP8 case's dequantized values, by the rule in numpy and ml_dtypes:
    bf16(fp32(scale * x)), both roundings to nearest even (NaN where a byte or scale is)."""
    kv = c.kv_np.astype(np.float32)
    d = kv.shape[-1] // 2
    for part, s in ((slice(0, d), c.k_scale_np), (slice(d, None), c.v_scale_np)):
        s = np.float32(s) if s.ndim == 0 else s[..., None]
        with np.errstate(invalid="ignore", over="ignore"):
            kv[..., part] = kv[..., part] * s
    return kv.astype(ml_dtypes.bfloat16)


# The split kernels an FP8 cache has, each at a split count (the reference has none: per_tile
# stands for it, the override unread).
KERNEL_RUNS = [(b, k, n) for b in BACKENDS
               for k, n in (("per_tile", 3), ("pingpong", 1), ("pingpong", 3), ("pingpong_two_pairs", 2))
               if b != "reference" or k == "per_tile"]


@pytest.mark.parametrize("backend, kernel, splits", KERNEL_RUNS)
@pytest.mark.parametrize("window", [None, 16])
def test_equals_the_bf16_cache_of_its_dequantized_values(rng, fmt, backend, window, kernel, splits,
                                                        monkeypatch):
    """From the dequantized K and V on, the computation is the bf16 cache's: an FP8 call is
    bitwise the call on the bf16 cache the rule gives, so each backend's dequantized values are
    the rule's, bit for bit (unread slots and scales poisoned in both). Both calls run the same
    split kernel, each an FP8 cache has (the ping-pong ones where the GPU has them; elsewhere the
    plan falls back to per_tile for both): the kernels sum in different orders."""
    monkeypatch.setenv("MUSE_ATTN_LAUNCH", f"split_kernel={kernel}")
    lens = [0, 3, 8, 9, 16, 17, 63, 64, 65, 100, 127, 128, 129, 200, 255, 256, 511, 700]
    c = make_case(rng, 18, lens, P=48, window=window, bad_live=0.1, kv_dtype=fmt[0],
                  scale_kind=fmt[1])
    twin = jnp.asarray(dequantized_bf16(c))
    kw = {} if backend == "reference" else {"num_splits": splits}
    # At one split NVIDIA's bf16 ping-pong kernel writes the output itself and the FP8 one keeps
    # its partials for the merge (README, FP8 KV cache): asking for the lse ends both in the merge.
    through_merge = (kernel, splits) == ("pingpong", 1)
    fp8 = c.run(backend, return_lse=through_merge, **kw)
    bf16 = jax_muse_attn.verify_attention(c.q, twin, c.bt, c.sl, scale=c.scale, window=window,
                                          num_reqs=c.num_reqs, backend=backend,
                                          return_lse=through_merge, **kw)
    if through_merge:
        np.testing.assert_array_equal(np.asarray(fp8[1]), np.asarray(bf16[1]))
        fp8, bf16 = fp8[0], bf16[0]
    np.testing.assert_array_equal(bits(fp8), bits(bf16))
    assert_close(fp8, c.oracle(), q_shape=c.q.shape)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_key_gives_its_dequantized_value(rng, fmt, backend):
    """NQ = 1, seq_len = 1: the only key has weight 1, so the output is its V, dequantized by the
    rule (bf16 of the fp32 product), bit for bit."""
    c = make_case(rng, 2, [1, 1], P=4, NQ=1, Hq=16, Hkv=2, kv_dtype=fmt[0], scale_kind=fmt[1])
    want = dequantized_bf16(c)
    out = np.asarray(c.run(backend))
    for r in range(2):
        v = want[c.bt_np[r, 0], :, 0, 64:]  # [Hkv, D]
        np.testing.assert_array_equal(out[r].view(np.uint16), np.repeat(v, 8, axis=0).view(np.uint16))


@pytest.mark.parametrize("kv_dtype", FP8_DTYPES)
@pytest.mark.parametrize("scale", [1.0, 0.0137, 3.5e-3, 0.1, 117.25, 2.0**-20, -2.0])
def test_reference_dequantize_is_the_rule(kv_dtype, scale):
    """reference.dequantize on every byte against numpy / ml_dtypes, eager and under jit."""
    codes = np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, kv_dtype))
    want = (codes.astype(np.float32) * np.float32(scale)).astype(ml_dtypes.bfloat16)
    ok = ~np.isnan(want.astype(np.float32))
    for f in (reference.dequantize, jax.jit(reference.dequantize)):
        got = np.asarray(f(jnp.asarray(codes), jnp.float32(scale)))
        np.testing.assert_array_equal(got.view(np.uint16)[ok], want.view(np.uint16)[ok])
        assert np.isnan(got.astype(np.float32)[~ok]).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_dtype", FP8_DTYPES)
def test_per_token_scales_of_one_value_equal_per_tensor(rng, kv_dtype, backend):
    c = make_case(rng, 4, [150, 9, 64, 191], P=12, window=40, kv_dtype=kv_dtype,
                  scale_kind="tensor")
    tensor = c.run(backend)
    shape = c.kv.shape[:3]
    c.k_scale = jnp.full(shape, c.k_scale_np, jnp.float32)
    c.v_scale = jnp.full(shape, c.v_scale_np, jnp.float32)
    np.testing.assert_array_equal(bits(c.run(backend)), bits(tensor))


@pytest.mark.parametrize("backend", BACKENDS)
def test_both_formats_read_the_same_values_alike(rng, backend):
    """A cache whose values both formats hold exactly (|x| <= 240, no e4m3fn subnormal below
    fnuz's) gives the same bits in either format: the format changes the decoding, nothing else."""
    c = make_case(rng, 4, [150, 9, 64, 191], P=12, kv_dtype="float8_e4m3fnuz", scale_kind="token",
                  poison=False)
    values = c.kv_np.astype(np.float32)
    values = np.where(np.abs(values) < 2.0**-6, 0.0, values)  # e4m3fnuz's smallest normals too
    a = jnp.asarray(values.astype(ml_dtypes.float8_e4m3fnuz))
    b = jnp.asarray(values.astype(ml_dtypes.float8_e4m3fn))
    np.testing.assert_array_equal(np.asarray(a).astype(np.float32), np.asarray(b).astype(np.float32))
    c.kv = a
    fnuz = c.run(backend)
    c.kv = b
    np.testing.assert_array_equal(bits(c.run(backend)), bits(fnuz))


# ---------------------------------------------------------------------------------------------
# Scales at run time: traced, one executable, never read where nothing is read.


@pytest.mark.parametrize("backend", BACKENDS)
def test_scales_are_traced_one_executable(rng, backend):
    """Per-tensor scales are operands (no value is read on the host when the call is traced or
    launched: a GPU's command buffer can capture it): one executable for every value, each
    checked against the oracle."""
    c = make_case(rng, 4, [150, 9, 64, 191], P=12, kv_dtype="float8_e4m3fn", scale_kind="tensor")
    k0, v0 = c.k_scale_np, c.v_scale_np
    traces = []

    @jax.jit
    def f(q, kv, bt, sl, ks, vs):
        traces.append(1)
        return jax_muse_attn.verify_attention(q, kv, bt, sl, scale=c.scale, backend=backend,
                                              k_scale=ks, v_scale=vs)

    for ks, vs in ((k0, v0), (0.8 * k0, 1.25 * v0), (1.2 * k0, 0.7 * v0)):
        c.k_scale_np, c.v_scale_np = np.float32(ks), np.float32(vs)
        out = f(c.q, c.kv, c.bt, c.sl, jnp.float32(ks), jnp.float32(vs))
        assert_close(out, c.oracle(), q_shape=c.q.shape, what=f"scales {ks} {vs}")
    assert len(traces) == 1 and f._cache_size() == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_dtype", FP8_DTYPES)
def test_only_read_scales_matter(rng, kv_dtype, backend):
    """Every per-token scale that is not read replaced by NaN, +Inf or a decoy: the same bits."""
    c = make_case(rng, 16, SHORT[:16], P=12, window=16, bad_live=0.2, kv_dtype=kv_dtype,
                  scale_kind="token")
    out = c.run(backend)
    for junk in (np.nan, np.inf, 1e30):
        c.k_scale = jnp.asarray(np.where(c.readable[:, None, :], c.k_scale_np, junk), jnp.float32)
        c.v_scale = jnp.asarray(np.where(c.readable[:, None, :], c.v_scale_np, -junk), jnp.float32)
        np.testing.assert_array_equal(bits(c.run(backend)), bits(out), err_msg=f"junk {junk}")


def test_launch_plan_of_an_fp8_cache(rng):
    """launch_plan / default_num_splits take an FP8 cache: on this machine's device the bf16
    cache's plan where that one runs per_tile (a short request: no ping-pong); a call with
    num_splits=None uses that count."""
    c = make_case(rng, 3, [700, 64, 7], P=48, kv_dtype="float8_e4m3fn", scale_kind="token")
    bf16 = jnp.zeros(c.kv.shape, jnp.bfloat16)
    want = jax_muse_attn.launch_plan(c.q, bf16, c.bt)
    if want["split_kernel"] != "per_tile":
        want = dict(want, split_kernel="per_tile")  # two_tile / fill_ring are bf16's alone
    for dtype in FP8_DTYPES:
        kv = jax.ShapeDtypeStruct(c.kv.shape, jnp.dtype(dtype))
        assert jax_muse_attn.launch_plan(c.q, kv, c.bt) == want
    n = jax_muse_attn.default_num_splits(c.q, c.kv, c.bt)
    np.testing.assert_array_equal(bits(c.run("ffi")), bits(c.run("ffi", num_splits=n)))


# ---------------------------------------------------------------------------------------------
# The CPU handler's threads: the same bits on any thread count (tests/test_cpu_ffi.py, bf16).

_RUN_AT_THREAD_COUNT = """
import sys
import ml_dtypes
import numpy as np
import jax.numpy as jnp
import jax_muse_attn
a = np.load(sys.argv[1])
q = jnp.asarray(a["q"], jnp.bfloat16)
kv = jnp.asarray(a["kv"].view(getattr(ml_dtypes, str(a["dtype"]))))
ks, vs, bt, sl = (jnp.asarray(a[k]) for k in ("ks", "vs", "bt", "sl"))
outs = {}
for i, (window, splits) in enumerate(a["calls"].tolist()):
    out = jax_muse_attn.verify_attention(q, kv, bt, sl, scale=0.125, window=window or None,
                                         num_reqs=int(a["num_reqs"]), num_splits=splits or None,
                                         backend="ffi", k_scale=ks, v_scale=vs)
    outs[str(i)] = np.asarray(out).view(np.uint16)
np.savez(sys.argv[2], **outs)
"""


@pytest.mark.skipif(_ffi.current_platform() != "cpu", reason="the CPU handler's thread pool")
@pytest.mark.parametrize("kv_dtype,scale_kind", [("float8_e4m3fn", "token"),
                                                 ("float8_e4m3fnuz", "tensor")])
def test_cpu_same_bits_whatever_the_thread_count(rng, tmp_path, kv_dtype, scale_kind):
    c = make_case(rng, 8, [5000, 0, 70, 2055, 4097, 64, 1000, 0], P=LONG_P, num_reqs=7,
                  bad_live=0.02, kv_dtype=kv_dtype, scale_kind=scale_kind)
    calls = [(0, 0), (2048, 0), (100, 5)]  # (window, num_splits); 0: None
    want = [bits(jax_muse_attn.verify_attention(
        c.q, c.kv, c.bt, c.sl, scale=0.125, window=w or None, num_reqs=c.num_reqs,
        num_splits=s or None, backend="ffi", **c.scales())) for w, s in calls]
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, q=np.asarray(c.q).astype(np.float32), kv=c.kv_np.view(np.uint8),
             dtype=kv_dtype, ks=c.k_scale_np, vs=c.v_scale_np, bt=c.bt_np, sl=c.sl_np,
             num_reqs=c.num_reqs, calls=np.array(calls))
    for threads in (1, 5):
        outputs = tmp_path / f"out{threads}.npz"
        env = dict(os.environ, NPROC=str(threads), JAX_PLATFORMS="cpu")
        r = subprocess.run([sys.executable, "-c", _RUN_AT_THREAD_COUNT, str(inputs), str(outputs)],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        got = np.load(outputs)
        for i, (w, s) in enumerate(calls):
            np.testing.assert_array_equal(got[str(i)], want[i],
                                          err_msg=f"{threads} threads, window {w}, splits {s}")


# ---------------------------------------------------------------------------------------------
# The handler's own checks of the FFI contract (muse_attn/problem.h check_kv_format), for a
# custom call made without verify_attention.


def _raw_call(c, kv, ks, vs, kv_format, scale_kind):
    shapes = jax_muse_attn._validate.check_inputs(c.q, c.kv, c.bt, c.sl, scale=c.scale,
                                                  window=None, tokens_per_request=c.NQ,
                                                  **c.scales())
    plan = _ffi.launch_plan(shapes, _ffi.current_platform(), 2, "")
    out_types = (jax.ShapeDtypeStruct(c.q.shape, jnp.bfloat16),
                 jax.ShapeDtypeStruct((shapes.groups, 2, shapes.rows, shapes.head_dim), jnp.bfloat16),
                 jax.ShapeDtypeStruct((shapes.groups, 2, shapes.rows, 2), jnp.float32))
    attrs = dict(scale=np.float32(c.scale), window=np.int32(0), tokens_per_request=np.int32(c.NQ),
                 num_splits=np.int32(2), num_reqs_static=np.int32(-1),
                 split_kernel=np.int32(_ffi.SPLIT_KERNELS.index(plan["split_kernel"])),
                 merge_warps=np.int32(plan["merge_warps"]), merge_pdl=np.int32(plan["merge_pdl"]),
                 merge_by_lane=np.int32(plan["merge_by_lane"]),
                 balance_segments=np.int32(plan["balance_segments"]), kv_format=np.int32(kv_format),
                 scale_kind=np.int32(scale_kind))
    call = jax.ffi.ffi_call(_ffi.TARGET_NAME, out_types)
    return jax.block_until_ready(jax.jit(lambda *a: call(*a, **attrs)[0])(
        c.q, kv, c.bt, c.sl, jnp.int32(c.R), ks, vs))


def test_handler_refuses_a_broken_contract(rng):
    c = make_case(rng, 2, [100, 40], P=12, kv_dtype="float8_e4m3fn", scale_kind="token")
    kv8, bf16 = c.kv, c.kv.astype(jnp.bfloat16)
    tok, ten, nb = c.k_scale, jnp.float32(0.05), c.kv.shape[0]
    bad = [
        (bf16, ten, ten, 1, 1, "kv_cache's dtype does not match kv_format 1"),
        (kv8, ten, ten, 0, 0, "kv_cache's dtype does not match kv_format 0"),
        (kv8, ten, ten, 2, 1, "kv_cache's dtype does not match kv_format 2"),
        (kv8, ten, ten, 3, 1, "kv_cache's dtype does not match kv_format 3"),
        (kv8, ten, ten, 1, 0, "scale_kind 0 with kv_format 1"),
        (bf16, ten, ten, 0, 1, "scale_kind 1 with kv_format 0"),
        (kv8, ten, ten, 1, 2, r"scales \[\] for scale_kind 2"),
        (kv8, tok, tok, 1, 1, rf"scales \[{nb}, 2, 16\] for scale_kind 1"),
        (kv8, tok, tok[:, :1], 1, 2, rf"scales \[{nb}, 1, 16\] for scale_kind 2"),
    ]
    for kv, ks, vs, fmt_, kind, match in bad:
        with pytest.raises(Exception, match=match):
            _raw_call(c, kv, ks, vs, fmt_, kind)
    # the same call with a consistent contract runs
    assert_close(_raw_call(c, kv8, tok, c.v_scale, 1, 2), c.oracle(), q_shape=c.q.shape)
