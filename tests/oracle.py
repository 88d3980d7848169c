"""An independent float64 numpy oracle of verify attention (the spec's "Output"; README.md, Semantics).

Written from the spec only, key by key: for request r < num_reqs, KV head g and token t, the
keys lo(t) <= k <= qpos(t) are looked up one by one through the block table; a key whose block
id is outside [0, num_blocks) is absent. Only the cache slots of present keys are indexed, so
garbage (NaN / Inf) anywhere else cannot reach the result. Rows with no key are exactly 0.

Vectorized only over the keys of one (request, KV head) and over D; nothing here shares code
or structure (tiles, segments, online softmax) with the library.

An FP8 cache is dequantized independently of the library's rule: each gathered byte decoded by
ml_dtypes to float64 and multiplied by its scale in float64, with no rounding to bf16 (the
tolerance covers the library's bf16 rounding of K and V). Per-token scales are indexed only at
the slots of present keys, like the cache.
"""

from __future__ import annotations

import numpy as np

PAGE = 16


def _as_f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def verify_attention(q, kv_cache, block_table, seq_lens, *, scale, window=None, num_reqs=None,
                     tokens_per_request=8, requests=None, k_scale=None, v_scale=None):
    """float64 array of q's shape.

    q, kv_cache, block_table, seq_lens: numpy (or jax) arrays as for the library.
    k_scale, v_scale: with an FP8 kv_cache, its scales (shape () or [num_blocks, Hkv, 16]).
    requests: optional iterable of request indices to compute (for speed on huge contexts);
    rows of other requests are NaN (never compare them).
    """
    kv = np.asarray(kv_cache)  # kept in its own dtype; only gathered slots are converted
    fp8 = k_scale is not None
    if fp8:
        k_scale, v_scale = np.asarray(k_scale), np.asarray(v_scale)
    bt = np.asarray(block_table).astype(np.int64)
    sl = np.asarray(seq_lens).astype(np.int64)
    num_blocks, hkv, page, two_d = kv.shape
    assert page == PAGE
    d = two_d // 2
    nq = tokens_per_request
    qf = _as_f64(q)
    rows = qf.shape[0]
    r_total = rows // nq
    hq = qf.size // (rows * d)
    qpk = hq // hkv
    q4 = qf.reshape(r_total, nq, hq, d)
    capacity = PAGE * bt.shape[1]
    n_real = r_total if num_reqs is None else int(num_reqs)
    n_real = min(max(n_real, 0), r_total)

    out = np.zeros((r_total, nq, hq, d), np.float64)
    if requests is not None:
        keep = set(int(r) for r in requests)
        for r in range(r_total):
            if r not in keep:
                out[r] = np.nan
        todo = sorted(keep)
    else:
        todo = range(r_total)

    for r in todo:
        if r >= n_real:
            continue  # padding: zero rows, nothing read
        seq_len = min(max(int(sl[r]), 0), capacity)
        qpos = [seq_len - nq + t for t in range(nq)]
        lo = [0 if window is None else max(0, p - window + 1) for p in qpos]
        visible_tokens = [t for t in range(nq) if qpos[t] >= 0]
        if not visible_tokens:
            continue
        first = min(lo[t] for t in visible_tokens)
        last = max(qpos[t] for t in visible_tokens)
        keys = np.arange(first, last + 1, dtype=np.int64)
        blocks = bt[r, keys // PAGE]
        present = (blocks >= 0) & (blocks < num_blocks)
        keys, blocks = keys[present], blocks[present]
        slots = keys % PAGE
        for g in range(hkv):
            # Exactly the slots of present keys of this KV head, nothing else.
            k_mat = kv[blocks, g, slots, :d].astype(np.float64)  # [nk, D]
            v_mat = kv[blocks, g, slots, d:].astype(np.float64)  # [nk, D]
            if fp8:  # scale * value in float64: the scales of these slots only
                for mat, s in ((k_mat, k_scale), (v_mat, v_scale)):
                    mat *= (s.astype(np.float64) if s.ndim == 0
                            else s[blocks, g, slots].astype(np.float64)[:, None])
            for t in visible_tokens:
                a = np.searchsorted(keys, lo[t], side="left")
                b = np.searchsorted(keys, qpos[t], side="right")
                if b <= a:
                    continue  # every visible key absent: zero row
                kt, vt = k_mat[a:b], v_mat[a:b]
                for j in range(qpk):
                    h = g * qpk + j
                    s = scale * (kt @ q4[r, t, h])  # [nk]
                    s = s - s.max()
                    p = np.exp(s)
                    out[r, t, h] = (p @ vt) / p.sum()
    return out.reshape(qf.shape)


def verify_attention_drafts(q, kv_cache, block_table, seq_lens, *, scale, window=None,
                            num_reqs=None, tokens_per_request=8, draft_lens=None, tree_mask=None,
                            draft_depths=None, k_scale=None, v_scale=None):
    """The spec's ragged drafts, trees and lse, key by key: returns (out float64 of q's shape,
    lse float64 [NQ*R, Hq]). Written from the spec's words, independently of verify_attention
    above and of the library.

    Request r (< num_reqs) verifies n = clip(draft_lens[r], 0, NQ) drafts (NQ without
    draft_lens); its context is ctx = clip(seq_lens[r], 0, 16 P) - n keys and draft j's K/V is in
    slot ctx + j. Draft t (t < n, ctx + t >= 0) is at position ctx + depth_t (depth_t =
    clip(draft_depths[r, t], 0, NQ - 1), or t) and sees: every context key k < ctx, and every
    draft j < n with ctx + j >= 0 that its mask row allows (bit j of tree_mask[r, t], or j <= t
    without a tree mask); with a window, only keys whose position kpos (k for context key k,
    ctx + depth_j for draft j) has qpos - kpos < window. A key in a block whose id is outside
    [0, num_blocks) is absent. lse = ln(sum exp(scale q.k)) over what the row sees, -inf when
    it sees nothing (then the row is zero).
    """
    kv = np.asarray(kv_cache)
    fp8 = k_scale is not None
    if fp8:
        k_scale, v_scale = np.asarray(k_scale), np.asarray(v_scale)
    bt = np.asarray(block_table).astype(np.int64)
    sl = np.asarray(seq_lens).astype(np.int64)
    num_blocks, hkv, page, two_d = kv.shape
    d = two_d // 2
    nq = tokens_per_request
    qf = _as_f64(q)
    rows = qf.shape[0]
    r_total = rows // nq
    hq = qf.size // (rows * d)
    qpk = hq // hkv
    q4 = qf.reshape(r_total, nq, hq, d)
    capacity = PAGE * bt.shape[1]
    n_real = r_total if num_reqs is None else min(max(int(num_reqs), 0), r_total)
    dl = None if draft_lens is None else np.asarray(draft_lens).astype(np.int64)
    tm = None if tree_mask is None else np.asarray(tree_mask).astype(np.uint64)
    dd = None if draft_depths is None else np.asarray(draft_depths).astype(np.int64)

    out = np.zeros((r_total, nq, hq, d), np.float64)
    lse = np.full((r_total, nq, hq), -np.inf, np.float64)
    for r in range(n_real):
        n = nq if dl is None else min(max(int(dl[r]), 0), nq)
        seq_len = min(max(int(sl[r]), 0), capacity)
        ctx = seq_len - n
        depth = [t if dd is None else min(max(int(dd[r, t]), 0), nq - 1) for t in range(nq)]
        for t in range(n):
            if ctx + t < 0:
                continue  # this draft's own K/V is not in the cache
            qpos = ctx + depth[t]
            keys = [k for k in range(max(ctx, 0))
                    if window is None or qpos - k < window]
            for j in range(n):
                if ctx + j < 0:
                    continue
                allowed = (j <= t) if tm is None else bool((int(tm[r, t]) >> j) & 1)
                if allowed and (window is None or qpos - (ctx + depth[j]) < window):
                    keys.append(ctx + j)
            keys = np.array(keys, np.int64)
            if not len(keys):
                continue
            blocks = bt[r, keys // PAGE]
            present = (blocks >= 0) & (blocks < num_blocks)
            keys, blocks = keys[present], blocks[present]
            if not len(keys):
                continue
            slots = keys % PAGE
            for g in range(hkv):
                k_mat = kv[blocks, g, slots, :d].astype(np.float64)
                v_mat = kv[blocks, g, slots, d:].astype(np.float64)
                if fp8:
                    for mat, s in ((k_mat, k_scale), (v_mat, v_scale)):
                        mat *= (s.astype(np.float64) if s.ndim == 0
                                else s[blocks, g, slots].astype(np.float64)[:, None])
                for i in range(qpk):
                    h = g * qpk + i
                    s = scale * (k_mat @ q4[r, t, h])
                    top = s.max()
                    p = np.exp(s - top)
                    out[r, t, h] = (p @ v_mat) / p.sum()
                    lse[r, t, h] = top + np.log(p.sum())
    return out.reshape(qf.shape), lse.reshape(rows, hq)


def merge_states(out_a, lse_a, out_b, lse_b):
    """float64 merge of two results over disjoint keys (rows [..., H, D], lse [..., H])."""
    out_a, out_b = _as_f64(out_a), _as_f64(out_b)
    lse_a, lse_b = np.asarray(lse_a, np.float64), np.asarray(lse_b, np.float64)
    lse = np.logaddexp(lse_a, lse_b)
    with np.errstate(invalid="ignore"):
        wa = np.where(np.isneginf(lse_a), 0.0, np.exp(lse_a - lse))
        wb = np.where(np.isneginf(lse_b), 0.0, np.exp(lse_b - lse))
    # An empty side's rows are not read (they may hold anything).
    with np.errstate(invalid="ignore"):
        out = (np.where(np.isneginf(lse_a)[..., None], 0.0, wa[..., None] * out_a)
               + np.where(np.isneginf(lse_b)[..., None], 0.0, wb[..., None] * out_b))
    return out, lse
