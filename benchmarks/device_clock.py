"""The device's clock inside a jit, for timing chains of calls on the device itself.

The clock is a custom call of the extension (target ``jax_muse_attn_device_clock``, registered
when ``jax_muse_attn`` is imported): a one-thread kernel that stores the GPU's nanosecond clock
(NVIDIA ``%globaltimer``, AMD ``wall_clock64``) when the stream reaches it, or the host's steady
clock on the CPU. These helpers build timed chains from it; the benchmark,
``tools/split_sweep.py`` and ``tools/tp_gpu_check.py`` use them.
"""

from __future__ import annotations

import statistics

import jax
import jax.numpy as jnp
import numpy as np

from jax_muse_attn import _ffi


def available() -> bool:
    """Whether this build has a clock handler for JAX's default platform."""
    return _ffi.current_platform() in _ffi.CLOCK_REGISTERED


def device_clock(after):
    """The clock in ns when the computation reaches this point, as uint32[2] (low, high; see
    clock_ns), read after `after` (any array; not read) was computed. Side-effecting, so XLA never
    merges two reads of the same operand."""
    return jax.ffi.ffi_call(_ffi.CLOCK_TARGET_NAME, jax.ShapeDtypeStruct((2,), jnp.uint32),
                            has_side_effect=True)(after)


def order_after(x, clock):
    """x, made to depend on a device_clock() result so that whatever consumes it runs after the
    read: a select that never takes its other branch (the high word is far below 2^32 - 1). An
    optimization barrier would not do: it orders nothing on the device, and a command buffer
    keeps data dependences only."""
    return jnp.where(clock[1] == jnp.uint32(0xFFFFFFFF), jnp.zeros_like(x), x)


def clocked_chain(step, n):
    """f(x, *rest) -> (t0, t1): n calls x = step(x, *rest) between two clock reads, the first
    feeding the chain's input, the second following its last output. Jit it; under shard_map
    each device reads its own clock."""
    def f(x, *rest):
        t0 = device_clock(x)
        x = order_after(x, t0)
        for _ in range(n):
            x = step(x, *rest)
        return t0, device_clock(x)
    return f


def clock_ns(clock) -> int:
    """The ns value of a device_clock() result, on the host."""
    lo, hi = (int(v) for v in np.asarray(clock, dtype=np.uint32))
    return (hi << 32) | lo


def paired_per_call(time_1, time_n, n, repeats, warm=2):
    """Chains of 1 and of n calls timed alternately (time_1, time_n: seconds a run), after warm
    runs of each: (the 1-call samples, the n-call samples, the per-call figures (t_n - t_1) /
    (n - 1) in us, paired by repeat)."""
    for _ in range(warm):
        time_1(), time_n()
    s1, sn = [], []
    for _ in range(repeats):
        s1.append(time_1())
        sn.append(time_n())
    return s1, sn, [(b - c) / (n - 1) * 1e6 for b, c in zip(sn, s1)]


def chain_per_call(step, n, args, repeats, warm=2):
    """A call's time on the device clock: chains of 1 and n calls x = step(x, *args[1:]) in one
    jit each (clocked_chain), paired as paired_per_call pairs them. Returns per_call_us (the
    median), n and the samples in seconds (d1_s, dN_s)."""
    g1, gn = (jax.jit(clocked_chain(step, k)) for k in (1, n))

    def span(g):
        t0, t1 = g(*args)
        return (clock_ns(t1) - clock_ns(t0)) * 1e-9

    d1s, dns, per = paired_per_call(lambda: span(g1), lambda: span(gn), n, repeats, warm)
    return dict(per_call_us=float(statistics.median(per)), n=n, d1_s=d1s, dN_s=dns)
