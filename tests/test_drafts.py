"""Ragged drafts, token trees, lse and merge_attention_states (README, Drafts and trees): every
feature against the float64 oracle (oracle.verify_attention_drafts) on both backends, the
chain reproduced bit for bit, the new never-read rules under NaN poison, malformed run-time data
contained, the packed form, vmap / jit, and the trace-time errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_muse_attn
import oracle
from jax_muse_attn import _ffi
from conftest import INT32_MAX, INT32_MIN, PAGE, assert_close, bits, make_case

NQ = 8
# lse against the float64 oracle: fp32 scores of the same bf16 inputs; an FP8 cache's K is
# also rounded to bf16 by every backend (the oracle does not), up to ~2^-9 of each score.
LSE_TOL = {"bfloat16": 2e-3, "fp8": 2e-2}


def causal_masks(r, nq=NQ):
    return np.tile(((2 << np.arange(nq, dtype=np.uint64)) - 1).astype(np.uint32), (r, 1))


def random_trees(rng, r, nq=NQ, junk_bits=True):
    """(tree_mask uint32 [r, nq], draft_depths int32 [r, nq]) of random trees: draft t > 0
    hangs under an earlier draft; a row's mask holds its ancestors and itself. With junk_bits,
    bits at and past nq are set at random (they must be ignored)."""
    mask = np.zeros((r, nq), np.uint64)
    depth = np.zeros((r, nq), np.int64)
    for i in range(r):
        for t in range(nq):
            if t == 0:
                mask[i, t] = 1
                continue
            parent = int(rng.integers(0, t))
            mask[i, t] = mask[i, parent] | (1 << t)
            depth[i, t] = depth[i, parent] + 1
    if junk_bits:
        mask |= (rng.integers(0, 2**32, size=(r, nq), dtype=np.uint64) >> nq) << nq
    return mask.astype(np.uint32), depth.astype(np.int32)


def run(c, backend, **kw):
    return c.run(backend, return_lse=True, **kw)


def oracle_of(c, **kw):
    return oracle.verify_attention_drafts(
        c.q_np, c.kv_np, c.bt_np, c.sl_np, scale=c.scale, window=c.window, num_reqs=c.num_reqs,
        tokens_per_request=c.NQ, k_scale=c.k_scale_np, v_scale=c.v_scale_np,
        **{k: None if v is None else np.asarray(v) for k, v in kw.items()})


def assert_lse(lse, ref, tol=LSE_TOL["bfloat16"], what=""):
    lse, ref = np.asarray(lse, np.float64), np.asarray(ref, np.float64)
    assert lse.shape == ref.shape, (lse.shape, ref.shape)
    empty = np.isneginf(ref)
    assert (np.isneginf(lse) == empty).all(), (
        f"{what}: -inf rows differ at {np.argwhere(np.isneginf(lse) != empty)[:5].tolist()}")
    err = np.abs(lse[~empty] - ref[~empty])
    assert np.isfinite(lse[~empty]).all() and (err <= tol * (1 + np.abs(ref[~empty]))).all(), (
        f"{what}: lse max err {err.max():.3g}")


def check(c, backend, what="", lse_tol=LSE_TOL["bfloat16"], run_kw=None, **kw):
    """Runs backend with return_lse on c with the draft arguments kw (and run_kw); checks out
    and lse against the oracle. Returns (out, lse)."""
    out, lse = run(c, backend, **(run_kw or {}),
                   **{k: None if v is None else jnp.asarray(v) for k, v in kw.items()})
    ref, ref_lse = oracle_of(c, **kw)
    assert_close(out, ref, q_shape=c.q.shape, what=f"{backend} {what}")
    assert lse.shape == (c.q.shape[0], c.q.shape[1]) and lse.dtype == jnp.float32
    assert_lse(lse, ref_lse, lse_tol, what=f"{backend} {what}")
    return out, lse


def poison_rows(c, counts):
    """c with NaN in q's rows past each request's count (they must not be read)."""
    q = np.array(c.q_np, np.float32)
    for r, n in enumerate(counts):
        q[NQ * r + min(max(int(n), 0), NQ): NQ * (r + 1)] = np.nan
    q_j = jnp.asarray(q, jnp.bfloat16)
    c.q, c.q_np = q_j, np.asarray(q_j)
    return c


LENS = [300, 37, 3, 1000, 64]


@pytest.mark.parametrize("window", [None, 40])
def test_ragged_drafts(rng, backend, window):
    counts = np.array([3, 8, 5, 0, 1], np.int32)
    c = poison_rows(make_case(rng, 5, LENS, P=64, window=window), counts)
    out, lse = check(c, backend, "ragged", draft_lens=counts)
    o = np.asarray(out).astype(np.float32).reshape(5, NQ, -1)
    for r, n in enumerate(counts):  # rows past a count: exactly zero, lse -inf
        assert not o[r, n:].any() and np.isneginf(np.asarray(lse).reshape(5, NQ, -1)[r, n:]).all()
    assert o[0, :3].any()


@pytest.mark.parametrize("tree", [False, True])
@pytest.mark.parametrize("num_splits", [1, 3, 16])
def test_balanced_cut_of_drafts(rng, monkeypatch, tree, num_splits):
    """The balanced cut counts a request's tiles from its draft count (none without drafts), as
    its split CTAs do."""
    monkeypatch.setenv("MUSE_ATTN_LAUNCH", "balance_segments=1")
    r = 5
    counts = np.array([8, 0, 3, 5, 1], np.int32)
    c = poison_rows(make_case(rng, r, LENS, P=64), counts)
    kw = dict(draft_lens=counts)
    if tree:
        kw["tree_mask"], kw["draft_depths"] = random_trees(rng, r)
    check(c, "ffi", f"balanced tree={tree}", run_kw=dict(num_splits=num_splits), **kw)


@pytest.mark.parametrize("window,num_splits", [(None, None), (2, 2), (3, None), (5, 3), (40, 1),
                                               (300, 7)])
def test_trees(rng, backend, window, num_splits):
    """Random trees (junk bits past NQ), random counts, a window applied by position; rows past
    a count NaN."""
    r = 5
    mask, depth = random_trees(rng, r)
    counts = np.array([8, 5, 3, 0, 7], np.int32)
    c = poison_rows(make_case(rng, r, LENS, P=64, window=window), counts)
    kw = dict(num_splits=num_splits) if backend == "ffi" else {}
    out, _ = check(c, backend, f"tree w{window}", run_kw=kw, draft_lens=counts, tree_mask=mask,
                   draft_depths=depth)
    chain = c.run(backend, draft_lens=jnp.asarray(counts))
    assert not np.array_equal(bits(out), bits(chain)), "the tree changed nothing (test bug)"


@pytest.mark.parametrize("split_kernel", ["per_tile", "two_tile"])
@pytest.mark.parametrize("window", [None, 5])
def test_each_split_kernel_of_the_drafts_target(rng, split_kernel, window, monkeypatch):
    """Ragged counts and a tree through each split kernel the drafts target has, forced (GPU;
    the CPU handler runs its one scheme), at 8 segments: two-tile segments of the longest
    request (the two-tile kernel's 128-key step), shorter ones elsewhere."""
    monkeypatch.setenv("MUSE_ATTN_LAUNCH", f"split_kernel={split_kernel}")
    r = 5
    mask, depth = random_trees(rng, r)
    counts = np.array([8, 5, 3, 0, 7], np.int32)
    c = poison_rows(make_case(rng, r, LENS, P=64, window=window), counts)
    plan = jax_muse_attn.launch_plan(c.q, c.kv, c.bt, window=window, num_splits=8, drafts=True)
    if _ffi.current_platform() != "cpu":
        assert plan["split_kernel"] == split_kernel, plan
    kw = dict(run_kw=dict(num_splits=8), draft_lens=counts)
    check(c, "ffi", f"ragged {split_kernel}", **kw)
    check(c, "ffi", f"tree {split_kernel}", tree_mask=mask, draft_depths=depth, **kw)


def test_tree_defaults(rng, backend):
    """tree_mask alone (depth = row), draft_depths alone (the causal mask), no draft_lens."""
    mask, depth = random_trees(rng, 3)
    c = make_case(rng, 3, [200, 90, 16], P=16, window=20)
    check(c, backend, "mask only", tree_mask=mask)
    check(c, backend, "depths only", draft_depths=depth)


@pytest.mark.parametrize("given", ["tree_mask", "draft_depths", "tree_mask,draft_depths"])
def test_tree_defaults_add_no_computation(rng, given):
    """A tree's absent operands reach the handler empty (the kernels make the defaults): filled
    in by the wrapper, each would be a broadcast of its own before every call."""
    mask, depth = random_trees(rng, 2)
    c = make_case(rng, 2, [90, 40], P=8)
    kw = {k: jnp.asarray(v) for k, v in (("tree_mask", mask), ("draft_depths", depth))
          if k in given.split(",")}
    f = jax.jit(lambda q, kv, kw: jax_muse_attn.verify_attention(q, kv, c.bt, c.sl, scale=c.scale,
                                                                backend="ffi", **kw))
    hlo = f.lower(c.q, c.kv, kw).compile().as_text()
    entry = hlo[hlo.index("ENTRY"):]
    assert "custom-call" in entry and "jax_muse_attn_verify_attention_drafts" in entry
    for op in ("broadcast", "fusion", "iota"):
        assert f" {op}(" not in entry, f"{given}: the call computes {op} besides the custom call"


def test_tree_without_diagonal_and_rows_that_see_nothing(rng, backend):
    """A row's own bit is not implied; a draft with no context and no bit is a zero row."""
    mask = np.zeros((2, NQ), np.uint32)
    mask[0] = causal_masks(1)[0] & ~(1 << np.arange(NQ)).astype(np.uint32)  # strict ancestors
    mask[1, 3] = 1 << 3
    c = make_case(rng, 2, [NQ, 100], P=8)  # request 0: no context
    out, lse = check(c, backend, "no diagonal", tree_mask=mask)
    assert not np.asarray(out[0]).astype(np.float32).any() and np.isneginf(lse[0]).all()
    assert np.asarray(out[1]).astype(np.float32).any()


@pytest.mark.parametrize("kv_dtype,scale_kind", [("float8_e4m3fn", "token"),
                                                 ("float8_e4m3fnuz", "tensor")])
@pytest.mark.parametrize("window", [None, 6])
def test_trees_fp8(rng, backend, kv_dtype, scale_kind, window):
    r = 3
    mask, depth = random_trees(rng, r)
    counts = np.array([8, 6, 4], np.int32)
    c = make_case(rng, r, [500, 40, 130], P=40, window=window, kv_dtype=kv_dtype,
                  scale_kind=scale_kind)
    check(c, backend, "fp8 tree", lse_tol=LSE_TOL["fp8"], draft_lens=counts, tree_mask=mask,
          draft_depths=depth)


# ------------------------------------------------------------------ the chain, bit for bit

@pytest.mark.parametrize("window,num_splits", [(None, None), (40, 3), (None, 1), (3, 2)])
def test_chain_is_reproduced_bit_for_bit(rng, backend, window, num_splits, monkeypatch):
    """draft_lens = NQ, the causal tree at depth = row, and return_lse leave the output's bits
    as the plain chain call's. On a GPU both run the drafts target's split kernel (per_tile):
    the chain's others sum in another order."""
    monkeypatch.setenv("MUSE_ATTN_LAUNCH", "split_kernel=per_tile")
    r = 5
    c = make_case(rng, r, LENS, P=64, window=window)
    kw = dict(num_splits=num_splits) if backend == "ffi" else {}
    base = c.run(backend, **kw)
    full = jnp.full((r,), NQ, jnp.int32)
    depth = jnp.asarray(np.tile(np.arange(NQ, dtype=np.int32), (r, 1)))
    for extra in (dict(draft_lens=full), dict(tree_mask=jnp.asarray(causal_masks(r))),
                  dict(tree_mask=jnp.asarray(causal_masks(r)), draft_depths=depth,
                       draft_lens=full)):
        np.testing.assert_array_equal(bits(c.run(backend, **kw, **extra)), bits(base))
        out, _ = c.run(backend, return_lse=True, **kw, **extra)
        np.testing.assert_array_equal(bits(out), bits(base))
    out, lse = c.run(backend, return_lse=True, **kw)
    np.testing.assert_array_equal(bits(out), bits(base))
    assert_lse(lse, oracle_of(c)[1])


@pytest.mark.parametrize("r,lens,pages,window", [(1, [2000], 128, None), (1, [30000], 2048, 2048),
                                                 (4, [9000, 8000, 7000, 9000], 576, None),
                                                 (2, [300, 37], 64, 40)])
def test_lse_alone_keeps_the_chain_plan(rng, r, lens, pages, window):
    """return_lse without drafts runs the chain's plan (on an H100 / H200: two_tile, ping-pong,
    per_tile by shape) and its output bits; only draft_lens or a tree take the drafts kernel."""
    c = make_case(rng, r, lens, P=pages, window=window)
    plan = jax_muse_attn.launch_plan(c.q, c.kv, c.bt, window=window)
    drafts_plan = jax_muse_attn.launch_plan(c.q, c.kv, c.bt, window=window, drafts=True)
    if _ffi.current_platform() != "cpu":  # the drafts target has per_tile and two_tile
        want = plan["split_kernel"] if plan["split_kernel"] == "two_tile" else "per_tile"
        assert drafts_plan["split_kernel"] == want, (plan, drafts_plan)
    base = c.run("ffi")
    out, lse = c.run("ffi", return_lse=True)
    np.testing.assert_array_equal(bits(out), bits(base))
    assert_lse(lse, oracle_of(c)[1])


def test_ragged_fp8_lse_of_a_chain(rng, backend):
    c = make_case(rng, 3, [700, 20, 9], P=48, window=100, kv_dtype="float8_e4m3fn",
                  scale_kind="token")
    check(c, backend, "fp8 ragged", lse_tol=LSE_TOL["fp8"], draft_lens=np.array([2, 8, 7], np.int32))


# ------------------------------------------------------------------ never read, never trusted

@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_draft_slots_no_row_sees_are_never_read(rng, backend, kv_dtype):
    """Drafts that no row of a tree sees (no bit anywhere, their own included): NaN in their
    K/V slots (FP8: NaN bytes and a NaN per-token scale) changes nothing."""
    r = 3
    mask, depth = random_trees(rng, r, junk_bits=False)
    hidden = [(0, 7), (0, 6), (1, 2), (2, 5)]  # leaves made invisible: clear their bits
    for i, j in hidden:
        mask[i] &= np.uint32(~(1 << j) & 0xFFFFFFFF)
        mask[i, j] = 0  # and their rows see nothing of the tree (the context still)
    # No remaining row may see a hidden draft through an ancestor path.
    for i, j in hidden:
        assert not (mask[i] >> j & 1).any()
    c = make_case(rng, r, [300, 50, 130], P=24, kv_dtype=kv_dtype, scale_kind="token")
    kv = np.array(c.kv_np)
    ks = None if c.k_scale_np is None else np.array(c.k_scale_np)
    for i, j in hidden:
        slot = int(c.sl_np[i]) - NQ + j
        blk = c.bt_np[i, slot // PAGE]
        if kv_dtype == "bfloat16":
            kv[blk, :, slot % PAGE] = np.nan
        else:
            kv.view(np.uint8)[blk, :, slot % PAGE] = 0x7F
            ks[blk, :, slot % PAGE] = np.nan
    clean, clean_lse = oracle_of(c, tree_mask=mask, draft_depths=depth)
    c.kv_np, c.kv = kv, jnp.asarray(kv)
    if ks is not None:
        c.k_scale_np, c.k_scale = ks, jnp.asarray(ks)
    out, lse = run(c, backend, tree_mask=jnp.asarray(mask), draft_depths=jnp.asarray(depth))
    assert_close(out, clean, q_shape=c.q.shape, what=f"{backend} poisoned unseen drafts")
    assert_lse(lse, clean_lse, LSE_TOL["bfloat16" if kv_dtype == "bfloat16" else "fp8"])


def test_malformed_run_time_draft_data_is_contained(rng, backend):
    """Counts past [0, NQ], depths past [0, NQ - 1], all 32 mask bits set, seq_lens shorter
    than the count: clamped as the oracle clamps, nothing out of bounds, no NaN."""
    r = 6
    counts = np.array([-5, 100, INT32_MIN, INT32_MAX, 8, 6], np.int32)
    depth = rng.choice(np.array([-3, 99, INT32_MIN, INT32_MAX, 0, 2, 7], np.int32), size=(r, NQ))
    mask = np.full((r, NQ), 0xFFFFFFFF, np.uint32)
    mask[3] = rng.integers(0, 2**32, size=NQ, dtype=np.uint64).astype(np.uint32)
    c = make_case(rng, r, [100, 90, 80, 200, 5, 3], P=16, window=30)
    check(c, backend, "malformed tree", draft_lens=counts, tree_mask=mask, draft_depths=depth)
    check(c, backend, "malformed ragged", draft_lens=counts)


def test_padding_requests_with_drafts(rng, backend):
    c = make_case(rng, 4, [200, 50, 70, 9], P=16, num_reqs=2)
    mask, depth = random_trees(rng, 4)
    out, lse = check(c, backend, "padding", draft_lens=np.array([4, 8, 8, 8], np.int32),
                     tree_mask=mask, draft_depths=depth)
    assert not np.asarray(out[2 * NQ:]).astype(np.float32).any()
    assert np.isneginf(np.asarray(lse[2 * NQ:])).all()


# ------------------------------------------------------------------ the packed form

def packed_of(c, counts, gap_rows=2):
    """The packed q of c's first counts[r] rows a request, with gap_rows NaN rows of nobody at
    the end; returns (q [T, Hq, D], query_start_loc)."""
    rows = [c.q_np[NQ * r: NQ * r + n] for r, n in enumerate(counts)]
    qsl = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    pad = np.full((gap_rows,) + c.q_np.shape[1:], np.nan, np.float32)
    q = np.concatenate([x.astype(np.float32) for x in rows] + [pad])
    return jnp.asarray(q, jnp.bfloat16), jnp.asarray(qsl)


@pytest.mark.parametrize("tree", [False, True])
def test_packed_equals_slot_form(rng, backend, tree):
    r = 4
    counts = np.array([3, 0, 8, 5], np.int32)
    c = poison_rows(make_case(rng, r, [90, 20, 300, 44], P=24, window=64), counts)
    kw = {}
    if tree:
        mask, depth = random_trees(rng, r)
        kw = dict(tree_mask=jnp.asarray(mask), draft_depths=jnp.asarray(depth))
    slot, slot_lse = c.run(backend, draft_lens=jnp.asarray(counts), return_lse=True, **kw)
    q, qsl = packed_of(c, counts)
    out, lse = jax_muse_attn.verify_attention_packed(
        q, c.kv, c.bt, c.sl, qsl, scale=c.scale, window=c.window, max_draft_len=NQ,
        backend=backend, return_lse=True, **kw)
    assert out.shape == q.shape and lse.shape == (q.shape[0], q.shape[1])
    t = 0
    for i, n in enumerate(counts):
        np.testing.assert_array_equal(bits(out[t:t + n]), bits(slot[NQ * i: NQ * i + n]))
        np.testing.assert_array_equal(np.asarray(lse[t:t + n]), np.asarray(slot_lse[NQ * i: NQ * i + n]))
        t += n
    assert not np.asarray(out[t:]).astype(np.float32).any() and np.isneginf(lse[t:]).all()
    only = jax_muse_attn.verify_attention_packed(q, c.kv, c.bt, c.sl, qsl, scale=c.scale,
                                                 window=c.window, backend=backend, **kw)
    np.testing.assert_array_equal(bits(only), bits(out))


@pytest.mark.parametrize("qsl", [
    [0, 5, 3, 30, 40],            # non-monotone, past T, a count past NQ
    [INT32_MIN, -1, INT32_MAX, 2, 2],
    [4, 4, 4, 4, 4],               # nobody
    [0, 12, 13, 13, 22],           # request 0 claims 12 rows: its first 8 count
])
def test_packed_query_start_loc_garbage_is_contained(rng, backend, qsl):
    r, t_rows = 4, 22
    c = make_case(rng, r, [90, 20, 300, 44], P=24)
    q = jnp.asarray(rng.standard_normal((t_rows,) + c.q_np.shape[1:]), jnp.bfloat16)
    out, lse = jax_muse_attn.verify_attention_packed(
        q, c.kv, c.bt, c.sl, jnp.asarray(qsl, jnp.int32), scale=c.scale, backend=backend,
        return_lse=True)
    # The documented rule, in numpy: starts clamped then made non-decreasing; counts <= NQ.
    s = np.maximum.accumulate(np.clip(np.asarray(qsl, np.int64), 0, t_rows))
    counts = np.minimum(np.diff(s), NQ)
    slots = np.zeros((NQ * r,) + c.q_np.shape[1:], np.float32)
    owner = np.full(t_rows, -1)
    for i in range(r):
        slots[NQ * i: NQ * i + counts[i]] = np.asarray(q[s[i]: s[i] + counts[i]], np.float32)
        owner[s[i]: s[i] + counts[i]] = NQ * i + np.arange(counts[i])
    ref, ref_lse = oracle.verify_attention_drafts(
        jnp.asarray(slots, jnp.bfloat16), c.kv_np, c.bt_np, c.sl_np, scale=c.scale,
        draft_lens=counts)
    want = np.where((owner >= 0)[:, None, None], ref[np.maximum(owner, 0)], 0.0)
    want_lse = np.where((owner >= 0)[:, None], ref_lse[np.maximum(owner, 0)], -np.inf)
    assert_close(out, want, q_shape=q.shape, what=f"packed {qsl}")
    assert_lse(lse, want_lse)


# ------------------------------------------------------------------ lse and merging

def split_table(c, first_pages):
    """Two block tables of c: keys in pages < first_pages only, and the others only (the rest
    of each marked absent): the same requests over disjoint keys."""
    a, b = c.bt_np.copy(), c.bt_np.copy()
    a[:, first_pages:] = -1
    b[:, :first_pages] = -1
    return jnp.asarray(a), jnp.asarray(b)


@pytest.mark.parametrize("tree", [False, True])
def test_merge_of_two_calls_over_disjoint_keys_is_one_call(rng, backend, tree):
    r = 4
    c = make_case(rng, r, [400, 70, 10, 260], P=32, window=None)
    kw = dict(draft_lens=jnp.asarray(np.array([8, 5, 8, 2], np.int32)))
    if tree:
        mask, depth = random_trees(rng, r)
        kw.update(tree_mask=jnp.asarray(mask), draft_depths=jnp.asarray(depth))
    bt_a, bt_b = split_table(c, 3)  # request 2 (10 keys): all in part a; part b has none
    parts = [jax_muse_attn.verify_attention(c.q, c.kv, bt, c.sl, scale=c.scale, backend=backend,
                                            return_lse=True, **kw) for bt in (bt_a, bt_b)]
    out, lse = jax_muse_attn.merge_attention_states(*parts[0], *parts[1])
    ref, ref_lse = oracle_of(c, **{k: np.asarray(v) for k, v in kw.items()})
    assert out.dtype == jnp.bfloat16
    assert_close(out, ref, q_shape=c.q.shape, what="merged")
    assert_lse(lse, ref_lse)
    whole, whole_lse = c.run(backend, return_lse=True, **kw)
    np.testing.assert_allclose(np.asarray(lse), np.asarray(whole_lse), rtol=1e-5, atol=1e-5)
    # request 2 saw nothing in part b: the merge passes part a's rows through bit for bit
    rows = slice(2 * NQ, 3 * NQ)
    assert np.isneginf(parts[1][1][rows]).all()
    np.testing.assert_array_equal(bits(out[rows]), bits(parts[0][0][rows]))


def test_merge_attention_states_rules(rng):
    n, h, d = 6, 3, 8
    oa = rng.standard_normal((n, h, d)).astype(np.float32)
    ob = rng.standard_normal((n, h, d)).astype(np.float32)
    la = rng.uniform(-5, 5, (n, h)).astype(np.float32)
    lb = rng.uniform(-5, 5, (n, h)).astype(np.float32)
    la[0], lb[1] = -np.inf, -np.inf  # one side empty
    la[2], lb[2] = -np.inf, -np.inf  # both empty
    oa[0] = np.nan  # an empty side's rows are never read
    ob[2] = np.inf
    la[3, 0], lb[3, 0] = 80.0, -80.0  # far apart: no overflow, no underflow to NaN
    out, lse = jax_muse_attn.merge_attention_states(jnp.asarray(oa), jnp.asarray(la),
                                                    jnp.asarray(ob), jnp.asarray(lb))
    ref, ref_lse = oracle.merge_states(oa, la, ob, lb)
    assert out.dtype == jnp.float32 and lse.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(lse), ref_lse, rtol=1e-6)
    assert not np.asarray(out[2]).any() and np.isneginf(lse[2]).all()
    np.testing.assert_array_equal(np.asarray(out[0]), ob[0])
    # bf16 rows with the heads folded into D (a 2-D q), under jit
    f = jax.jit(jax_muse_attn.merge_attention_states)
    o2, l2 = f(jnp.asarray(oa.reshape(n, h * d), jnp.bfloat16), jnp.asarray(la),
               jnp.asarray(ob.reshape(n, h * d), jnp.bfloat16), jnp.asarray(lb))
    assert o2.dtype == jnp.bfloat16 and o2.shape == (n, h * d)
    ref16, _ = oracle.merge_states(np.asarray(jnp.asarray(oa, jnp.bfloat16), np.float32), la,
                                   np.asarray(jnp.asarray(ob, jnp.bfloat16), np.float32), lb)
    np.testing.assert_allclose(np.asarray(o2, np.float32).reshape(n, h, d), ref16, rtol=1e-2,
                               atol=1e-2)


# ------------------------------------------------------------------ transforms

def test_vmap_and_jit(rng, backend):
    r = 3
    cases = [make_case(rng, r, [120, 40, 9], P=10, window=24) for _ in range(2)]
    trees = [random_trees(rng, r) for _ in range(2)]
    counts = [np.array([8, 3, 0], np.int32), np.array([1, 8, 6], np.int32)]

    def one(q, kv, bt, sl, dl, tm, dd):
        return jax_muse_attn.verify_attention(q, kv, bt, sl, scale=cases[0].scale, window=24,
                                              backend=backend, draft_lens=dl, tree_mask=tm,
                                              draft_depths=dd, return_lse=True)

    args = [(c.q, c.kv, c.bt, c.sl, jnp.asarray(n), jnp.asarray(t[0]), jnp.asarray(t[1]))
            for c, n, t in zip(cases, counts, trees)]
    singles = [jax.jit(one)(*a) for a in args]
    batched = jax.jit(jax.vmap(one))(*(jnp.stack(x) for x in zip(*args)))
    # The kernels are bitwise the same batched; the jnp reference on a GPU sums in XLA's order,
    # which batching may change by an ulp (of the lse, and of a bf16 output element).
    exact = backend == "ffi" or _ffi.current_platform() == "cpu"

    def same_out(a, b):
        if exact:
            np.testing.assert_array_equal(bits(a), bits(b))
        else:
            a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
            np.testing.assert_allclose(a, b, rtol=2.0**-7, atol=0)

    for i, (out, lse) in enumerate(singles):
        same_out(batched[0][i], out)
        if exact:
            np.testing.assert_array_equal(np.asarray(batched[1][i]), np.asarray(lse))
        else:
            np.testing.assert_allclose(np.asarray(batched[1][i]), np.asarray(lse), rtol=1e-6, atol=0)
        ref, ref_lse = oracle_of(cases[i], draft_lens=counts[i], tree_mask=trees[i][0],
                                 draft_depths=trees[i][1])
        assert_close(out, ref, what=f"element {i}")
        assert_lse(lse, ref_lse)
    # a batch of draft_lens over one shared problem
    c = cases[0]
    f = jax.vmap(lambda dl: jax_muse_attn.verify_attention(
        c.q, c.kv, c.bt, c.sl, scale=c.scale, window=24, backend=backend, draft_lens=dl))
    outs = f(jnp.asarray(np.stack(counts)))
    for i in range(2):
        same_out(outs[i], c.run(backend, draft_lens=jnp.asarray(counts[i])))


# ------------------------------------------------------------------ refusals

def _tiny(rng):
    return make_case(rng, 2, [40, 20], P=4, poison=False)


ERRORS = [
    (dict(draft_lens=np.zeros((2,), np.int64)), TypeError, "draft_lens must be of dtype int32"),
    (dict(draft_lens=np.zeros((3,), np.int32)), ValueError, r"draft_lens must be of shape \(2,\)"),
    (dict(draft_lens=[8, 8]), TypeError, r"draft_lens must be None or an array \(dtype int32, shape \(2,\)\), got list"),
    (dict(tree_mask=np.zeros((2, NQ), np.int32)), TypeError, "tree_mask must be of dtype uint32"),
    (dict(tree_mask=np.zeros((2, 4), np.uint32)), ValueError, r"tree_mask must be of shape \(2, 8\)"),
    (dict(draft_depths=np.zeros((2, NQ), np.uint32)), TypeError, "draft_depths must be of dtype int32"),
    (dict(draft_depths=np.zeros((NQ,), np.int32)), ValueError, r"draft_depths must be of shape \(2, 8\).*got shape \(8,\)"),
    (dict(return_lse=1), TypeError, "return_lse must be a Python bool, got int 1"),
]


@pytest.mark.parametrize("kw,exc,match", ERRORS)
def test_bad_draft_arguments(rng, kw, exc, match):
    c = _tiny(rng)
    for fn in (jax_muse_attn.verify_attention, jax_muse_attn.reference.verify_attention):
        with pytest.raises(exc, match=match):
            fn(c.q, c.kv, c.bt, c.sl, scale=c.scale, **kw)


def test_bad_packed_and_merge_arguments(rng):
    c = _tiny(rng)
    q = c.q[:5]
    packed = jax_muse_attn.verify_attention_packed
    with pytest.raises(TypeError, match="query_start_loc must be of dtype int32, got int64"):
        packed(q, c.kv, c.bt, c.sl, np.array([0, 2, 5], np.int64), scale=c.scale)
    with pytest.raises(ValueError, match=r"query_start_loc must be \[R \+ 1\].*got shape \(1,\)"):
        packed(q, c.kv, c.bt, c.sl, np.array([0], np.int32), scale=c.scale)
    with pytest.raises(ValueError, match="max_draft_len must be an int in .1, 16., got 17"):
        packed(q, c.kv, c.bt, c.sl, np.array([0, 2, 5], np.int32), scale=c.scale,
               max_draft_len=17)
    with pytest.raises(TypeError, match="q must be of dtype bfloat16, got float32"):
        packed(q.astype(jnp.float32), c.kv, c.bt, c.sl, np.array([0, 2, 5], np.int32),
               scale=c.scale)
    with pytest.raises(ValueError, match=r"tree_mask must be of shape \(2, 8\)"):
        packed(q, c.kv, c.bt, c.sl, np.array([0, 2, 5], np.int32), scale=c.scale,
               tree_mask=np.zeros((2, 4), np.uint32))
    merge = jax_muse_attn.merge_attention_states
    o, l = jnp.zeros((4, 2, 8)), jnp.zeros((4, 2))
    with pytest.raises(TypeError, match="lse_b must be of dtype float32, got bfloat16"):
        merge(o, l, o, l.astype(jnp.bfloat16))
    with pytest.raises(ValueError, match=r"out_b must have out_a's dtype and shape"):
        merge(o, l, o[:3], l)
    with pytest.raises(ValueError, match=r"lse_a must be out_a's shape.*\(4, 2, 8\).*\(4, 3\)"):
        merge(o, jnp.zeros((4, 3)), o, jnp.zeros((4, 3)))
    with pytest.raises(TypeError, match="out_a must be of a floating dtype, got int32"):
        merge(o.astype(jnp.int32), l, o.astype(jnp.int32), l)


def test_gpu_kernels_refuse_draft_arguments_at_trace_time(rng, monkeypatch):
    """Where a platform's handler lacks the drafts target, draft arguments and return_lse are a
    NotImplementedError naming them; the chain call goes on to that handler."""
    c = _tiny(rng)
    monkeypatch.setattr(_ffi, "current_platform", lambda: "CUDA")
    monkeypatch.setitem(_ffi.REGISTERED, "CUDA", object())
    monkeypatch.delitem(_ffi.DRAFTS_REGISTERED, "CUDA", raising=False)
    for kw in (dict(draft_lens=jnp.full((2,), 3, jnp.int32)), dict(return_lse=True),
               dict(tree_mask=jnp.asarray(causal_masks(2)))):
        with pytest.raises(NotImplementedError, match="CUDA kernels do not take draft_lens"):
            jax.jit(lambda q: jax_muse_attn.verify_attention(
                q, c.kv, c.bt, c.sl, scale=c.scale, backend="ffi", **kw)).lower(c.q)
    with pytest.raises(NotImplementedError, match="backend='reference'"):
        jax_muse_attn.verify_attention_packed(c.q[:5], c.kv, c.bt, c.sl,
                                              jnp.array([0, 2, 5], jnp.int32), scale=c.scale)
