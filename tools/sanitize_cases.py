"""A representative set of verify_attention calls on the FFI backend, each checked against the
jnp reference: run it under compute-sanitizer (memcheck, racecheck) on a GPU machine.

    XLA_FLAGS=--xla_gpu_autotune_level=0 compute-sanitizer --tool memcheck python tools/sanitize_cases.py

XLA's autotuner must be off under compute-sanitizer: with it on, the tool crashes inside the JAX
process before any report (the autotuner's delay kernel times out under the tool).
SANITIZE_QUICK=1 runs a short set, one case of each kind.
"""

import os
import sys

import jax.numpy as jnp
import numpy as np

import jax_muse_attn as jma

rng = np.random.default_rng(1)


# An FP8 NaN byte (e4m3fn 0x7F, e4m3fnuz 0x80) where the bf16 cases plant NaN or Inf.
FP8_NAN = {"float8_e4m3fn": 0x7F, "float8_e4m3fnuz": 0x80}


def tree(R, nq=8):
    """Draft arguments with bad run-time data: counts outside [0, nq], random trees with junk
    bits past nq, odd depths, and draft 2 seen by no row (its K/V slot is never read)."""
    counts = np.array([[-3, nq, 5, 99, 0, 1][r % 6] for r in range(R)], np.int32)
    mask = np.zeros((R, nq), np.uint64)
    depth = np.zeros((R, nq), np.int32)
    for r in range(R):
        for t in range(nq):
            parent = int(rng.integers(0, t)) if t else t
            mask[r, t] = (mask[r, parent] if t else 0) | (1 << t)
            depth[r, t] = depth[r, parent] + (t > 0)
    mask &= ~np.uint64(1 << 2)
    mask |= (rng.integers(0, 2**32, size=(R, nq), dtype=np.uint64) >> nq) << nq
    return counts, mask.astype(np.uint32), depth


def case(R, lens, pages, window=None, num_reqs=None, bad_ids=False, hq=16, hkv=2, d=64, fp8=None,
         drafts=False, launch="", num_splits=None):
    """fp8: None (bf16), or (format, "tensor" | "token") for an FP8 cache with those scales.
    drafts: ragged counts and a token tree (tree()), lse returned; q rows past a count and the
    K/V slot of a draft no row sees are NaN. launch: a MUSE_ATTN_LAUNCH override for this call (else
    the environment's, if any)."""
    blocks = R * pages + 5
    kv = rng.standard_normal((blocks, hkv, 16, 2 * d)).astype(np.float32)
    table = rng.permutation(blocks)[: R * pages].reshape(R, pages).astype(np.int32)
    lens = np.asarray(lens, np.int32)
    # Poison every slot past seq_len and before the window; stale ids outside the live range.
    for r in range(R):
        n = int(np.clip(lens[r], 0, 16 * pages))
        lo = max(0, n - 8 - window + 1) if window else 0
        for p in range(pages):
            if (p + 1) * 16 <= lo or p * 16 >= n:
                kv[table[r, p]] = np.nan
                table[r, p] = [-7, 1 << 30, -(1 << 30)][p % 3]
            else:
                for s in range(16):
                    if not lo <= p * 16 + s < n:
                        kv[table[r, p], :, s] = np.inf
    q = rng.standard_normal((8 * R, hq, d)).astype(np.float32)
    kw = dict(scale=d ** -0.5, window=window, num_reqs=num_reqs)
    if drafts:
        counts, mask, depth = tree(R)
        for r in range(R):
            m = int(np.clip(counts[r], 0, 8))
            q[8 * r + m: 8 * r + 8] = np.nan
            slot = int(np.clip(lens[r], 0, 16 * pages)) - m + 2  # draft 2's key
            if 2 < m <= lens[r] and table[r, slot // 16] >= 0:
                kv[table[r, slot // 16], :, slot % 16] = np.nan
        kw.update(draft_lens=jnp.asarray(counts), tree_mask=jnp.asarray(mask),
                  draft_depths=jnp.asarray(depth), return_lse=True)
    if bad_ids:
        table[0, 0] = blocks + 3
    if fp8 is None:
        cache = jnp.asarray(kv, jnp.bfloat16)
    else:
        fmt, kind = fp8
        poisoned = ~np.isfinite(kv)
        bits = np.array(jnp.asarray(np.where(poisoned, 0.0, kv * 8), fmt)).view(np.uint8)
        bits[poisoned] = FP8_NAN[fmt]
        cache = jnp.asarray(bits).view(fmt)
        if kind == "tensor":
            ks, vs = jnp.float32(0.125), jnp.float32(0.0625)
        else:  # per (token, KV head); NaN scales on blocks no request reads
            ks = rng.uniform(0.05, 0.2, (blocks, hkv, 16)).astype(np.float32)
            vs = rng.uniform(0.05, 0.2, (blocks, hkv, 16)).astype(np.float32)
            unread = np.setdiff1d(np.arange(blocks), table[table >= 0])
            ks[unread], vs[unread] = np.nan, np.inf
            ks, vs = jnp.asarray(ks), jnp.asarray(vs)
        kw.update(k_scale=ks, v_scale=vs)
    args = (jnp.asarray(q, jnp.bfloat16), cache, jnp.asarray(table), jnp.asarray(lens))
    ambient = os.environ.get("MUSE_ATTN_LAUNCH")
    if launch:  # read when the call is traced; the caller's own override stays for the rest
        os.environ["MUSE_ATTN_LAUNCH"] = launch
    try:
        got = jma.verify_attention(*args, backend="ffi", num_splits=num_splits, **kw)
    finally:
        if launch:
            os.environ.pop("MUSE_ATTN_LAUNCH", None)
            if ambient is not None:
                os.environ["MUSE_ATTN_LAUNCH"] = ambient
    want = jma.reference.verify_attention(*args, **kw)
    if not drafts:
        got, want = [got], [want]
    ok = True
    for g, w in zip(got, want):  # out (and lse): -inf where both are
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        with np.errstate(invalid="ignore"):
            ok &= bool(np.all((g == w) | (np.abs(g - w) <= 1e-2 + 2e-2 * np.abs(w))))
    print(f"R={R} lens={list(lens)[:4]} window={window} num_reqs={num_reqs} bad_ids={bad_ids} fp8={fp8} "
          f"drafts={drafts} launch={launch!r} splits={num_splits}: "
          f"{'ok' if ok else 'MISMATCH'}", flush=True)
    return ok


ok = True
if os.environ.get("SANITIZE_QUICK"):  # a short set for slow tools: one case of each kind
    ok &= case(2, [700, 130], 48, bad_ids=True)
    ok &= case(16, list(rng.integers(0, 600, 16)), 40, window=128, num_reqs=11)
    ok &= case(3, [900, 40, 2100], 140, window=256, num_reqs=2, fp8=("float8_e4m3fn", "token"))
    ok &= case(6, [900, 40, 2100, 7, 0, 300], 140, window=256, num_reqs=5, drafts=True)
    ok &= case(3, [2100, 99999, 700], 160, bad_ids=True, fp8=("float8_e4m3fnuz", "tensor"),
               launch="split_kernel=pingpong_two_pairs", num_splits=3)
    ok &= case(5, [4000, 0, 130, 99999, 900], 256, bad_ids=True, num_reqs=4,
               launch="balance_segments=1,split_kernel=pingpong_two_pairs", num_splits=3)
    ok &= case(5, [4000, 0, 5, 99999, 900], 256, window=300, num_reqs=4, bad_ids=True,
               launch="split_kernel=pingpong", num_splits=1)
    print("ALL OK" if ok else "FAILURES")
    sys.exit(0 if ok else 1)
ok &= case(1, [700], 48)
ok &= case(2, [3000, 9], 200, window=2048)
ok &= case(4, [0, 5, 130, 4000], 256, num_reqs=2)
ok &= case(3, [1000, 99999, -5], 64, bad_ids=True)
ok &= case(16, list(rng.integers(0, 2100, 16)), 136, window=128)
ok &= case(2, [513, 1500], 96, hq=8, hkv=1, d=128)
ok &= case(2, [700, 130], 48, bad_ids=True, fp8=("float8_e4m3fn", "tensor"))
ok &= case(4, [0, 5, 1300, 4000], 256, window=2048, num_reqs=3, fp8=("float8_e4m3fn", "token"))
ok &= case(3, [1000, 99999, -5], 64, bad_ids=True, fp8=("float8_e4m3fnuz", "token"))
ok &= case(2, [513, 1500], 96, hq=8, hkv=1, d=128, fp8=("float8_e4m3fnuz", "tensor"))
# The FP8 ping-pong kernels (one pair, two pairs a CTA): odd tile counts a team, the hand-over.
ok &= case(4, [0, 5, 1300, 4000], 256, window=2048, num_reqs=3, bad_ids=True, fp8=("float8_e4m3fn", "token"),
           launch="split_kernel=pingpong", num_splits=2)
ok &= case(3, [2100, 99999, 700], 160, bad_ids=True, fp8=("float8_e4m3fnuz", "tensor"),
           launch="split_kernel=pingpong_two_pairs", num_splits=3)
# One split by the one-pair ping-pong kernel: over a bf16 cache the split kernel writes the output
# (no merge; zero rows for padding, empty requests and rows with no key), over an FP8 one the
# partials and the merge.
ok &= case(5, [4000, 0, 5, 99999, 900], 256, window=300, num_reqs=4, bad_ids=True,
           launch="split_kernel=pingpong", num_splits=1)
ok &= case(4, [0, 5, 1300, 4000], 256, num_reqs=3, fp8=("float8_e4m3fn", "tensor"), launch="split_kernel=pingpong",
           num_splits=1)
ok &= case(6, [700, 3000, 9, 1300, 5, 4000], 256, drafts=True)
ok &= case(6, [700, 3000, 9, 1300, 5, 4000], 256, window=5, num_reqs=5, bad_ids=True, drafts=True)
ok &= case(6, [2000, 130, 64, 999, 17, 600], 128, window=300, drafts=True, fp8=("float8_e4m3fn", "token"))
ok &= case(6, [2000, 130, 64, 999, 17, 600], 128, hq=8, hkv=1, d=128, drafts=True,
           fp8=("float8_e4m3fnuz", "tensor"))
# The balanced cut: a request's segments in the batch's pool slots (per_tile, both ping-pong
# kernels, FP8, drafts, D = 128), with padding, empty requests and bad ids.
ok &= case(5, [4000, 0, 130, 99999, 900], 256, bad_ids=True, num_reqs=4, launch="balance_segments=1",
           num_splits=3)
ok &= case(5, [4000, 0, 130, 99999, 900], 256, window=700, launch="balance_segments=1,split_kernel=pingpong",
           num_splits=2, fp8=("float8_e4m3fn", "token"))
ok &= case(5, [4000, 0, 130, 3000, 900], 256, launch="balance_segments=1,split_kernel=pingpong_two_pairs",
           num_splits=5)
ok &= case(6, [700, 3000, 9, 1300, 5, 4000], 256, num_reqs=5, drafts=True, launch="balance_segments=1",
           num_splits=4)
ok &= case(2, [513, 1500], 96, hq=8, hkv=1, d=128, launch="balance_segments=1", num_splits=3)
print("ALL OK" if ok else "FAILURES")
sys.exit(0 if ok else 1)
