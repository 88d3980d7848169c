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
