"""verify_attention: the public entry point and its backend dispatch."""

from __future__ import annotations

import functools
import numbers
import os
import warnings

import jax
import jax.numpy as jnp

from jax_muse_attn import _ffi, _partitioning, _validate, reference

BACKENDS = ("auto", "ffi", "reference")

# CTAs a GPU launch aims for, per multiprocessor, when it picks the split count: what the split
# kernel's registers and shared memory let one H100/H200 SM hold (D = 64: 145 registers on
# sm_90a, 161 with mma.sync, and 73 KiB, 3; D = 128: 225 registers and 81 KiB, 2). More
# resident warps hide more latency (measured with benchmarks/kernel_bench.cu: full 128k R=16,
# 2 CTAs an SM 2357 GB/s, 3 CTAs 2729 GB/s, version 4).
_CTAS_PER_SM = {64: 3, 128: 2}
# Query rows a split CTA holds (ffi/gpu/kernels.h kMaxRows).
_ROWS_PER_CTA = 64
# Tiles a segment at least: a segment's partial state (64 rows x D, o in bf16) costs half the
# bytes of a tile of K and V to write and again to merge (the same as a tile's before version 21,
# with o in fp32; the rule below was measured then, and re-checked with bf16 at full 8k R = 1-4
# and SWA R=4, NOTES.md version 21). One tile a segment only where the call's split
# CTAs, one tile each, number at most 3/5 of the SMs (R = 1 at SWA 2048 and full 2k on an H200):
# there the split kernel's critical path is its tiles. Kernels alone on an H200 (benchmarks/
# NOTES.md version 12, graph, us): SWA 32k R=1 33 splits 4.65 vs 17: 4.90; full 2k R=1 32: 4.82
# vs 16: 5.10; but SWA R=2 (132 CTAs) 33: 5.23 vs 17: 5.15, full 8k R=1 128: 6.5 vs 64: 5.9.
# (ffi/muse_attn/geometry.h kMinTilesPerSegment is 1: the split count alone decides.)
_MIN_TILES_PER_SEGMENT = 2
_ONE_TILE_SEGMENTS_SM_FRACTION = (3, 5)
# Segments a group on the CPU handler: enough to exercise the split/merge geometry.
_CPU_SPLITS = 8
# Past one CTA an SM, more segments shorten the split kernel but lengthen the merge (it folds
# every segment of a row). They pay while the merge is cheap (up to this many segments a group)
# or while segments keep this many tiles. Measured on an H200 (benchmarks/NOTES.md version 5;
# kernels alone, best of the split counts tried): full 8k R=2 32 segments 10.4 us vs 64: 11.7
# (the rule picks 33); 8k R=4 16-33: 13.9-14.5 vs 49: 15.9; 32k R=2 66: 19.4 vs 99: 21.1. Since
# the row-warp merge (version 10) 4 tiles a segment pay where 8 did before: full 32k R=1 128
# segments 9.7 us vs 66: 11.3 (version 9's merge: 12.0 vs 12.7); the rule now picks 128 there and
# is unchanged elsewhere on the benchmark grid. Filling 2 CTAs an SM pays too, whatever the
# segments' length (version 11, kernels alone, graph): full 8k R=2 66 splits (2 tiles a segment,
# 2 CTAs an SM) 7.53 us vs 33 (4 tiles, 1 an SM): 8.11; 8k R=1 64: 6.06 vs 128: 6.93; 8k R=4
# 32: 9.54 vs 48 (3 an SM): 11.0.
_CHEAP_MERGE_SPLITS = 32
_TILES_PER_SEGMENT_PAST_ONE_WAVE = 4
# Where every SM holding _CTAS_PER_SM CTAs would cut segments of more than the first and fewer than
# the second many tiles, 2 CTAs an SM with longer segments are faster: the merge folds fewer
# segments and each CTA's prologue is paid over more tiles; shorter segments are latency-bound
# (more CTAs win), longer ones amortise the prologue anyway (3 CTAs hide more latency).
# Measured on an H200 (benchmarks/NOTES.md version 7; kernels alone, graph): full 8k R=8 16
# splits 14.8 us vs 24: 16.1; 8k R=16 8: 27.2 vs 12: 28.4; 32k R=4 33: 28.3 vs 49: 29.7; 128k R=1
# 132: 29.0 vs 198: 30.6; outside the range SWA R=16 12: 11.3 vs 9: 12.1, 128k R=4 49: 76.8
# vs 33: 77.9, 128k R=16 12: 276 vs 8: 289. The upper bound moved from 16 to 32 in version 14
# (kernels alone, graph, two rounds): full 32k R=8 16 splits (32 tiles) 42.2 us vs 24 (22
# tiles, 3 an SM): 43.9; 128k R=2 66 (32 tiles; the rule picks 64, the same segments) 42.4 vs
# 98 (21 tiles): 43.1 (through JAX, device clock: 41.0 vs 43.1 and 41.2 vs 42.9); still outside,
# 128k R=4 33 (63 tiles) 75.2 vs 49: 73.9.
# With the ping-pong split kernel (NVIDIA sm_90, D = 64; ffi/gpu/launch_plan.h launches it for
# segments of 16 tiles or more at 2 CTAs an SM) the upper bound is 128 (version 15, kernels alone,
# graph, two rounds, benchmarks/results/h200_v15_two_per_sm_kb.txt): full 128k R=4 33 splits (63
# tiles, ping-pong) 69.7 us vs 49 (42 tiles, 3 an SM): 73.6; 32k R=16 8 (64 tiles) 69.1-69.5 vs 12:
# 72.6-73.3; 64k R=8 16 69.9 vs 24: 73.9-74.0; 128k R=8 16 (128 tiles) 130.3-131.5 vs 24 (86):
# 134.3-134.4; past it, 128k R=16 8 (256 tiles) 260.4-262.7 vs 12 (171 tiles, 3 an SM): 257.3-257.5.
_TWO_PER_SM_TILES_PINGPONG = (4, 128)
# Where the launch plan runs the 2-an-SM count's segments as two ping-pong pairs a CTA
# (ffi/gpu/launch_plan.h: 32 tiles or more, one CTA an SM in one wave) the bound is 256 tiles at 3
# an SM. Kernels alone on an H200 (benchmarks/NOTES.md version 42, graph, three rounds, us): full
# 128k R=16 at 8 splits (256 tiles, two pairs) 252.05-256.74 vs 12 (171 tiles, 3 an SM, the plain
# kernel): 257.45-258.95; through JAX (version 43, device clock, three runs each) 249.08-249.38 vs
# 259.31-260.13 (benchmarks/results/h200_v43_pp2_split_count_jax_ab.txt).
_TWO_PER_SM_TILES_TWO_PAIRS_HI = 256
_TWO_PER_SM_TILES = (4, 32)
# Shorter segments too: where the count above puts more than 2 CTAs on an SM with segments of
# fewer than _TWO_PER_SM_TILES[0] tiles, 2 CTAs an SM (the merge then a programmatic dependent
# launch, ffi/gpu/launch_plan.h) are taken when the busiest SM works through no more tiles
# (CTAs an SM x tiles a segment). Kernels alone on an H200 (benchmarks/NOTES.md version 12,
# graph): SWA R=8 12 splits (3 tiles, 2 an SM) 8.27 us vs 17 (2 tiles, 3 an SM): 9.06; full 2k
# R=16 8 (4 tiles, 2 an SM) 9.55 vs 11 (3 tiles, 3 an SM): 10.74; SWA R=16 keeps 12 (9 tiles an
# SM; 6 splits, 12: 11.17 vs 10.91).


def pingpong_split_kernel(shapes: _validate.Shapes, platform: str) -> bool:
    """Whether the GPU handler can launch the ping-pong split kernel for these shapes (its rule in
    ffi/gpu/launch_plan.h: NVIDIA compute capability 9, D = 64; MUSE_ATTN_PINGPONG=0 / 1 forces
    it off / on), which makes longer segments at 2 CTAs an SM pay. platform: XLA's name
    ("CUDA", as _ffi.current_platform() gives it; any case)."""
    if platform.upper() != "CUDA" or shapes.head_dim != 64:
        return False
    forced = os.environ.get("MUSE_ATTN_PINGPONG")
    if forced in ("0", "1"):
        return forced == "1"
    return _ffi.compute_capability_major() == 9


def _runs_two_pairs(shapes: _validate.Shapes, num_splits: int) -> bool:
    """Whether the GPU handler's launch plan runs these shapes at num_splits as the ping-pong
    kernel's two pairs a CTA (asked of ffi/gpu/launch_plan.h; False where this build cannot say)."""
    try:
        return _ffi.gpu_launch_plan(shapes, num_splits)["split_kernel"] == "pingpong_two_pairs"
    except (RuntimeError, ValueError):
        return False


def _default_num_splits(shapes: _validate.Shapes, platform: str) -> int:
    """Segments a (request, KV head) group is cut into: static, from shapes and the device."""
    min_tiles = _MIN_TILES_PER_SEGMENT
    tiles = shapes.max_tiles
    if platform == "cpu":
        target = _CPU_SPLITS
        ctas_per_split = sms = two_per_sm = 0
    else:
        # One wave of CTAs: rounding down keeps every CTA resident at once; rounding up would
        # leave a few SMs with an extra CTA of the same length (a tail as long as the call).
        ctas_per_split = shapes.groups * -(-shapes.rows // _ROWS_PER_CTA)
        per_sm = _CTAS_PER_SM.get(shapes.head_dim, 2)
        sms = _ffi.multiprocessor_count()
        one_per_sm = sms // ctas_per_split
        full = per_sm * sms // ctas_per_split  # every SM holds per_sm CTAs
        pingpong = pingpong_split_kernel(shapes, platform)
        lo, hi = _TWO_PER_SM_TILES_PINGPONG if pingpong else _TWO_PER_SM_TILES
        two_per_sm = 2 * sms // ctas_per_split
        if per_sm > 2 and full > 0 and lo * full < shapes.max_tiles < hi * full:
            full = two_per_sm
        elif (per_sm > 2 and full > 0 and two_per_sm > 0 and pingpong
              and hi * full <= shapes.max_tiles < _TWO_PER_SM_TILES_TWO_PAIRS_HI * full
              and _runs_two_pairs(shapes, two_per_sm)):
            full = two_per_sm
        worth_it = max(_CHEAP_MERGE_SPLITS, two_per_sm,
                       -(-shapes.max_tiles // _TILES_PER_SEGMENT_PAST_ONE_WAVE))
        target = max(one_per_sm, min(full, worth_it))
        num, den = _ONE_TILE_SEGMENTS_SM_FRACTION
        if den * ctas_per_split * shapes.max_tiles <= num * sms:  # few CTAs: 1 tile a segment
            min_tiles = 1
    target = max(1, min(target, -(-tiles // min_tiles)))
    if tiles <= 0:
        return target

    # As many splits as the longest request has segments: a count past them only launches CTAs
    # with no tiles and may widen the merge (its warps a row follow the split count). Full 8k R=4:
    # 33 splits (32 segments of 4 tiles) 10.0 us vs 32: 9.5 (version 11, kernels alone, graph).
    def as_segments(n):
        return -(-tiles // -(-tiles // n))

    def busiest_sm_tiles(n):  # CTAs on the busiest SM x tiles a segment
        return -(-n * ctas_per_split // sms) * -(-tiles // n)

    splits = as_segments(target)
    if (two_per_sm > 0 and splits * ctas_per_split > 2 * sms
            and -(-tiles // splits) < _TWO_PER_SM_TILES[0]):
        fewer = as_segments(min(two_per_sm, target))
        if busiest_sm_tiles(fewer) <= busiest_sm_tiles(splits):
            splits = fewer
    return splits


def _static_shapes(q, kv_cache, block_table, window, tokens_per_request):
    """The checked shapes of a call from q, kv_cache and block_table alone (seq_lens follows the
    block table's rows), as verify_attention checks them."""
    table_shape = tuple(getattr(block_table, "shape", ()))  # checked below, before seq_lens
    seq_lens = jax.ShapeDtypeStruct(table_shape[:1] or (0,), jnp.int32)
    return _validate.check_inputs(q, kv_cache, block_table, seq_lens, scale=1.0, window=window,
                                  tokens_per_request=tokens_per_request)


def default_num_splits(q, kv_cache, block_table, *, window=None, tokens_per_request=8) -> int:
    """The split count ``verify_attention`` picks (``num_splits=None``) for a call of these shapes
    on the current device: segments a (request, KV head) group is cut into, static, from the
    shapes and the SM / CU count. Shapes only: arrays or ``jax.ShapeDtypeStruct`` as
    ``verify_attention`` takes them (under tensor parallelism, one device's shard: its heads).
    Pass it back as ``num_splits=`` to pin a count, e.g. to compare devices or builds."""
    shapes = _static_shapes(q, kv_cache, block_table, window, tokens_per_request)
    return _default_num_splits(shapes, _ffi.current_platform())


def launch_plan(q, kv_cache, block_table, *, window=None, tokens_per_request=8, num_splits=None):
    """How the GPU handler launches a call of these shapes on the current device, for tests,
    benchmarks and debugging; nothing runs. Shapes only: arrays or ``jax.ShapeDtypeStruct`` as
    ``verify_attention`` takes them (under tensor parallelism, one device's shard: its heads).

    Returns a dict: ``num_splits`` (as ``verify_attention`` would pick it, or the one given),
    ``split_kernel`` ("per_tile"; "two_tile": two-tile segments as one step; "pingpong": two
    warpgroups a CTA taking alternate tiles; "pingpong_two_pairs": the same as two such pairs a
    CTA, each on its own segment, one CTA an SM), ``merge_warps`` (warps a row in the merge),
    ``merge_pdl`` (the merge as a programmatic dependent launch), ``merge_by_lane`` (the merge
    loads and weighs a segment's (m, l) on one lane of a warp, else on every lane) and
    ``split_fill_ring`` (with "per_tile": a segment of exactly 4 tiles issues all its tiles'
    copies before its first wait). "two_tile" and "pingpong" name the kernel variant launched;
    their steps are compiled for sm_90a (the default CUDA build), so a build without sm_90a code
    runs them tile by tile; such a build never runs "pingpong_two_pairs". The ``MUSE_ATTN_PINGPONG`` / ``MUSE_ATTN_PP_TWO_PAIRS`` / ``MUSE_ATTN_PAIRS`` / ``MUSE_ATTN_PDL``
    / ``MUSE_ATTN_MERGE_BY_LANE`` / ``MUSE_ATTN_FILL_RING`` overrides apply as in a call (read
    once a process).
    RuntimeError on a platform with no GPU handler (the CPU handler has one plan).
    """
    _check_num_splits("launch_plan", num_splits)
    shapes = _static_shapes(q, kv_cache, block_table, window, tokens_per_request)
    platform = _ffi.current_platform()
    if platform not in ("CUDA", "ROCM") or not _ffi.has_handler(platform):
        raise RuntimeError(f"launch_plan: no GPU handler for platform {platform!r} "
                           f"(handlers: {sorted(_ffi.REGISTERED)})")
    _check_gpu_groups("launch_plan", shapes)
    splits = int(num_splits) if num_splits is not None else _default_num_splits(shapes, platform)
    return {"num_splits": splits, **_ffi.gpu_launch_plan(shapes, splits)}


def resolve_backend(backend: str) -> tuple[str, str]:
    """("ffi" | "reference", platform) for the requested backend on JAX's default backend."""
    if backend not in BACKENDS:
        raise ValueError(f"verify_attention: backend must be one of {BACKENDS}, got {backend!r}")
    platform = _ffi.current_platform()
    if backend == "reference":
        return "reference", platform
    if _ffi.has_handler(platform):
        return "ffi", platform
    if backend == "ffi":
        why = (f"the extension failed to import ({_ffi.IMPORT_ERROR})" if _ffi.IMPORT_ERROR
               else f"handlers were built for {sorted(_ffi.REGISTERED)} only")
        raise RuntimeError(
            f"verify_attention: backend='ffi' has no handler for platform {platform!r}: {why}. "
            "Rebuild the package for this platform (see the README) or use backend='reference'.")
    if _ffi.IMPORT_ERROR is not None:
        warnings.warn(f"jax_muse_attn: the FFI extension is missing ({_ffi.IMPORT_ERROR}); "
                      "backend='auto' falls back to the jnp reference", RuntimeWarning, stacklevel=3)
    elif platform != "cpu":  # a GPU whose kernel this build lacks: slow, so say it
        warnings.warn(f"jax_muse_attn: no handler for platform {platform!r} in this build "
                      f"(handlers: {sorted(_ffi.REGISTERED)}); backend='auto' falls back to the "
                      "jnp reference. Rebuild for this GPU (see the README) or pass "
                      "backend='reference' to silence this", RuntimeWarning, stacklevel=3)
    return "reference", platform


def verify_attention(q, kv_cache, block_table, seq_lens, *, scale, window=None, num_reqs=None,
                     backend="auto", tokens_per_request=8, num_splits=None):
    """Speculative-decoding verify attention over a paged KV cache (one TP rank, one layer).

    Args:
      q: bf16 ``[NQ*R, Hq, D]`` or ``[NQ*R, Hq*D]``, not yet scaled; row ``NQ*r + t`` is token
        ``t`` of request ``r``.
      kv_cache: bf16 ``[num_blocks, Hkv, 16, 2*D]``: key ``[..., :D]`` and value ``[..., D:]``.
      block_table: int32 ``[>= R, P]``: key ``k`` of request ``r`` is in block
        ``block_table[r, k // 16]``, slot ``k % 16``.
      seq_lens: int32 ``[>= R]``: keys of each request, including its NQ new tokens.
      scale: softmax scale (static Python float).
      window: None for full attention, or the sliding window (static int >= 1): token at
        position ``p`` sees keys ``p - window < k <= p``.
      num_reqs: requests that are real (None = R, a Python int in [0, R], or a traced int32
        scalar); the others are padding: zero rows, nothing of theirs is read.
      backend: "auto" (this platform's kernel where one is built, else the reference, with a
        RuntimeWarning on a GPU), "ffi" (RuntimeError where no kernel is built), or "reference".
      tokens_per_request: NQ, new tokens a request (static, 1..16; Muse Spark verifies 8).
      num_splits: segments a (request, KV head) group's keys are cut into (static; None picks
        one from the shapes and the device).

    Returns:
      bf16 array of q's shape.
    """
    _validate.check_static(scale, window, tokens_per_request)
    _check_num_splits("verify_attention", num_splits)
    shapes = _validate.check_inputs(q, kv_cache, block_table, seq_lens, scale=scale, window=window,
                                    tokens_per_request=tokens_per_request)
    nr = _validate.normalize_num_reqs(num_reqs, shapes.num_requests)
    nr_static = _validate.static_num_reqs(num_reqs, shapes.num_requests)  # -1: traced
    kind, _ = resolve_backend(backend)  # _ffi_jit reads the platform itself for the split count
    if kind == "reference":
        return _reference_jit(q, kv_cache, block_table, seq_lens, nr, shapes=shapes, scale=float(scale))
    splits = int(num_splits) if num_splits is not None else None  # None: per-shard default
    return _ffi_jit(q, kv_cache, block_table, seq_lens, nr, shapes=shapes, scale=float(scale),
                    num_splits=splits, num_reqs_static=nr_static)


# Both backends run through the tensor-parallel partitioning rules of _partitioning: under a
# mesh that shards the heads of q and kv_cache, each device runs its local heads (shapes and the
# default split count recomputed per shard), with no collectives.


def _reference_kernel(q, kv_cache, block_table, seq_lens, num_reqs, shapes, scale):
    return reference._reference(q, kv_cache, block_table, seq_lens, num_reqs, shapes=shapes, scale=scale)


# The GPU kernels' grid y is (request, KV head) groups: CUDA and HIP allow at most 65535
# (ffi/gpu/kernels.h kMaxGroups, which the GPU handler checks again).
_MAX_GPU_GROUPS = 65535


def _check_gpu_groups(fn, s):
    if s.groups > _MAX_GPU_GROUPS:
        raise ValueError(
            f"{fn}: requests x KV heads on one device = {s.num_requests} x "
            f"{s.num_kv_heads} = {s.groups}, more than the GPU kernels' grid allows "
            f"({_MAX_GPU_GROUPS}); call it on fewer requests at a time or shard the heads")


def _check_num_splits(fn, num_splits):
    if num_splits is not None and (isinstance(num_splits, bool)
                                   or not isinstance(num_splits, numbers.Integral) or num_splits < 1):
        raise ValueError(f"{fn}: num_splits must be None or an int >= 1, got {num_splits!r}")


def _ffi_kernel(q, kv_cache, block_table, seq_lens, num_reqs, shapes, scale, num_splits, platform,
                num_reqs_static):
    s = shapes  # global, or one shard's when partitioned
    if platform != "cpu":
        _check_gpu_groups("verify_attention", s)
    splits = num_splits if num_splits is not None else _default_num_splits(s, platform)
    q3 = q.reshape(q.shape[0], s.num_q_heads, s.head_dim)
    out = _ffi.call(q3, kv_cache, block_table, seq_lens, num_reqs, shapes=s, scale=scale,
                    num_splits=splits, num_reqs_static=num_reqs_static)
    return out.reshape(q.shape)


@functools.partial(jax.jit, static_argnames=("shapes", "scale"))
def _reference_jit(q, kv_cache, block_table, seq_lens, num_reqs, *, shapes, scale):
    return _partitioning.partitioned(_reference_kernel, q, kv_cache, block_table, seq_lens, num_reqs,
                                     shapes=shapes, static=(scale,))


@functools.partial(jax.jit, static_argnames=("shapes", "scale", "num_splits", "num_reqs_static"))
def _ffi_jit(q, kv_cache, block_table, seq_lens, num_reqs, *, shapes, scale, num_splits,
             num_reqs_static=-1):
    """num_splits: an int (every shard uses it), or None: the default of each shard's shapes.
    num_reqs_static: num_reqs when known at trace time (the kernels then skip reading it, one
    dependent memory round trip less at their start), else -1."""
    return _partitioning.partitioned(_ffi_kernel, q, kv_cache, block_table, seq_lens, num_reqs,
                                     shapes=shapes,
                                     static=(scale, num_splits, _ffi.current_platform(), num_reqs_static))
