"""The device's clock inside a jit, for timing chains of calls on the device itself.

The clock is a custom call of the extension (target ``jax_muse_attn_device_clock``, registered
when ``jax_muse_attn`` is imported): a one-thread kernel that stores the GPU's nanosecond clock
(NVIDIA ``%globaltimer``, AMD ``wall_clock64``) when the stream reaches it, or the host's steady
clock on the CPU. These helpers build timed chains from it; the benchmark and
``tools/tp_gpu_check.py`` use them.
"""

from __future__ import annotations

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
