"""Pure-jnp verify attention: the readable definition of what the kernels compute.

Jit-able, static shapes. It reads the cache through the block table like the kernels do:
only live block-table entries are used (stale ones are clamped to block 0 before the gather and
their keys masked), and poisoned slots (NaN/Inf past seq_len, before a window, in absent
blocks) are removed with selects, never by multiplying with a mask, so they cannot reach the
output. Scores and softmax in float32 in the exp2 domain, as the kernels compute them; P.V in
float32 (the kernels round P to bf16 first). Outside the fp32 range (a score or a P.V sum that
overflows) it gives what the kernels give: NaN for a row whose score overflowed to +inf.

An FP8 cache is dequantized by the kernels' rule, K = bf16(fp32(k_scale * k8)) and V alike,
so its K and V are bitwise the kernels'; per-token scales are gathered through the same masked
block ids as the cache, and unread ones (NaN or not) are removed by the same selects.

Unlike :func:`jax_muse_attn.verify_attention`, this is plain jnp: differentiable with respect to
q and kv_cache (``jax.grad``, ``jax.jvp``) and batchable with ``jax.vmap``, but not partitioned
by the tensor-parallel rules (under a head-sharded mesh XLA partitions it like any jnp code).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax_muse_attn import _validate
from jax_muse_attn._validate import LOG2E, PAGE_SIZE

LN2 = np.float32(0.6931471805599453)  # the kernels' kLn2 (ffi/muse_attn/softmax_state.h)


def verify_attention(q, kv_cache, block_table, seq_lens, *, scale, window=None, num_reqs=None,
                     tokens_per_request=8, k_scale=None, v_scale=None, draft_lens=None,
                     tree_mask=None, draft_depths=None, return_lse=False):
    """Same contract as :func:`jax_muse_attn.verify_attention`, without ``backend`` and
    ``num_splits``; differentiable with respect to q and a bf16 kv_cache (with an FP8 cache:
    q and the scales)."""
    shapes = _validate.check_inputs(q, kv_cache, block_table, seq_lens, scale=scale, window=window,
                                    tokens_per_request=tokens_per_request, k_scale=k_scale,
                                    v_scale=v_scale)
    shapes = _validate.check_drafts(shapes, draft_lens, tree_mask, draft_depths, return_lse)
    nr = _validate.normalize_num_reqs(num_reqs, shapes.num_requests)
    return _reference(q, kv_cache, block_table, seq_lens, nr, shapes=shapes, scale=float(scale),
                      k_scale=k_scale, v_scale=v_scale, draft_lens=draft_lens,
                      tree_mask=tree_mask, draft_depths=draft_depths)


def dequantize(x8, scale):
    """The FP8 rule of every backend: bf16(fp32(scale * x8)), both roundings to nearest even.
    x8: an FP8 array (or its exact float32 values); scale: float32, broadcast against it."""
    return (x8.astype(jnp.float32) * scale).astype(jnp.bfloat16)


def _reference(q, kv_cache, block_table, seq_lens, num_reqs, *, shapes: _validate.Shapes,
               scale: float, k_scale=None, v_scale=None, draft_lens=None, tree_mask=None,
               draft_depths=None):
    s = shapes
    r_idx = jnp.arange(s.num_requests)
    real = r_idx < jnp.clip(num_reqs, 0, s.num_requests)
    # Drafts a request verifies (run-time values clamped); a request with none reads nothing.
    if draft_lens is None:
        count = jnp.full((s.num_requests,), s.tokens, jnp.int32)
    else:
        count = jnp.clip(draft_lens, 0, s.tokens)
    count = jnp.where(real, count, 0)
    seq_len = jnp.where(count > 0, jnp.clip(seq_lens[: s.num_requests], 0, s.capacity), 0)  # [R]
    ctx = seq_len - count
    key_lo = jnp.maximum(ctx - s.window + 1, 0) if s.window else jnp.zeros_like(ctx)

    # The pages to look at: all of them (full attention) or a static span from the window start.
    if s.window:
        span = min(s.pages, -(-(s.window + s.tokens - 1) // PAGE_SIZE) + 1)
        page = (key_lo // PAGE_SIZE)[:, None] + jnp.arange(span)[None, :]  # [R, span]
    else:
        page = jnp.broadcast_to(jnp.arange(s.pages)[None, :], (s.num_requests, s.pages))
    live = ((page + 1) * PAGE_SIZE > key_lo[:, None]) & (page * PAGE_SIZE < seq_len[:, None]) & (page < s.pages)
    ids = jnp.take_along_axis(block_table[: s.num_requests], jnp.clip(page, 0, s.pages - 1), axis=1)
    valid = live & (ids >= 0) & (ids < s.num_blocks)
    ids = jnp.where(valid, ids, 0)  # stale or bad ids are never used to gather

    pages_kv = kv_cache[ids]  # [R, npages, Hkv, 16, 2D]
    npages = page.shape[1]
    key = page[:, :, None] * PAGE_SIZE + jnp.arange(PAGE_SIZE)[None, None, :]  # [R, npages, 16]
    present = valid[:, :, None] & (key >= key_lo[:, None, None]) & (key < seq_len[:, None, None])
    key = key.reshape(s.num_requests, npages * PAGE_SIZE)
    present = present.reshape(s.num_requests, npages * PAGE_SIZE)
    kv = jnp.swapaxes(pages_kv, 2, 3).reshape(s.num_requests, npages * PAGE_SIZE, s.num_kv_heads, 2 * s.head_dim)
    if s.scale_kind == "none":
        kv = kv.astype(jnp.float32)
    else:
        # Unread bytes and scales are replaced before the product, so that not even a
        # derivative (d/dscale is the byte) meets a NaN there.
        kv = jnp.where(present[:, :, None, None], kv.astype(jnp.float32), 0.0)
        if s.scale_kind == "token":  # the scales of the gathered slots: [R, K, Hkv, 1]
            def gather(x):
                x = jnp.swapaxes(x[ids], 2, 3)  # [R, npages, 16, Hkv]
                x = x.reshape(s.num_requests, npages * PAGE_SIZE, s.num_kv_heads, 1)
                return jnp.where(present[:, :, None, None], x, 0.0)
            k_scale, v_scale = gather(k_scale), gather(v_scale)
        kv = jnp.concatenate([dequantize(kv[..., : s.head_dim], k_scale),
                              dequantize(kv[..., s.head_dim:], v_scale)], axis=-1)
        kv = kv.astype(jnp.float32)
    kv = jnp.where(present[:, :, None, None], kv, 0.0)
    k, v = kv[..., : s.head_dim], kv[..., s.head_dim:]  # [R, K, Hkv, D]

    qf = q.reshape(s.num_requests, s.tokens, s.num_kv_heads, s.qpk, s.head_dim).astype(jnp.float32)
    # Scores in the exp2 domain with the kernels' float32 factor, so that a score overflows
    # fp32 exactly where theirs does.
    scale_log2 = np.float32(scale) * LOG2E
    scores = jnp.einsum("rthgd,rkhd->rthgk", qf, k, precision=jax.lax.Precision.HIGHEST) * scale_log2
    token = jnp.arange(s.tokens)[None, :]
    # A row is computed when its token is a draft whose own slot exists (ctx + t >= 0).
    live = (token < count[:, None]) & (ctx[:, None] + token >= 0)  # [R, NQ]
    if tree_mask is None:  # a chain: token t at ctx + t sees the keys at or before it
        qpos = ctx[:, None] + token  # [R, NQ]
        vis = present[:, None, :] & (key[:, None, :] <= qpos[:, :, None])  # [R, NQ, K]
        if s.window:
            vis = vis & (qpos[:, :, None] - key[:, None, :] < s.window)
    else:  # a tree: context keys by the window, draft j by bit j and the window by depth
        depth = jnp.clip(draft_depths, 0, s.tokens - 1)  # [R, NQ]
        qpos = ctx[:, None] + depth
        is_ctx = key < ctx[:, None]  # [R, K]
        j = key - ctx[:, None]
        is_draft = (j >= 0) & (j < count[:, None])
        jc = jnp.clip(j, 0, s.tokens - 1).astype(jnp.uint32)
        bit = ((tree_mask[:, :, None] >> jc[:, None, :]) & 1) == 1  # [R, NQ, K]
        vis_ctx = is_ctx[:, None, :]
        vis_draft = is_draft[:, None, :] & bit
        if s.window:
            vis_ctx = vis_ctx & (qpos[:, :, None] - key[:, None, :] < s.window)
            depth_j = jnp.take_along_axis(depth, jc.astype(jnp.int32), axis=1)  # [R, K]
            vis_draft = vis_draft & (depth[:, :, None] - depth_j[:, None, :] < s.window)
        vis = present[:, None, :] & (vis_ctx | vis_draft)
        # A draft slot that no live row sees is not read at all (its K and V are replaced).
        seen = jnp.any(vis_draft & live[:, :, None], axis=1)  # [R, K]
        present = present & (is_ctx | seen)
        kv = jnp.where(present[:, :, None, None], kv, 0.0)
        k, v = kv[..., : s.head_dim], kv[..., s.head_dim:]
        vis = vis & present[:, None, :]
    vis = (vis & live[:, :, None])[:, :, None, None, :]
    scores = jnp.where(vis, scores, -jnp.inf)
    # As in the kernels: only a row with no visible key (max -inf) subtracts 0, and a +inf score
    # makes its row NaN. The max cancels out: no gradient through it.
    m = jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True))
    m = jnp.where(m == -jnp.inf, 0.0, m)
    p = jnp.where(vis, jnp.exp2(scores - m), 0.0)
    l = jnp.sum(p, axis=-1)
    o = jnp.einsum("rthgk,rkhd->rthgd", p, v, precision=jax.lax.Precision.HIGHEST)
    # l == 0: no key, an exact zero row; a NaN l (overflow above) keeps the row NaN.
    out = jnp.where(l[..., None] == 0, 0.0, o / jnp.where(l == 0, 1.0, l)[..., None])
    out = out.astype(q.dtype).reshape(q.shape)
    if not s.lse:
        return out
    # ln(sum exp(scale q.k)) from the exp2-domain max and sum, as the kernels' merge forms it;
    # -inf for a row that sees no key.
    m = jax.lax.stop_gradient(m[..., 0])
    lse = jnp.where(l == 0, -jnp.inf, (m + jnp.log2(jnp.where(l == 0, 1.0, l))) * LN2)
    return out, lse.reshape(q.shape[0], s.num_q_heads).astype(jnp.float32)
