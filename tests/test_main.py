"""The main job (python -m jax_muse_attn): its options are validated by argparse, its check
compares against its own float64 computation (so it can fail for either backend), and it exits
0 / 1 / 2 for pass / fail / bad option."""

import os
import subprocess
import sys

import numpy as np
import pytest

import oracle
from jax_muse_attn import __main__ as main_job

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL = ["--requests", "2", "--context", "100", "--window", "40", "--repeats", "1"]


def _run(*args):
    # from the tests folder, so that the installed package (not the source tree) is imported
    return subprocess.run([sys.executable, "-m", "jax_muse_attn", *args], cwd=HERE,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("backend", ["auto", "reference", "ffi"])
def test_passes_and_says_what_it_ran(backend):
    p = _run(*SMALL, "--backend", backend)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[-1] == "PASS" and len(lines) <= 6, p.stdout
    assert f"backend={backend} -> " in lines[0] and "float64" in p.stdout
    assert sum(" OK" in ln and "max|err|" in ln and "us/call" in ln for ln in lines) == 2


@pytest.mark.parametrize("backend,scales", [("ffi", "tensor"), ("ffi", "token"),
                                            ("reference", "token"), ("auto", None)])
def test_fp8_step_passes_and_says_what_it_ran(backend, scales):
    extra = ["--kv-scales", scales] if scales else []
    p = _run(*SMALL, "--backend", backend, "--kv-dtype", "fp8", *extra)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[-1] == "PASS", p.stdout
    assert f"kv float8_e4m3fn, per-{scales or 'tensor'} scales" in p.stdout
    assert sum(" OK" in ln and "max|err|" in ln for ln in lines) == 2


BAD = [
    (["--requests", "-1"], "--requests"),
    (["--requests", "0"], "--requests"),
    (["--requests", "x"], "--requests"),
    (["--kv-heads", "3"], "--q-heads must be a multiple of --kv-heads"),
    (["--kv-heads", "0"], "--kv-heads"),
    (["--q-heads", "0"], "--q-heads"),
    (["--repeats", "0"], "--repeats"),
    (["--context", "0"], "--context"),
    (["--context", "7"], "--context"),
    (["--context", "2000000000"], "--context"),
    (["--window", "0"], "--window"),
    (["--window", str(2**31)], "--window"),
    (["--head-dim", "96"], "--head-dim"),
    (["--seed", "-3"], "--seed"),
    (["--backend", "gpu"], "--backend"),
    (["--requests", "100000", "--context", "100000"], "host memory"),
    (["--kv-dtype", "fp16"], "--kv-dtype"),
    (["--kv-dtype", "fp8", "--kv-scales", "channel"], "--kv-scales"),
    (["--kv-scales", "token"], "--kv-scales applies to --kv-dtype fp8, got --kv-dtype bf16"),
]


def test_bad_option_output_in_a_process():
    """No traceback, one line saying what is wrong."""
    p = _run("--requests", "-1")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "argument --requests: expected an integer >= 1, got -1" in p.stderr
    p = _run("--kv-heads", "3")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "--q-heads must be a multiple of --kv-heads, got 16 and 3" in p.stderr


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_options_are_argparse_errors(args, needle, capsys):
    """Exit 2 with a usage error naming the option (argparse exits before jax is imported)."""
    with pytest.raises(SystemExit) as e:
        main_job.main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and "error:" in err, err


@pytest.mark.parametrize("kv", [[], ["--kv-dtype", "fp8", "--kv-scales", "token"]], ids=["bf16", "fp8"])
@pytest.mark.parametrize("backend", ["reference", "ffi"])
def test_check_fails_when_the_backend_is_wrong(backend, kv, monkeypatch, capsys):
    """The check is independent of both backends: a wrong kernel or a wrong reference makes the
    main job print FAIL and exit 1."""
    import jax

    from jax_muse_attn import _ffi, attention, reference

    if backend == "reference":
        real = reference._reference
        monkeypatch.setattr(reference, "_reference",
                            lambda *a, **k: (real(*a, **k).astype(np.float32) * 1.1).astype(a[0].dtype))
    else:
        real = _ffi.call
        monkeypatch.setattr(_ffi, "call", lambda q3, *a, **k: real(q3 * 1.5, *a, **k))
    attention._reference_jit.clear_cache()
    attention._ffi_jit.clear_cache()
    jax.clear_caches()
    try:
        rc = main_job.main(SMALL + ["--backend", backend] + kv)
    finally:
        attention._reference_jit.clear_cache()
        attention._ffi_jit.clear_cache()
        jax.clear_caches()
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "FAIL (" in out and out.strip().splitlines()[-1] == "FAIL"


@pytest.mark.parametrize("window", [None, 5, 40])
def test_expected_output_matches_the_oracle(window):
    """The main job's float64 check against the test suite's oracle (two independent writings)."""
    rng = np.random.default_rng(0)
    q, kv, table, lens = main_job.build_case(rng, requests=3, context=90, q_heads=4, kv_heads=2,
                                             head_dim=64)
    lens[1] = 3  # shorter than the new tokens: some rows see no key
    got = main_job.expected_output(q, kv, table, lens, scale=0.3, window=window)
    want = oracle.verify_attention(q, kv, table, lens, scale=0.3, window=window)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert not got[8:13].any() and got[13].any()


@pytest.mark.parametrize("scale_kind", ["tensor", "token"])
def test_fp8_expected_output_matches_the_oracle(scale_kind):
    """The FP8 step's float64 check (its own quantization and decoding) against the test suite's
    oracle on the same bytes and scales."""
    rng = np.random.default_rng(1)
    q, kv, table, lens = main_job.build_case(rng, requests=3, context=90, q_heads=4, kv_heads=2,
                                             head_dim=64)
    kv8, ks, vs = main_job.quantize_fp8(kv, scale_kind)
    assert np.abs(kv8.astype(np.float32)).max() == 448.0  # amax / 448: the bytes reach the max
    assert ks.shape == (() if scale_kind == "tensor" else kv.shape[:3])
    cache = main_job.dequantize_fp8(kv8, ks, vs)
    np.testing.assert_allclose(cache, kv, rtol=2.0**-4, atol=np.abs(kv).max() * 2.0**-9)
    got = main_job.expected_output(q, cache, table, lens, scale=0.3, window=40)
    want = oracle.verify_attention(q, kv8, table, lens, scale=0.3, window=40, k_scale=ks, v_scale=vs)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
