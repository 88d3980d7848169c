"""The benchmark's device clock (benchmarks/device_clock.py over the extension's clock custom call)
on this platform's handler (the host's steady clock on the CPU, the GPU's clock on a GPU): two
reads inside one jit around a chain of work must bracket that work, the first ordered before the
chain (order_after), the second after it. Checked against the wall clock and by scaling: a chain
of 16 steps takes clearly longer than a chain of 1. (The CPU runtime keeps program order even
without order_after; a GPU command buffer, a dependency graph, does not.)"""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import device_clock as dc
from jax_muse_attn import _ffi

pytestmark = pytest.mark.skipif(not dc.available(), reason="this build has no device-clock handler "
                                "for this platform: rebuild the extension for it")

N = 384 if jax.default_backend() == "cpu" else 4096


def _clocked(steps):
    @jax.jit
    def f(x):
        t0 = dc.device_clock(x)
        x = dc.order_after(x, t0)
        for _ in range(steps):
            x = jnp.tanh(x @ x) * 0.5
        return t0, dc.device_clock(x), x
    return f


def _device_s(f, x):
    t0, t1, _ = f(x)
    return (dc.clock_ns(t1) - dc.clock_ns(t0)) * 1e-9


def test_clock_reads_bracket_the_chain():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((N, N)), jnp.float32) / N
    f1, f16 = _clocked(1), _clocked(16)
    for f in (f1, f16):  # compile and warm
        jax.block_until_ready(f(x))
    d1 = min(_device_s(f1, x) for _ in range(5))
    d16 = min(_device_s(f16, x) for _ in range(5))
    assert 0 < d1 < d16, (d1, d16)
    # A first read run late (after the chain) would give ~0 for both; ordered right, 16 steps
    # take several times what 1 does.
    assert d16 > 4 * d1, (d1, d16)
    # A call's device time fits in its own wall time (the same call: another call's could be
    # longer on a busy host). Misordered reads are caught above; this catches wrong units
    # (ns_per_tick, clock_ns joining the words).
    t = time.perf_counter()
    t0, t1, _ = jax.block_until_ready(f16(x))
    wall16 = time.perf_counter() - t
    d16_call = (dc.clock_ns(t1) - dc.clock_ns(t0)) * 1e-9
    assert 0 < d16_call <= wall16 * 1.05 + 1e-4, (d16_call, wall16)


def test_clock_is_monotonic_across_calls():
    x = jnp.ones((8,), jnp.float32)
    f = jax.jit(dc.device_clock)
    a = dc.clock_ns(f(x))
    b = dc.clock_ns(f(x + 1))
    assert 0 < a <= b


def test_clock_ns_joins_the_words():
    assert dc.clock_ns(np.array([5, 2], np.uint32)) == (2 << 32) + 5


def _depends_on(jaxpr, source, target):
    """Whether `target` (a var of jaxpr) is computed from `source` (its eqns, transitively)."""
    reached = {source}
    for eqn in jaxpr.eqns:
        if any(type(v).__name__ != "Literal" and v in reached for v in eqn.invars):
            reached.update(eqn.outvars)
    return target in reached


def test_chain_starts_from_the_first_read():
    """The chain's first matmul takes its input through order_after from the first clock read (a
    data dependence, the only ordering a GPU command buffer keeps), and the second read takes the
    chain's output."""
    x = jnp.ones((8, 8), jnp.float32)
    jaxpr = jax.make_jaxpr(_clocked(3))(x).jaxpr
    inner = next(e for e in jaxpr.eqns if e.primitive.name in ("pjit", "jit")).params["jaxpr"].jaxpr
    clocks = [e for e in inner.eqns if e.primitive.name == "ffi_call"]
    dots = [e for e in inner.eqns if e.primitive.name == "dot_general"]
    assert len(clocks) == 2 and len(dots) == 3
    assert _depends_on(inner, clocks[0].outvars[0], dots[0].invars[0])
    assert _depends_on(inner, dots[-1].outvars[0], clocks[1].invars[0])


def test_two_reads_of_one_operand_stay_two():
    """The clock is side-effecting: XLA must not merge two reads of the same array into one."""
    x = jnp.ones((4,), jnp.float32)
    f = jax.jit(lambda x: (dc.device_clock(x), dc.device_clock(x)))
    assert f.lower(x).compile().as_text().count(_ffi.CLOCK_TARGET_NAME) == 2

