"""The benchmarks' device clock (jax_muse_attn._ffi.device_clock, a custom call of this package):
on this platform's handler (the host's steady clock on the CPU, the GPU's clock on a GPU), two
reads inside one jit around a chain of work must bracket that work: the first read is ordered
before the chain (order_after), the second after it. Checked against the wall clock and by
scaling: a chain of 16 steps takes clearly longer than a chain of 1. (The CPU runtime keeps
program order even without order_after; a GPU command buffer, a dependency graph, does not.)"""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_muse_attn import _ffi

pytestmark = pytest.mark.skipif(_ffi.current_platform() not in _ffi.CLOCK_REGISTERED,
                                reason="no device-clock handler for this platform")

N = 384 if jax.default_backend() == "cpu" else 4096


def _clocked(steps):
    @jax.jit
    def f(x):
        t0 = _ffi.device_clock(x)
        x = _ffi.order_after(x, t0)
        for _ in range(steps):
            x = jnp.tanh(x @ x) * 0.5
        return t0, _ffi.device_clock(x), x
    return f


def _device_s(f, x):
    t0, t1, _ = f(x)
    return (_ffi.clock_ns(t1) - _ffi.clock_ns(t0)) * 1e-9


def test_clock_reads_bracket_the_chain():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((N, N)), jnp.float32) / N
    f1, f16 = _clocked(1), _clocked(16)
    for f in (f1, f16):  # compile and warm
        jax.block_until_ready(f(x))
    d1 = min(_device_s(f1, x) for _ in range(5))
    d16 = min(_device_s(f16, x) for _ in range(5))
    t = time.perf_counter()
    jax.block_until_ready(f16(x))
    wall16 = time.perf_counter() - t
    assert 0 < d1 < d16, (d1, d16)
    # A first read run late (after the chain) would give ~0 for both; ordered right, 16 steps
    # take several times what 1 does.
    assert d16 > 4 * d1, (d1, d16)
    assert d16 <= wall16 * 1.05 + 1e-4, (d16, wall16)  # the device time fits in the wall time


def test_clock_is_monotonic_across_calls():
    x = jnp.ones((8,), jnp.float32)
    f = jax.jit(_ffi.device_clock)
    a = _ffi.clock_ns(f(x))
    b = _ffi.clock_ns(f(x + 1))
    assert 0 < a <= b


def test_clock_ns_joins_the_words():
    assert _ffi.clock_ns(np.array([5, 2], np.uint32)) == (2 << 32) + 5
