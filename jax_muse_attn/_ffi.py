"""The custom call: handler registration at import and the ffi_call that invokes it."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np

TARGET_NAME = "jax_muse_attn_verify_attention"
# The benchmarks' device clock (ffi/gpu/device_clock_gpu.cc, ffi/cpu/device_clock_cpu.cc).
CLOCK_TARGET_NAME = "jax_muse_attn_device_clock"

# XLA platform name (as registered) -> handler capsule; empty when the extension is missing.
REGISTERED: dict[str, object] = {}
CLOCK_REGISTERED: dict[str, object] = {}  # the same for the device clock
IMPORT_ERROR: Exception | None = None
_MODULE = None  # the nanobind module, once imported


def _register() -> None:
    global IMPORT_ERROR, _MODULE
    try:
        from jax_muse_attn import _muse_attn  # the nanobind module built from ffi/
    except ImportError as e:  # pragma: no cover - only when the package was not built
        IMPORT_ERROR = e
        return
    _MODULE = _muse_attn
    for platform, capsule in _muse_attn.registrations().items():
        jax.ffi.register_ffi_target(TARGET_NAME, capsule, platform=platform)
        REGISTERED[platform] = capsule
    for platform, capsule in _muse_attn.clock_registrations().items():
        jax.ffi.register_ffi_target(CLOCK_TARGET_NAME, capsule, platform=platform)
        CLOCK_REGISTERED[platform] = capsule


_register()


def current_platform() -> str:
    """The XLA platform name of JAX's default backend: "cpu", "CUDA", "ROCM", ..."""
    backend = jax.default_backend()
    if backend == "gpu":
        version = str(getattr(jax.devices()[0].client, "platform_version", "")).lower()
        return "ROCM" if "rocm" in version or "hip" in version else "CUDA"
    if backend in ("cuda", "rocm"):
        return backend.upper()
    return backend


def has_handler(platform: str) -> bool:
    return platform in REGISTERED


def gpu_launch_plan(shapes, num_splits: int) -> dict:
    """The GPU handler's launch plan (ffi/gpu/launch_plan.h) for a call of these static shapes on
    the current device: {"split_kernel": "per_tile" | "two_tile" | "pingpong" | "pingpong_two_pairs", "merge_warps",
    "merge_pdl", "merge_by_lane", "split_fill_ring"}. RuntimeError where this build has no GPU
    handler."""
    fn = getattr(_MODULE, "gpu_launch_plan", None)
    if fn is None:
        raise RuntimeError("jax_muse_attn: this build has no GPU launch-plan query (no GPU handler, "
                           f"or an extension built before it: rebuild; handlers: {sorted(REGISTERED)})")
    return dict(fn(shapes.head_dim, shapes.tokens, shapes.num_q_heads, shapes.num_kv_heads,
                   shapes.num_requests, shapes.pages, shapes.window, int(num_splits)))


# CMake's default (ffi/gpu/cuda.cmake), assumed for a build that does not say (Bazel's).
_DEFAULT_CUDA_ARCHITECTURES = ("90a-real", "90-virtual")


def cuda_architectures() -> tuple[str, ...]:
    """The CUDA architectures this build's kernels were compiled for, as CMake names them (e.g.
    ("90a-real", "90-virtual"), the default); () where the build has no CUDA handler; the default
    where the build does not record them."""
    if "CUDA" not in REGISTERED:
        return ()
    archs = getattr(_MODULE, "cuda_architectures", None)
    return tuple(a for a in archs.split(",") if a) if archs else _DEFAULT_CUDA_ARCHITECTURES


def sm90a_code() -> bool:
    """Whether the default device runs this build's sm_90a code (the warpgroup MMA and the
    ping-pong kernel as two pairs a CTA, which exist only there): an sm_90 GPU (H100 / H200) and
    90a among the CUDA architectures. An sm_90-only build runs the other kernels there."""
    return (current_platform() == "CUDA" and compute_capability_major() == 9
            and any(a.split("-")[0] == "90a" for a in cuda_architectures()))


def multiprocessor_count(default: int = 132) -> int:
    """SMs (NVIDIA) or CUs (AMD) of the default device, for the split count."""
    try:
        return int(getattr(jax.devices()[0], "core_count", default) or default)
    except Exception:  # pragma: no cover
        return default


# sm_90 GPUs by name, where a JAX build's device has no compute_capability attribute.
_SM90_KINDS = re.compile(r"\b(GH200|H100|H200|H800|H20)\b")


def compute_capability_major() -> int:
    """Compute capability major of the default device (NVIDIA: its compute_capability, e.g. "9.0",
    else 9 for an sm_90 GPU's name); 0 elsewhere (AMD, CPU) or when it cannot be told."""
    try:
        if current_platform() != "CUDA":
            return 0
        device = jax.devices()[0]
        cc = getattr(device, "compute_capability", None)
        if cc:
            return int(str(cc).split(".")[0])
        return 9 if _SM90_KINDS.search(str(getattr(device, "device_kind", ""))) else 0
    except Exception:  # pragma: no cover
        return 0


def device_clock(after):
    """The device's clock in ns when the computation reaches this point: a uint32[2] array (low,
    high; clock_ns() joins them on the host) read after `after` was computed (any array; not
    read). On a GPU a one-thread kernel reads the GPU's clock (NVIDIA %globaltimer, AMD
    wall_clock64), on the CPU the host's steady clock. For benchmarks: time a chain of calls on the
    device between two reads (the first read's result must feed the chain, see order_after).
    Side-effecting, so that XLA never merges two reads of the same operand into one."""
    return jax.ffi.ffi_call(CLOCK_TARGET_NAME, jax.ShapeDtypeStruct((2,), jnp.uint32),
                            has_side_effect=True)(after)


def order_after(x, clock):
    """x, made to depend on a device_clock() result, so that whatever consumes it runs after the
    clock read: an elementwise select that never takes its other branch (the clock's high word is
    far below 2^32 - 1). An optimization barrier would not do: it orders nothing on the device."""
    return jnp.where(clock[1] == jnp.uint32(0xFFFFFFFF), jnp.zeros_like(x), x)


def clocked_chain(step, n):
    """f(x, *rest) -> (t0, t1): n calls x = step(x, *rest) between two device_clock() reads, the
    first feeding the chain's input (order_after), the second following its last output. For
    timing a chain on the device (jit it; under shard_map each device reads its own clock)."""
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


def call(q3, kv_cache, block_table, seq_lens, num_reqs, *, shapes, scale: float, num_splits: int,
         num_reqs_static: int = -1):
    """One custom call; q3 is [NQ*R, Hq, D]. Returns the bf16 output of q3's shape.
    num_reqs_static: the value of num_reqs when known at trace time (in [0, R]; the kernels then do
    not read the num_reqs operand), or -1."""
    s = shapes
    out_types = (
        jax.ShapeDtypeStruct(q3.shape, jnp.bfloat16),
        jax.ShapeDtypeStruct((s.groups, num_splits, s.rows, s.head_dim), jnp.bfloat16),  # partial o
        jax.ShapeDtypeStruct((s.groups, num_splits, s.rows, 2), jnp.float32),  # partial (m, l)
    )
    out, _, _ = jax.ffi.ffi_call(TARGET_NAME, out_types, vmap_method="sequential")(
        q3, kv_cache, block_table, seq_lens, num_reqs,
        scale=np.float32(scale),
        window=np.int32(s.window),
        tokens_per_request=np.int32(s.tokens),
        num_splits=np.int32(num_splits),
        num_reqs_static=np.int32(num_reqs_static),
    )
    return out
