"""Checks the Bazel-built CPU handler library: python bazel/check_so.py PATH/_muse_attn_cpu_handlers.so

1. loads it with ctypes and finds the FFI handler symbol MuseVerifyAttentionCpu;
2. with JAX installed: registers it as the XLA FFI target "bazel_check_target" for platform "cpu"
   (jax.ffi.pycapsule, as a user without the nanobind module would) and runs it through the
   package's own jax_muse_attn._ffi.call() - the same operands and attributes as the library's
   FFI path - on a small paged-cache problem (full attention and a sliding window, a padding
   request, stale block-table entries), then compares with jax_muse_attn.reference.
Exit status 0 = all checked; 1 = a check failed. Without jax, step 2 is reported as skipped.
"""

from __future__ import annotations

import ctypes
import os
import sys
from unittest import mock

TARGET = "bazel_check_target"
SYMBOL = "MuseVerifyAttentionCpu"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_case(rng, *, R, NQ, Hkv, qpk, D, P, blocks, seq_lens, num_reqs):
    import jax.numpy as jnp
    import numpy as np

    q = rng.standard_normal((NQ * R, Hkv * qpk, D)).astype(np.float32)
    kv = rng.standard_normal((blocks, Hkv, 16, 2 * D)).astype(np.float32)
    # Shuffled block ids; entries past a request's live pages are stale garbage (out of range,
    # negative), which the handler must never follow.
    ids = rng.permutation(blocks)[: R * P].reshape(R, P).astype(np.int32)
    for r in range(R):
        live = -(-seq_lens[r] // 16) if r < num_reqs else 0
        ids[r, live:] = rng.choice([-1, blocks, blocks + 7, 2**31 - 1], size=P - live)
    return (jnp.asarray(q, jnp.bfloat16), jnp.asarray(kv, jnp.bfloat16), jnp.asarray(ids),
            jnp.asarray(np.asarray(seq_lens, np.int32)))


def run_ffi(q, kv, bt, sl, *, scale, window, num_reqs, tokens):
    """jax_muse_attn's FFI path (the CPU launch plan, then _ffi.call), aimed at TARGET."""
    import jax

    from jax_muse_attn import _ffi, _validate

    shapes = _validate.check_inputs(q, kv, bt, sl, scale=scale, window=window,
                                    tokens_per_request=tokens)
    nr = _validate.normalize_num_reqs(num_reqs, shapes.num_requests)
    plan = _ffi.launch_plan(shapes, "cpu", 0, "")
    splits = plan["num_splits"]

    def f(q, kv, bt, sl, nr):
        q3 = q.reshape(q.shape[0], shapes.num_q_heads, shapes.head_dim)
        return _ffi.call(q3, kv, bt, sl, nr, shapes=shapes, scale=scale, plan=plan)

    with mock.patch.object(_ffi, "TARGET_NAME", TARGET):
        lowered = jax.jit(f).lower(q, kv, bt, sl, nr)
    hlo = lowered.as_text()
    if TARGET not in hlo:
        raise AssertionError(f"_ffi.call did not lower to a custom call of {TARGET!r}")
    return lowered.compile()(q, kv, bt, sl, nr).reshape(q.shape), splits


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    so = os.path.abspath(sys.argv[1])
    lib = ctypes.cdll.LoadLibrary(so)
    try:
        handler = getattr(lib, SYMBOL)
    except AttributeError:
        print(f"check_so: FAIL: {so} does not export {SYMBOL}")
        return 1
    print(f"check_so: OK   ctypes loaded {so}; {SYMBOL} at {ctypes.cast(handler, ctypes.c_void_p).value:#x}")

    try:
        import jax
        import numpy as np
    except ImportError as e:
        print(f"check_so: SKIP ffi_call (jax not importable: {e})")
        return 0
    sys.path.insert(0, REPO)
    from jax_muse_attn import reference

    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(handler), platform="cpu")
    print(f"check_so: OK   registered {TARGET!r} (platform cpu) from the .so")

    rng = np.random.default_rng(20240607)
    dims = dict(R=3, NQ=8, Hkv=2, qpk=4, D=64, P=20, blocks=64)
    failures = 0
    for window in (None, 40):
        seq_lens = [300, 37, 123]  # request 2 is padding (num_reqs=2): zero rows, nothing read
        q, kv, bt, sl = make_case(rng, seq_lens=seq_lens, num_reqs=2, **dims)
        scale = 1.0 / np.sqrt(dims["D"])
        got, splits = run_ffi(q, kv, bt, sl, scale=scale, window=window, num_reqs=2, tokens=8)
        want = reference.verify_attention(q, kv, bt, sl, scale=scale, window=window, num_reqs=2,
                                          tokens_per_request=8)
        got = np.asarray(got, np.float32)
        want = np.asarray(want, np.float32)
        err = np.abs(got - want)
        bad = int((err > 1e-2 + 2e-2 * np.abs(want)).sum()) + int(np.isnan(got).sum())
        pad = got[2 * 8:]  # the padding request's rows
        ok = bad == 0 and not pad.any()
        failures += not ok
        print(f"check_so: {'OK  ' if ok else 'FAIL'} ffi_call window={window} splits={splits} "
              f"q{tuple(q.shape)} kv{tuple(kv.shape)}: max|ffi - reference| = {err.max():.3g}, "
              f"{bad} out of tolerance, padding rows zero: {not pad.any()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
