"""The custom call: handler registration at import and the ffi_call that invokes it."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

TARGET_NAME = "jax_muse_attn_verify_attention"
# The same computation with the draft operands (ragged drafts, trees) and an lse result
# (ffi/muse_attn/problem.h, bind_verify_attention_drafts); the chain call keeps TARGET_NAME.
DRAFTS_TARGET_NAME = "jax_muse_attn_verify_attention_drafts"
# The device clock (ffi/gpu/device_clock_gpu.cc, ffi/cpu/device_clock_cpu.cc), registered here;
# its helpers are the benchmark's (benchmarks/device_clock.py).
CLOCK_TARGET_NAME = "jax_muse_attn_device_clock"

# XLA platform name (as registered) -> handler capsule; empty when the extension is missing.
REGISTERED: dict[str, object] = {}
CLOCK_REGISTERED: dict[str, object] = {}  # the same for the device clock
DRAFTS_REGISTERED: dict[str, object] = {}  # the same for the drafts target
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
    for platform, capsule in _muse_attn.drafts_registrations().items():
        jax.ffi.register_ffi_target(DRAFTS_TARGET_NAME, capsule, platform=platform)
        DRAFTS_REGISTERED[platform] = capsule
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


def has_drafts_handler(platform: str) -> bool:
    """Whether this build's handler for platform takes draft operands and returns lse."""
    return platform in DRAFTS_REGISTERED


@functools.lru_cache(maxsize=None)
def _gpu_device(ordinal: int) -> tuple:
    if _MODULE is None or not hasattr(_MODULE, "gpu_device"):
        raise RuntimeError("jax_muse_attn: this build has no GPU handler to describe the device "
                           f"(handlers: {sorted(REGISTERED)})")
    return tuple(sorted(_MODULE.gpu_device(ordinal).items()))


def device_description(platform: str) -> dict:
    """What the launch plan needs of JAX's default device (ffi/gpu/launch_plan.h Device): vendor,
    multiprocessors, compute_major, warp_size, merge_can_wait, has_two_pairs, amd_gfx (AMD's gfx
    target number, 942 or 950, which picks the row of the AMD plan's table; 0 elsewhere)."""
    if platform == "cpu":
        return dict(vendor="cpu", multiprocessors=0, compute_major=0, warp_size=1,
                    merge_can_wait=False, has_two_pairs=False, amd_gfx=0)
    device = jax.devices()[0]
    ordinal = getattr(device, "local_hardware_id", None)
    return dict(_gpu_device(int(ordinal if ordinal is not None else device.id)))


def launch_plan(shapes, platform: str, num_splits: int, overrides: str, device: dict | None = None) -> dict:
    """The launch plan (ffi/gpu/launch_plan.h) of a call of these static shapes: on JAX's default
    device, or on `device` (a device_description()-like dict). num_splits 0: the default count.
    ValueError for overrides or sizes that cannot apply."""
    if _MODULE is None:
        raise RuntimeError(f"jax_muse_attn: the extension is missing ({IMPORT_ERROR})")
    d = device if device is not None else device_description(platform)
    return dict(_MODULE.launch_plan(
        shapes.head_dim, shapes.tokens, shapes.num_q_heads, shapes.num_kv_heads,
        shapes.num_requests, shapes.pages, shapes.window, d["vendor"], d["multiprocessors"],
        d["compute_major"], d["warp_size"], d["merge_can_wait"], d["has_two_pairs"],
        int(num_splits), overrides, shapes.kv_dtype != "bfloat16",
        getattr(shapes, "drafts", "chain") != "chain",  # lse alone keeps the chain's kernels
        int(d.get("amd_gfx", 0))))


# The launch plan's split kernels in the handlers' numbering (gpu::SplitKernel).
SPLIT_KERNELS = ("per_tile", "two_tile", "fill_ring", "pingpong", "pingpong_two_pairs",
                 "per_tile_cached")


# The cache formats in the handlers' numbering (muse_attn::KvFormat), by dtype name.
KV_FORMATS = {"bfloat16": 0, "float8_e4m3fn": 1, "float8_e4m3fnuz": 2}
SCALE_KINDS = {"none": 0, "tensor": 1, "token": 2}


DRAFT_KINDS = {"chain": 0, "ragged": 1, "tree": 2}  # muse_attn::DraftKind


def call(q3, kv_cache, block_table, seq_lens, num_reqs, *, shapes, scale: float, plan: dict,
         num_reqs_static: int = -1, k_scale=None, v_scale=None, draft_lens=None, tree_mask=None,
         draft_depths=None):
    """One custom call; q3 is [NQ*R, Hq, D]. Returns the bf16 output of q3's shape, and with
    shapes.lse the fp32 lse [NQ*R, Hq] too: (out, lse).
    plan: launch_plan()'s dict. num_reqs_static: the value of num_reqs when known at trace time
    (in [0, R]; the kernels then do not read the num_reqs operand), or -1.
    draft_lens / tree_mask / draft_depths: as shapes.drafts says ("ragged": draft_lens; "tree":
    those given, None for a default). A chain call without lse runs TARGET_NAME, anything else
    DRAFTS_TARGET_NAME; an operand the call does not read, or a tree's default, is an empty
    array (no kernel fills it)."""
    s = shapes
    splits = plan["num_splits"]
    drafts = s.drafts != "chain" or s.lse
    out_types = (
        jax.ShapeDtypeStruct(q3.shape, jnp.bfloat16),
        *((jax.ShapeDtypeStruct((q3.shape[0] if s.lse else 0, q3.shape[1]), jnp.float32),)
          if drafts else ()),  # lse
        jax.ShapeDtypeStruct((s.groups, splits, s.rows, s.head_dim), jnp.bfloat16),  # partial o
        jax.ShapeDtypeStruct((s.groups, splits, s.rows, 2), jnp.float32),  # partial (m, l)
    )
    if k_scale is None:  # a bf16 cache: two unused scalars
        k_scale = v_scale = jnp.zeros((), jnp.float32)
        kind = "none"
    else:
        kind = "tensor" if k_scale.ndim == 0 else "token"
    operands = (q3, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale)
    extra = {}
    if drafts:
        if draft_lens is None:
            draft_lens = jnp.zeros((0,), jnp.int32)
        if tree_mask is None:
            tree_mask = jnp.zeros((0, s.tokens), jnp.uint32)
        if draft_depths is None:
            draft_depths = jnp.zeros((0, s.tokens), jnp.int32)
        operands += (draft_lens, tree_mask, draft_depths)
        extra = dict(draft_kind=np.int32(DRAFT_KINDS[s.drafts]), return_lse=np.int32(s.lse))
    results = jax.ffi.ffi_call(DRAFTS_TARGET_NAME if drafts else TARGET_NAME, out_types,
                               vmap_method="sequential")(
        *operands,
        scale=np.float32(scale),
        window=np.int32(s.window),
        tokens_per_request=np.int32(s.tokens),
        num_splits=np.int32(splits),
        num_reqs_static=np.int32(num_reqs_static),
        split_kernel=np.int32(SPLIT_KERNELS.index(plan["split_kernel"])),
        merge_warps=np.int32(plan["merge_warps"]),
        merge_pdl=np.int32(plan["merge_pdl"]),
        merge_by_lane=np.int32(plan["merge_by_lane"]),
        balance_segments=np.int32(plan["balance_segments"]),
        kv_format=np.int32(KV_FORMATS[str(jnp.dtype(kv_cache.dtype))]),
        scale_kind=np.int32(SCALE_KINDS[kind]),
        **extra,
    )
    if s.lse:
        return results[0], results[1]
    return results[0]
