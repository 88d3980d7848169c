"""verify_attention: the public entry point and its backend dispatch."""

from __future__ import annotations

import dataclasses
import functools
import numbers
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from jax_muse_attn import _ffi, _partitioning, _validate, reference

BACKENDS = ("auto", "ffi", "reference")

# The one debug override of the launch plan, read at trace time (launch_plan.h parse_overrides):
# e.g. MUSE_ATTN_LAUNCH="split_kernel=per_tile,merge_pdl=0". GPU handlers only, but for
# balance_segments, which the CPU handler honours too.
LAUNCH_ENV = "MUSE_ATTN_LAUNCH"


def _launch_overrides() -> str:
    return os.environ.get(LAUNCH_ENV, "")


def _static_shapes(q, kv_cache, block_table, window, tokens_per_request):
    """The checked shapes of a call from q, kv_cache and block_table alone (seq_lens follows the
    block table's rows; an FP8 cache is taken with per-tensor scales, which the plan does not
    depend on), as verify_attention checks them."""
    table_shape = tuple(getattr(block_table, "shape", ()))  # checked below, before seq_lens
    seq_lens = jax.ShapeDtypeStruct(table_shape[:1] or (0,), jnp.int32)
    fp8 = str(getattr(kv_cache, "dtype", "")) in _validate.KV_DTYPES[1:]
    scale = jax.ShapeDtypeStruct((), jnp.float32) if fp8 else None
    return _validate.check_inputs(q, kv_cache, block_table, seq_lens, scale=1.0, window=window,
                                  tokens_per_request=tokens_per_request, k_scale=scale,
                                  v_scale=scale)


def launch_plan(q, kv_cache, block_table, *, window=None, tokens_per_request=8, num_splits=None,
                drafts=False):
    """How a call of these shapes is launched on the current device; nothing runs.

    Shapes only: arrays or ``jax.ShapeDtypeStruct`` as ``verify_attention`` takes them (under
    tensor parallelism, one device's shard: its heads); kv_cache may be bf16 or FP8, the scales
    are not needed. Returns a dict: ``num_splits`` (segments
    a (request, KV head) group's keys are cut into: as ``verify_attention`` picks it, or the one
    given), ``split_kernel`` ("per_tile", "two_tile", "fill_ring", "pingpong",
    "pingpong_two_pairs" or, on AMD, "per_tile_cached"; README, Performance), ``merge_warps``
    (warps a row in the merge),
    ``merge_pdl`` (the merge as a programmatic dependent launch) and ``merge_by_lane`` (the merge
    weighs a segment's (m, l) on one lane of a warp, else on every lane). On the CPU only
    ``num_splits`` means anything. ``MUSE_ATTN_LAUNCH`` applies as in a call. ``drafts=True``:
    the plan of a call with ``draft_lens`` or ``tree_mask`` (``return_lse`` alone keeps the
    chain's plan).
    """
    _check_num_splits("launch_plan", num_splits)
    shapes = _static_shapes(q, kv_cache, block_table, window, tokens_per_request)
    if drafts:
        shapes = dataclasses.replace(shapes, drafts="ragged")
    platform = _ffi.current_platform()
    if platform != "cpu":
        _check_gpu_groups("launch_plan", shapes)
    return _ffi.launch_plan(shapes, platform, num_splits or 0, _launch_overrides())


def default_num_splits(q, kv_cache, block_table, *, window=None, tokens_per_request=8) -> int:
    """The split count ``verify_attention`` picks (``num_splits=None``) for a call of these shapes
    on the current device: ``launch_plan(...)["num_splits"]``. Pass it back as ``num_splits=`` to
    pin a count, e.g. to compare devices or builds."""
    return launch_plan(q, kv_cache, block_table, window=window,
                       tokens_per_request=tokens_per_request)["num_splits"]


def resolve_backend(backend: str) -> tuple[str, str]:
    """("ffi" | "reference", platform) for the requested backend on JAX's default backend."""
    if backend not in BACKENDS:
        raise ValueError(f"verify_attention: backend must be one of {BACKENDS}, got {backend!r}")
    platform = _ffi.current_platform()
    if backend == "reference":
        return "reference", platform
    if _ffi.has_handler(platform):
        # The CPU's too: it is faster than the jnp reference on every config of
        # benchmarks/cpu_bench.py (full attention 1k-32k, a 2048 window, R 1-16, D 64 and 128).
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
                     backend="auto", tokens_per_request=8, num_splits=None, k_scale=None,
                     v_scale=None, draft_lens=None, tree_mask=None, draft_depths=None,
                     return_lse=False):
    """Speculative-decoding verify attention over a paged KV cache (one TP rank, one layer).

    Args:
      q: bf16 ``[NQ*R, Hq, D]`` or ``[NQ*R, Hq*D]``, not yet scaled; row ``NQ*r + t`` is token
        ``t`` of request ``r``.
      kv_cache: ``[num_blocks, Hkv, 16, 2*D]``: key ``[..., :D]`` and value ``[..., D:]``; bf16,
        or FP8 (``float8_e4m3fn``, OCP, or ``float8_e4m3fnuz``, the gfx942 variant) with
        ``k_scale`` / ``v_scale``. Both FP8 formats are read on every platform (the kernels
        decode them in software): none is refused for the device it runs on.
      block_table: int32 ``[>= R, P]``: key ``k`` of request ``r`` is in block
        ``block_table[r, k // 16]``, slot ``k % 16``.
      seq_lens: int32 ``[>= R]``: keys of each request, including its NQ new tokens.
      scale: softmax scale (static Python float; the kernels take ``scale * log2(e)`` as a
        float32, so it must be in [1.2e-38, 2.4e38]).
      window: None for full attention, or the sliding window (static int in [1, 2**31 - 1]):
        token at position ``p`` sees keys ``p - window < k <= p``.
      num_reqs: requests that are real (None = R, a Python int in [0, R], or an integer scalar
        array, traced or not, of any integer dtype: clamped to [0, R] without wrapping); the
        others are padding: zero rows, nothing of theirs is read.
      backend: "auto" (this platform's kernel where one is built, else the reference, with a
        RuntimeWarning on a GPU), "ffi" (RuntimeError where no kernel is built), or "reference".
      tokens_per_request: NQ, new tokens a request (static, 1..16; Muse Spark verifies 8).
      num_splits: segments a (request, KV head) group's keys are cut into (static; None picks
        one from the shapes and the device).
      k_scale, v_scale: None with a bf16 cache. With an FP8 cache both are required, float32
        arrays (a Python float is refused: pass ``jnp.float32(x)``), both per tensor (shape
        ``()``, traced: one executable for every value) or both per token (``[num_blocks, Hkv,
        16]``: one scale a block, KV head and slot, read only for the keys that are read).
        Every backend uses ``K = bf16(fp32(k_scale * fp8))`` (and V alike) and from there
        computes as with a bf16 cache. Under tensor parallelism per-token scales are sharded
        like the cache's heads, per-tensor ones replicated (:mod:`jax_muse_attn.sharding`).
      draft_lens: None (every request verifies NQ tokens) or int32 ``[R]`` (traced), clamped to
        [0, NQ] at run time: request r verifies rows ``NQ*r + [0, n_r)`` of q; its other rows
        come out zero and are neither read nor computed. The drafts' K/V are the last n_r keys
        of ``seq_lens[r]``: the context is ``ctx = seq_lens[r] - n_r`` keys and draft t sits in
        slot ``ctx + t``.
      tree_mask: None (the causal chain) or uint32 ``[R, NQ]`` (traced): bit j of row t set =
        draft t sees draft j. A row's own bit is not implied (set it, as tree masks do). Every
        context key is visible to every draft (window permitting); bits of drafts outside
        [0, n_r) are ignored; a draft that sees no key comes out zero.
      draft_depths: None (depth = row) or int32 ``[R, NQ]`` (traced), clamped to [0, NQ - 1]:
        draft t is at position ``ctx + depth_t``. Without tree_mask the mask is the causal one
        (bits j <= t). A window applies by position to context and draft keys alike:
        ``qpos - kpos < window``, where draft j's kpos is ``ctx + depth_j`` and context key k's is
        k.
      return_lse: static bool; True also returns lse.

    Returns:
      bf16 array of q's shape; with ``return_lse=True`` the pair ``(out, lse)``, lse float32
      ``[NQ*R, Hq]``: the natural log of ``sum exp(scale * q.k)`` over the keys the row sees,
      -inf for a row that sees none (zero rows).

    Scores (``scale * log2(e) * q.K``) and ``P.V`` sums must fit float32; a row whose score
    overflows to +inf comes out NaN (README, Semantics). ``jax.vmap`` over a leading batch axis
    of any argument (the scales too) runs one call of batch x R requests. There is no
    derivative (in any argument, the scales too): ``jax.grad``
    and ``jax.jvp`` raise NotImplementedError; :func:`jax_muse_attn.reference.verify_attention`
    is the differentiable form.
    """
    _validate.check_static(scale, window, tokens_per_request)
    _check_num_splits("verify_attention", num_splits)
    shapes = _validate.check_inputs(q, kv_cache, block_table, seq_lens, scale=scale, window=window,
                                    tokens_per_request=tokens_per_request, k_scale=k_scale,
                                    v_scale=v_scale)
    shapes = _validate.check_drafts(shapes, draft_lens, tree_mask, draft_depths, return_lse)
    nr = _validate.normalize_num_reqs(num_reqs, shapes.num_requests)
    nr_static = _validate.static_num_reqs(num_reqs, shapes.num_requests)  # -1: traced
    kind, platform = resolve_backend(backend)
    drafts = _draft_operands(shapes, draft_lens, tree_mask, draft_depths, fill=kind == "reference")
    if kind == "reference":
        return _reference_jit(q, kv_cache, block_table, seq_lens, nr, k_scale, v_scale, *drafts,
                              shapes=shapes, scale=float(scale))
    if (shapes.drafts != "chain" or shapes.lse) and not _ffi.has_drafts_handler(platform):
        raise NotImplementedError(
            f"verify_attention: the {platform} kernels do not take draft_lens, tree_mask, "
            "draft_depths or return_lse yet (only the CPU handler and the reference do); pass "
            "backend='reference' to run them in jnp on this device")
    splits = int(num_splits) if num_splits is not None else None  # None: per-shard default
    return _ffi_jit(q, kv_cache, block_table, seq_lens, nr, k_scale, v_scale, *drafts,
                    shapes=shapes, scale=float(scale), num_splits=splits,
                    num_reqs_static=nr_static, platform=platform, overrides=_launch_overrides())


def _draft_operands(shapes, draft_lens, tree_mask, draft_depths, fill):
    """(draft_lens, tree_mask, draft_depths) as the kernels take them: all None for a chain,
    draft_lens alone for a ragged chain; a tree's as given, or with fill (the reference) its
    defaults filled in: NQ drafts, the causal mask, depth = row. The handlers make those
    defaults themselves: filled in here, each would be an op of its own before every call."""
    if shapes.drafts == "chain":
        return None, None, None
    if shapes.drafts == "ragged":
        return draft_lens, None, None
    if not fill:
        return draft_lens, tree_mask, draft_depths
    r, nq = shapes.num_requests, shapes.tokens
    if draft_lens is None:
        draft_lens = jnp.full((r,), nq, jnp.int32)
    if tree_mask is None:  # bits j <= t
        causal = (jnp.uint32(2) << jnp.arange(nq, dtype=jnp.uint32)) - jnp.uint32(1)
        tree_mask = jnp.broadcast_to(causal, (r, nq))
    if draft_depths is None:
        draft_depths = jnp.broadcast_to(jnp.arange(nq, dtype=jnp.int32), (r, nq))
    return draft_lens, tree_mask, draft_depths


# Both backends run through the tensor-parallel partitioning rules of _partitioning: under a
# mesh that shards the heads of q and kv_cache, each device runs its local heads (shapes and the
# default split count recomputed per shard), with no collectives.


def _reference_kernel(q, kv_cache, block_table, seq_lens, num_reqs, shapes, scale, k_scale=None,
                      v_scale=None, draft_lens=None, tree_mask=None, draft_depths=None):
    return reference._reference(q, kv_cache, block_table, seq_lens, num_reqs, shapes=shapes,
                                scale=scale, k_scale=k_scale, v_scale=v_scale,
                                draft_lens=draft_lens, tree_mask=tree_mask,
                                draft_depths=draft_depths)


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
                num_reqs_static, overrides, k_scale=None, v_scale=None, draft_lens=None,
                tree_mask=None, draft_depths=None):
    s = shapes  # global, or one shard's when partitioned
    if platform != "cpu":
        _check_gpu_groups("verify_attention", s)
    plan = _ffi.launch_plan(s, platform, num_splits or 0, overrides)
    q3 = q.reshape(q.shape[0], s.num_q_heads, s.head_dim)
    res = _ffi.call(q3, kv_cache, block_table, seq_lens, num_reqs, shapes=s, scale=scale,
                    plan=plan, num_reqs_static=num_reqs_static, k_scale=k_scale, v_scale=v_scale,
                    draft_lens=draft_lens, tree_mask=tree_mask, draft_depths=draft_depths)
    if s.lse:
        return res[0].reshape(q.shape), res[1]
    return res.reshape(q.shape)


@functools.partial(jax.jit, static_argnames=("shapes", "scale"))
def _reference_jit(q, kv_cache, block_table, seq_lens, num_reqs, k_scale=None, v_scale=None,
                   draft_lens=None, tree_mask=None, draft_depths=None, *, shapes, scale):
    def run(q, kv, bt, sl, nr, ks, vs, dl, tm, dd, shapes, num_reqs_static):
        del num_reqs_static  # the reference reads num_reqs either way
        return _partitioning.partitioned(_reference_kernel, q, kv, bt, sl, nr, ks, vs, dl, tm, dd,
                                         shapes=shapes, static=(scale,))
    return _inference_call(run, q, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale,
                           draft_lens, tree_mask, draft_depths, shapes=shapes, num_reqs_static=-1)


@functools.partial(jax.jit, static_argnames=("shapes", "scale", "num_splits", "num_reqs_static",
                                             "platform", "overrides"))
def _ffi_jit(q, kv_cache, block_table, seq_lens, num_reqs, k_scale=None, v_scale=None,
             draft_lens=None, tree_mask=None, draft_depths=None, *, shapes, scale, num_splits,
             num_reqs_static, platform, overrides):
    """num_splits: an int (every shard uses it), or None: each shard's default.
    num_reqs_static: num_reqs when known at trace time (the kernels then skip reading it, one
    dependent memory round trip less at their start), else -1. overrides: MUSE_ATTN_LAUNCH's
    value when traced (it keys the cache)."""
    def run(q, kv, bt, sl, nr, ks, vs, dl, tm, dd, shapes, num_reqs_static):
        return _partitioning.partitioned(
            _ffi_kernel, q, kv, bt, sl, nr, ks, vs, dl, tm, dd, shapes=shapes,
            static=(scale, num_splits, platform, num_reqs_static, overrides))
    return _inference_call(run, q, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale,
                           draft_lens, tree_mask, draft_depths, shapes=shapes,
                           num_reqs_static=num_reqs_static)


# ------------------------------------------------------------------ differentiation and vmap
# custom_partitioning has neither a differentiation nor a batching rule. The call refuses the
# first with an error that names the differentiable reference, and batches by folding the batch
# axis into the requests: one call of B*R requests.

NOT_DIFFERENTIABLE = (
    "jax_muse_attn.verify_attention is an inference kernel: it has no derivative (jax.grad, "
    "jax.vjp, jax.jvp, jax.linearize). To differentiate verify attention, call "
    "jax_muse_attn.reference.verify_attention (the same computation in pure jnp, "
    "differentiable with respect to q and kv_cache); if no gradient should flow through this "
    "call, wrap its inputs in jax.lax.stop_gradient.")


def _refuse_derivative(primals, tangents):
    raise NotImplementedError(NOT_DIFFERENTIABLE)


def _inference_call(run, q, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale,
                    draft_lens, tree_mask, draft_depths, *, shapes, num_reqs_static):
    """run(q, kv, bt, sl, nr, ks, vs, dl, tm, dd, shapes, num_reqs_static) -> out (or (out, lse)
    with shapes.lse), refusing derivatives (with respect to every operand, the scales too) and
    batching by folding; the forward computation is run itself. ks, vs: None with a bf16 cache;
    dl, tm, dd: None where the call has no such operand."""
    call = jax.custom_jvp(_batchable(run, shapes, num_reqs_static))
    call.defjvp(_refuse_derivative)
    return call(q, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale, draft_lens,
                tree_mask, draft_depths)


def _batchable(run, shapes: _validate.Shapes, num_reqs_static: int):
    """run on these shapes, with a jax.vmap rule that folds a leading batch axis into requests."""

    @jax.custom_batching.custom_vmap
    def call(q, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale, draft_lens,
             tree_mask, draft_depths):
        return run(q, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale, draft_lens,
                   tree_mask, draft_depths, shapes, num_reqs_static)

    @call.def_vmap
    def fold(size, in_batched, q, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale,
             draft_lens, tree_mask, draft_depths):
        args = _fold(shapes, num_reqs_static, size, in_batched, q, kv_cache, block_table,
                     seq_lens, num_reqs, k_scale, v_scale, draft_lens, tree_mask, draft_depths)
        folded_scales = args[5]
        folded = dataclasses.replace(
            shapes, num_requests=size * shapes.num_requests, num_blocks=args[1].shape[0],
            scale_kind="token" if folded_scales is not None and folded_scales.ndim == 3
            else shapes.scale_kind)
        # Every folded request is real (padding became requests with no key): a static count,
        # and an outer vmap folds again through this same rule.
        res = _batchable(run, folded, folded.num_requests)(*args)
        out_shape = (size,) + q.shape[1 if in_batched[0] else 0:]
        if shapes.lse:
            out, lse = res
            return (out.reshape(out_shape), lse.reshape(out_shape[:2] + lse.shape[1:])), (True, True)
        return res.reshape(out_shape), True

    return call


def _fold(s: _validate.Shapes, num_reqs_static, size, in_batched, q, kv_cache, block_table,
          seq_lens, num_reqs, k_scale, v_scale, draft_lens, tree_mask, draft_depths):
    """The arguments of one call of size * R requests equal to `size` calls (batched arguments
    have the batch axis first; the others are shared by every element). Element b's requests
    are requests b*R .. b*R + R - 1. A batched cache is concatenated along its blocks and each
    element's valid block ids are offset into its own part; an id that is invalid for its own
    cache stays invalid (-1), so no element can read another's blocks. Padding requests
    (r >= num_reqs) get seq_len 0: no key, nothing read, an exactly zero output row.
    FP8 scales: per-token scales are joined along the blocks with their cache; a batched
    per-tensor scale becomes per-token scales (its value on every slot of its element's
    blocks); a batched scale of a shared cache folds that cache once an element. Draft operands
    are per request: element b's rows follow its requests."""
    q_b, kv_b, bt_b, sl_b, nr_b, ks_b, vs_b, dl_b, tm_b, dd_b = in_batched
    r, nb = s.num_requests, s.num_blocks

    def batch(x, batched):
        return x if batched else jnp.broadcast_to(x, (size,) + x.shape)

    q = batch(q, q_b)
    q = q.reshape((size * q.shape[1],) + q.shape[2:])
    bt = batch(block_table[..., :r, :], bt_b)  # [size, R, P]
    scales_b = bool(ks_b) or bool(vs_b)
    if k_scale is not None and scales_b and not kv_b:
        # Each element dequantizes the shared cache with its own scales: fold a copy an element.
        kv_cache, kv_b = batch(kv_cache, False), True
    if kv_b:
        if size * nb > _validate.INT32_MAX:
            raise ValueError(
                f"verify_attention under jax.vmap: kv_cache must fold into at most "
                f"{_validate.INT32_MAX} blocks (int32 block ids), got a batch of {size} caches of "
                f"{nb} blocks = {size * nb}; batch fewer caches, or share one cache and "
                "batch the block tables")
        offset = (jnp.arange(size, dtype=jnp.int32) * nb)[:, None, None]
        bt = jnp.where((bt >= 0) & (bt < nb), bt + offset, -1)
        kv_cache = kv_cache.reshape((size * nb,) + kv_cache.shape[2:])
        if k_scale is not None and (s.scale_kind == "token" or scales_b):
            def fold_scale(x, batched):  # [size], [size, nb, Hkv, 16] -> [size * nb, Hkv, 16]
                x = batch(x, batched)
                x = x.reshape(x.shape + (1,) * (4 - x.ndim))
                x = jnp.broadcast_to(x, (size, nb, s.num_kv_heads, _validate.PAGE_SIZE))
                return x.reshape(size * nb, s.num_kv_heads, _validate.PAGE_SIZE)
            k_scale, v_scale = fold_scale(k_scale, ks_b), fold_scale(v_scale, vs_b)
    sl = batch(seq_lens[..., :r], sl_b)  # [size, R]
    if nr_b or num_reqs_static != r:
        real = jnp.arange(r)[None, :] < jnp.clip(num_reqs, 0, r)[..., None]  # [size or 1, R]
        sl = jnp.where(real, sl, 0)
    def per_request(x, batched):  # [R, ...] -> [size * R, ...]
        if x is None:
            return None
        x = batch(x, batched)
        return x.reshape((size * r,) + x.shape[2:])

    return (q, kv_cache, bt.reshape(size * r, bt.shape[-1]), sl.reshape(size * r),
            jnp.asarray(size * r, jnp.int32), k_scale, v_scale, per_request(draft_lens, dl_b),
            per_request(tree_mask, tm_b), per_request(draft_depths, dd_b))


# ------------------------------------------------------------------ packed drafts (vLLM's form)

def verify_attention_packed(q, kv_cache, block_table, seq_lens, query_start_loc, *, scale,
                            max_draft_len=8, window=None, num_reqs=None, backend="auto",
                            num_splits=None, k_scale=None, v_scale=None, tree_mask=None,
                            draft_depths=None, return_lse=False):
    """verify_attention on drafts packed back to back, as vLLM lays them out.

    Args:
      q: bf16 ``[T, Hq, D]`` or ``[T, Hq*D]`` (T static): request r's drafts are rows
        ``query_start_loc[r] .. query_start_loc[r + 1] - 1``.
      query_start_loc: int32 ``[R + 1]`` (traced), R the requests of block_table / seq_lens
        rows used. Run-time values are clamped, never trusted: ``s = cummax(clip(query_start_loc,
        0, T))`` makes the starts non-decreasing inside [0, T], and request r verifies
        ``n_r = min(s[r + 1] - s[r], max_draft_len)`` drafts, rows ``s[r] .. s[r] + n_r - 1``.
        Rows that no request owns (before s[0], past s[R], or past a request's first
        max_draft_len rows) come out zero (lse -inf) and are not read.
      max_draft_len: static NQ, the most drafts a request (1..16): the slot form's
        tokens_per_request.
      The rest as :func:`verify_attention` (tree_mask and draft_depths ``[R, max_draft_len]``,
      indexed by a draft's rank in its request).

    Returns:
      bf16 array of q's shape; with ``return_lse=True`` ``(out, lse)``, lse float32 ``[T, Hq]``.

    It runs the slot form on ``[NQ*R, ...]`` slots: the rows are gathered into their slots and
    the results scattered back on the device (no host sync; one executable for every
    query_start_loc).
    """
    fn = "verify_attention_packed"
    if not hasattr(q, "shape") or not hasattr(q, "dtype"):
        raise TypeError(f"{fn}: q must be an array, got {type(q).__name__}")
    if q.dtype != jnp.bfloat16:
        raise TypeError(f"{fn}: q must be of dtype bfloat16, got {q.dtype}")
    if q.ndim not in (2, 3) or q.shape[0] < 1:
        raise ValueError(f"{fn}: q must be [T, Hq, D] or [T, Hq*D] with T >= 1, got shape "
                         f"{tuple(q.shape)}")
    qsl = query_start_loc
    if not hasattr(qsl, "shape") or not hasattr(qsl, "dtype"):
        raise TypeError(f"{fn}: query_start_loc must be an int32 array [R + 1], got "
                        f"{type(qsl).__name__}")
    if qsl.dtype != jnp.int32:
        raise TypeError(f"{fn}: query_start_loc must be of dtype int32, got {qsl.dtype}")
    if qsl.ndim != 1 or qsl.shape[0] < 2:
        raise ValueError(f"{fn}: query_start_loc must be [R + 1] with R >= 1, got shape "
                         f"{tuple(qsl.shape)}")
    if (isinstance(max_draft_len, bool) or not isinstance(max_draft_len, numbers.Integral)
            or not 1 <= max_draft_len <= _validate.MAX_TOKENS_PER_REQUEST):
        raise ValueError(f"{fn}: max_draft_len must be an int in [1, "
                         f"{_validate.MAX_TOKENS_PER_REQUEST}], got {max_draft_len!r}")
    if not isinstance(return_lse, (bool, np.bool_)):
        raise TypeError(f"{fn}: return_lse must be a Python bool, got {return_lse!r}")
    nq, r, t_rows = int(max_draft_len), qsl.shape[0] - 1, q.shape[0]
    starts = jax.lax.cummax(jnp.clip(qsl, 0, t_rows), axis=0)  # [R + 1], non-decreasing
    counts = jnp.minimum(starts[1:] - starts[:-1], nq)  # [R], in [0, NQ]
    src = starts[:-1, None] + jnp.arange(nq, dtype=jnp.int32)[None, :]  # [R, NQ]
    owned = (jnp.arange(nq)[None, :] < counts[:, None]).reshape(-1)  # [NQ*R]
    src = src.reshape(-1)
    rows = q[jnp.clip(src, 0, t_rows - 1)]
    q_slots = jnp.where(owned.reshape((-1,) + (1,) * (q.ndim - 1)), rows, jnp.zeros((), q.dtype))
    res = verify_attention(q_slots, kv_cache, block_table, seq_lens, scale=scale, window=window,
                           num_reqs=num_reqs, backend=backend, tokens_per_request=nq,
                           num_splits=num_splits, k_scale=k_scale, v_scale=v_scale,
                           draft_lens=counts, tree_mask=tree_mask, draft_depths=draft_depths,
                           return_lse=bool(return_lse))
    dest = jnp.where(owned, src, t_rows)  # t_rows: dropped (disjoint ranges otherwise)
    out_slots = res[0] if return_lse else res
    out = jnp.zeros(q.shape, q.dtype).at[dest].set(out_slots, mode="drop")
    if not return_lse:
        return out
    lse = jnp.full((t_rows, res[1].shape[1]), -jnp.inf, jnp.float32).at[dest].set(
        res[1], mode="drop")
    return out, lse


# ------------------------------------------------------------------ merging partial results

def merge_attention_states(out_a, lse_a, out_b, lse_b):
    """Combines two attention results over disjoint key sets into the result over their union.

    out_a, out_b: one floating dtype and shape, ``[..., H, D]`` (lse ``[..., H]``) or
    ``[..., H*D]`` (lse ``[..., H]``, the heads folded with D as in a 2-D q); lse_a, lse_b:
    float32, the natural log-sum-exp of each row (``verify_attention(..., return_lse=True)``).
    Returns ``(out, lse)`` in the inputs' dtypes, computed in float32 as the kernels' merge
    does: weights ``exp(lse_x - max(lse_a, lse_b))``; a side with lse -inf weighs 0 (its out is
    not read); both -inf give a zero row and lse -inf.
    """
    fn = "merge_attention_states"
    for name, x in (("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b), ("lse_b", lse_b)):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"{fn}: {name} must be an array, got {type(x).__name__}")
    for name, x in (("out_a", out_a), ("out_b", out_b)):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"{fn}: {name} must be of a floating dtype, got {x.dtype}")
    for name, x in (("lse_a", lse_a), ("lse_b", lse_b)):
        if x.dtype != jnp.float32:
            raise TypeError(f"{fn}: {name} must be of dtype float32, got {x.dtype}")
    if out_b.dtype != out_a.dtype or tuple(out_b.shape) != tuple(out_a.shape):
        raise ValueError(f"{fn}: out_b must have out_a's dtype and shape {out_a.dtype}"
                         f"{tuple(out_a.shape)}, got {out_b.dtype}{tuple(out_b.shape)}")
    if tuple(lse_b.shape) != tuple(lse_a.shape):
        raise ValueError(f"{fn}: lse_b must have lse_a's shape {tuple(lse_a.shape)}, got "
                         f"{tuple(lse_b.shape)}")
    oshape, lshape = tuple(out_a.shape), tuple(lse_a.shape)
    per_head = len(oshape) == len(lshape) + 1 and oshape[:-1] == lshape
    folded = (len(oshape) == len(lshape) >= 1 and oshape[:-1] == lshape[:-1] and lshape[-1] > 0
              and oshape[-1] % lshape[-1] == 0)
    if not (per_head or folded):
        raise ValueError(f"{fn}: lse_a must be out_a's shape without its last axis ([..., H] for "
                         f"out [..., H, D]) or with the heads unfolded ([..., H] for out "
                         f"[..., H*D]); got out_a {oshape} and lse_a {lshape}")
    a = out_a.astype(jnp.float32).reshape(lshape + (-1,))
    b = out_b.astype(jnp.float32).reshape(lshape + (-1,))
    empty_a, empty_b = lse_a == -jnp.inf, lse_b == -jnp.inf
    m = jnp.maximum(lse_a, lse_b)
    m = jnp.where(empty_a & empty_b, 0.0, m)
    wa = jnp.where(empty_a, 0.0, jnp.exp(lse_a - m))
    wb = jnp.where(empty_b, 0.0, jnp.exp(lse_b - m))
    total = wa + wb
    acc = (jnp.where(empty_a[..., None], 0.0, wa[..., None] * a)
           + jnp.where(empty_b[..., None], 0.0, wb[..., None] * b))
    both = (empty_a & empty_b)[..., None]
    out = jnp.where(both, 0.0, acc / jnp.where(both[..., 0], 1.0, total)[..., None])
    lse = jnp.where(empty_a & empty_b, -jnp.inf, m + jnp.log(jnp.where(total > 0, total, 1.0)))
    return out.astype(out_a.dtype).reshape(oshape), lse.astype(jnp.float32)
