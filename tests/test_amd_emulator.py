"""The HIP kernels for gfx942 and gfx950, executed on the CPU by the wave64 emulator
(ffi/gpu/emu), against the float64 oracle: the cases the GPU suite covers, every split count up
to 40 (so every merge width runs), every launch-plan branch the AMD plan can take, under both
schedules (lockstep and wave-serial); the MFMA lane layouts against a plain matmul; the
emulator's own checks; one run under AddressSanitizer and UBSan. Skips where no clang 17+ is
installed (Debian: clang-19, as .ci/install_gpu_compilers.sh installs it)."""

import dataclasses
import os
import subprocess

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amd_emulator as ae
from conftest import FP8_DTYPES, PAGE, SCALE_KINDS, assert_close, make_case
from jax_muse_attn import _ffi, _validate

pytestmark = pytest.mark.skipif(ae.find_clang() is None,
                                reason="no clang++ 17+ for the AMD emulator (apt-get install clang-19)")


@pytest.fixture(scope="session")
def emu_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("amd_emulator"))


@pytest.fixture(scope="session", params=ae.TARGETS)
def emu(request, emu_dir):
    return ae.Emulator(ae.build(request.param, emu_dir))


def as_f64(bits, shape):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(
        np.float64).reshape(shape)


def plan_for(emu, c, num_splits=0, overrides=""):
    shapes = _validate.check_inputs(c.q, c.kv, c.bt, c.sl, scale=c.scale, window=c.window,
                                    tokens_per_request=c.NQ, **c.scales())
    return _ffi.launch_plan(shapes, "ROCM", num_splits, overrides, device=ae.DEVICES[emu.target])


def check(emu, c, *, num_splits=0, overrides="", schedule="lockstep", num_reqs=None,
          traced=False, seed=1, what=""):
    plan = plan_for(emu, c, num_splits, overrides)
    nr = c.num_reqs if num_reqs is None else num_reqs
    out = emu.run(c.q_np, c.kv_np, c.bt_np, c.sl_np, scale=c.scale, tokens=c.NQ, window=c.window,
                  num_reqs=nr, traced_num_reqs=traced, plan=plan, schedule=schedule, seed=seed,
                  k_scale=c.k_scale_np, v_scale=c.v_scale_np)
    o = as_f64(out, c.q.shape)
    assert_close(jnp.asarray(o, jnp.bfloat16), c.oracle(num_reqs=nr), q_shape=c.q.shape,
                 what=f"{emu.target} {schedule} {plan} {what}")
    return out, plan


# ---- the MFMA lane layouts (AMD's documentation; gpu/emu/mfma.h) ----------------------------------
def _lane_registers(a, b, k):
    """Each lane's A and B words as AMD documents them: A[i][k] in lane i + 16 * (k // n),
    element k % n, B[k][j] in lane j + 16 * (k // n), element k % n (n = k / 4 elements a lane),
    bf16 element e in word e // 2, low half first."""
    n = k // 4
    a_el = np.zeros((64, n), np.uint16)
    b_el = np.zeros((64, n), np.uint16)
    for lane in range(64):
        i, g = lane % 16, lane // 16
        a_el[lane] = a[i, g * n:(g + 1) * n]
        b_el[lane] = b[g * n:(g + 1) * n, i]
    return a_el.view(np.uint32), b_el.view(np.uint32)


@pytest.mark.parametrize("seed", [0, 1])
def test_mfma_is_a_matmul_in_amds_lane_layout(emu, seed):
    rng = np.random.default_rng(seed)
    k = emu.mfma_k
    assert k == (32 if emu.target == "gfx950" else 16)
    a = jnp.asarray(rng.standard_normal((16, k)), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((k, 16)), jnp.bfloat16)
    c = rng.standard_normal((16, 16)).astype(np.float32)
    aw, bw = _lane_registers(np.asarray(a).view(np.uint16), np.asarray(b).view(np.uint16), k)
    # C and D: D[i][j] in lane j + 16 * (i // 4), element i % 4.
    c_lanes = np.zeros((64, 4), np.float32)
    for lane in range(64):
        c_lanes[lane] = c[4 * (lane // 16):4 * (lane // 16) + 4, lane % 16]
    d_lanes = emu.mfma(aw, bw, c_lanes)
    d = np.zeros((16, 16))
    for lane in range(64):
        d[4 * (lane // 16):4 * (lane // 16) + 4, lane % 16] = d_lanes[lane]
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64) + c
    np.testing.assert_allclose(d, want, rtol=1e-6, atol=1e-5)


def test_mfma_pairs_each_row_with_its_column_only(emu):
    """One-hot operands: D[i][j] = A[i][k] B[k][j] sits where the layout says, nowhere else."""
    k = emu.mfma_k
    for i, j, kk in [(0, 0, 0), (5, 11, k - 1), (15, 3, k // 2), (9, 9, 3)]:
        a = np.zeros((16, k), np.float32)
        b = np.zeros((k, 16), np.float32)
        a[i, kk], b[kk, j] = 2.0, 3.0
        aw, bw = _lane_registers(np.asarray(jnp.asarray(a, jnp.bfloat16)).view(np.uint16),
                                 np.asarray(jnp.asarray(b, jnp.bfloat16)).view(np.uint16), k)
        d_lanes = emu.mfma(aw, bw, np.zeros((64, 4), np.float32))
        hit = np.argwhere(d_lanes != 0)
        assert hit.tolist() == [[j + 16 * (i // 4), i % 4]], (i, j, kk, hit.tolist())
        assert d_lanes[j + 16 * (i // 4), i % 4] == 6.0


# ---- the kernels against the oracle ----------------------------------------------------------
# (name, make_case arguments): full and SWA, D 64 and 128, Hq/Hkv 16/2, 128/16, 8/8, padding
# requests, seq_len 0 and below NQ, stale and out-of-range block ids, NaN-poisoned unread slots.
CASES = {
    "full-16/2": dict(R=4, seq_lens=[100, 50, 191, 0], P=12, bad_live=0.1),
    "swa-16/2": dict(R=4, seq_lens=[700, 130, 3, 400], P=48, window=128, bad_live=0.1),
    "full-d128": dict(R=3, seq_lens=[300, 7, 257], P=20, D=128),
    "swa-d128": dict(R=3, seq_lens=[900, 64, 65], P=60, D=128, window=200, bad_live=0.2),
    "full-128/16": dict(R=2, seq_lens=[150, 33], P=10, Hq=128, Hkv=16),
    "swa-8/8-nq4": dict(R=3, seq_lens=[120, 2, 77], P=8, Hq=8, Hkv=8, NQ=4, window=40),
    "padding": dict(R=5, seq_lens=[260, 0, 5, 100, 999], P=16, num_reqs=3, extra_rows=2),
    "long": dict(R=2, seq_lens=[5000, 2055], P=320, bad_live=0.05),
}
SCHEDULES = ("lockstep", "wave_serial")


def _case(name, seed=0, **more):
    kw = dict(CASES[name], **more)
    R, lens = kw.pop("R"), kw.pop("seq_lens")
    return make_case(np.random.default_rng(seed), R, lens, **kw)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_cases_default_plan(emu, name, schedule):
    c = _case(name)
    out, _ = check(emu, c, schedule=schedule, what=name)
    again, _ = check(emu, c, schedule=schedule, seed=7, what=name)  # another shuffle, same bits
    np.testing.assert_array_equal(out, again)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_split_count_to_40(emu, schedule):
    """1..40 segments a group: every merge width (1, 2, 4, 8 warps a row on AMD) and batch form."""
    c = _case("long", seed=3)
    widths = set()
    for splits in range(1, 41):
        _, plan = check(emu, c, num_splits=splits, schedule=schedule, what=f"splits {splits}")
        widths.add(plan["merge_warps"])
    assert widths == {1, 2, 4, 8}, widths


@pytest.mark.parametrize("overrides", [
    "split_kernel=two_tile", "split_kernel=per_tile", "split_kernel=per_tile_cached",
    "merge_by_lane=0", "merge_by_lane=1", "merge_warps=1", "merge_warps=2", "merge_warps=4",
    "merge_warps=8", "split_kernel=fill_ring", "split_kernel=pingpong", "merge_pdl=1"])
@pytest.mark.parametrize("name", ["full-16/2", "swa-d128", "long"])
def test_every_amd_plan_branch(emu, name, overrides):
    """Every choice the AMD plan can make, forced; the NVIDIA-only ones fall back to the default
    kernel (per_tile, per_tile_cached with a window) with a plain merge, as the plan says."""
    c = _case(name, seed=5)
    _, plan = check(emu, c, num_splits=17, overrides=overrides, what=overrides)
    assert not plan["merge_pdl"]
    forced = overrides.split("=")[1] if overrides.startswith("split_kernel=") else None
    runs = forced in ("per_tile", "per_tile_cached") or (forced == "two_tile" and c.q.shape[-1] == 64)
    default = "per_tile_cached" if c.window else "per_tile"
    assert plan["split_kernel"] == (forced if runs else default), plan


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("name", ["swa-16/2", "swa-d128"])
def test_cached_loads_give_the_same_bits(emu, name, kv_dtype):
    """per_tile_cached, a window's kernel on AMD, differs from per_tile only in its K/V loads'
    cache policy: against the oracle and bit for bit the same as per_tile."""
    c = _case(name, seed=11, **({} if kv_dtype == "bfloat16" else dict(kv_dtype=kv_dtype, scale_kind="token")))
    cached, plan = check(emu, c, schedule="wave_serial", what="default")
    assert plan["split_kernel"] == "per_tile_cached", plan
    plain, plan = check(emu, c, schedule="wave_serial", overrides="split_kernel=per_tile", what="per_tile")
    assert plan["split_kernel"] == "per_tile", plan
    np.testing.assert_array_equal(cached, plain)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_balanced_cut(emu, schedule, kv_dtype):
    """The balanced cut (gpu/segment_pool.h), forced: a ragged batch with padding, empty and
    one-tile requests and bad ids; more requests than a wave has lanes (its second chunk); split
    counts from one slot a request to many; D = 64 and 128 (bf16)."""
    lens = [3000, 0, 9, 700, 64, 1500, 130, 17] * 9  # 72 requests: past 64 lanes
    for d in (64, 128) if kv_dtype == "bfloat16" else (64,):
        c = make_case(np.random.default_rng(7), len(lens), lens, P=192, Hq=4, Hkv=1, NQ=2, D=d,
                      bad_live=0.05, num_reqs=len(lens) - 3, kv_dtype=kv_dtype)
        for splits in (1, 2, 5):
            _, plan = check(emu, c, num_splits=splits, overrides="balance_segments=1",
                            schedule=schedule, what=f"balanced, D {d}, splits {splits}")
            assert plan["balance_segments"], plan


def test_balanced_cut_of_drafts(emu):
    """The drafts target's balanced kernels: a request's tiles from its draft count (none
    without drafts); a ragged chain and a tree."""
    lens = [3000, 0, 9, 700, 64, 1500]
    c = make_case(np.random.default_rng(8), len(lens), lens, P=192, Hq=4, Hkv=1, NQ=4)
    counts = np.array([4, 2, 0, 3, 1, 4], np.int32)
    check_drafts(emu, c, "lockstep", "balanced ragged", overrides="balance_segments=1",
                 draft_lens=counts)
    mask = np.array([[(1 << (t + 1)) - 1 for t in range(4)]] * len(lens), np.uint32)
    mask[:, 3] = 0b1001  # draft 3 sees draft 0 and itself
    depth = np.array([[0, 1, 2, 1]] * len(lens), np.int32)
    check_drafts(emu, c, "wave_serial", "balanced tree", overrides="balance_segments=1",
                 draft_lens=counts, tree_mask=mask, draft_depths=depth)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_traced_num_reqs_is_read_and_clamped(emu, schedule):
    c = _case("padding", seed=2)
    for nr in (0, 2, 3, 5):
        check(emu, c, num_reqs=nr, traced=True, schedule=schedule, what=f"traced num_reqs {nr}")


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_cases(emu, data):
    """Random shapes, lengths, windows, poisoned slots and bad run-time data."""
    draw = data.draw
    hkv = draw(st.sampled_from([1, 2]))
    hq = hkv * draw(st.sampled_from([1, 4, 8]))
    nq = draw(st.integers(1, 16))
    R = draw(st.integers(1, 4))
    P = draw(st.integers(1, 24))
    lens = [draw(st.integers(0, PAGE * P)) for _ in range(R)]
    window = draw(st.sampled_from([None, 1, 17, 64, 300]))
    seed = draw(st.integers(0, 2**31))
    c = make_case(np.random.default_rng(seed), R, lens, P=P, Hq=hq, Hkv=hkv, NQ=nq, window=window,
                  D=draw(st.sampled_from([64, 128])), bad_live=draw(st.sampled_from([0.0, 0.3])),
                  num_reqs=draw(st.integers(0, R)),
                  kv_dtype=draw(st.sampled_from(("bfloat16",) + FP8_DTYPES)),
                  scale_kind=draw(st.sampled_from(SCALE_KINDS)))
    check(emu, c, num_splits=draw(st.integers(0, 9)),
          schedule=draw(st.sampled_from(SCHEDULES)), seed=seed, what=f"random {seed}")


# ---- FP8 caches (kv_tile.h) --------------------------------------------------------------------
# AMD converts each tile as it loads it (direct); NVIDIA copies FP8 into a stage and converts it
# once landed (staged), which the emulator runs from a gfx950 build with MUSE_ATTN_FP8_STAGED
# (gfx942's 64 KiB of LDS does not hold the staged form's D = 128 stages; gfx950 has 160 KiB).
FP8_CASES = ("swa-16/2", "full-d128", "padding", "long")


@pytest.fixture(scope="session")
def emu_staged(emu_dir):
    return ae.Emulator(ae.build("gfx950", emu_dir, fp8_staged=True))


def dequantized(c):
    """c's FP8 cache as the bf16 cache the rule makes of it: bf16(fp32(scale * decode(x)))."""
    x = np.asarray(c.kv_np).astype(np.float32)
    d = x.shape[-1] // 2
    for part, s in ((slice(0, d), c.k_scale_np), (slice(d, None), c.v_scale_np)):
        s = np.asarray(s, np.float32)
        with np.errstate(invalid="ignore", over="ignore"):  # poisoned slots, never read
            x[..., part] = x[..., part] * (s if s.ndim == 0 else s[..., None])
    return x.astype(ml_dtypes.bfloat16)


def check_fp8(emu, c, num_splits, what):
    """The FP8 call against the oracle, and bit for bit the bf16 kernel on the dequantized cache
    (from the tile on, the two are one computation)."""
    out, plan = check(emu, c, num_splits=num_splits, schedule="wave_serial", what=what)
    assert plan["split_kernel"] == ("per_tile_cached" if c.window else "per_tile"), plan
    bf16 = emu.run(c.q_np, dequantized(c), c.bt_np, c.sl_np, scale=c.scale, tokens=c.NQ,
                   window=c.window, num_reqs=c.num_reqs, plan=plan)
    np.testing.assert_array_equal(out, bf16, err_msg=what)


@pytest.mark.parametrize("kind", SCALE_KINDS)
@pytest.mark.parametrize("fmt", FP8_DTYPES)
@pytest.mark.parametrize("name", FP8_CASES)
def test_fp8_cache_direct(emu, name, fmt, kind):
    c = _case(name, seed=13, kv_dtype=fmt, scale_kind=kind)
    check_fp8(emu, c, 7 if name == "long" else 0, f"{name} {fmt} {kind}")


@pytest.mark.parametrize("kind", SCALE_KINDS)
@pytest.mark.parametrize("fmt", FP8_DTYPES)
@pytest.mark.parametrize("name", FP8_CASES)
def test_fp8_cache_staged(emu_staged, name, fmt, kind):
    c = _case(name, seed=17, kv_dtype=fmt, scale_kind=kind)
    check_fp8(emu_staged, c, 7 if name == "long" else 0, f"staged {name} {fmt} {kind}")


# ---- the emulator's checks (tests/emu_probes.cc: a planted bug each) ------------------------------
# ---- the drafts target (ragged drafts, trees, lse; split_kernel_drafts.cu.cc) -------------------
def _trees(rng, r, nq):
    """Random trees as tests/test_drafts.py draws them: draft t > 0 under an earlier one, a row's
    bits its ancestors and itself, junk bits past nq."""
    mask, depth = np.zeros((r, nq), np.uint64), np.zeros((r, nq), np.int64)
    for i in range(r):
        mask[i, 0] = 1
        for t in range(1, nq):
            parent = int(rng.integers(0, t))
            mask[i, t] = mask[i, parent] | (1 << t)
            depth[i, t] = depth[i, parent] + 1
    mask |= (rng.integers(0, 2**32, size=(r, nq), dtype=np.uint64) >> nq) << nq
    return mask.astype(np.uint32), depth.astype(np.int32)


def check_drafts(emu, c, schedule, what, overrides="", **drafts):
    """A drafts-target call (lse asked for) against the float64 oracle: out and lse; the plan's
    split kernel per_tile, or two_tile where overrides force it."""
    import oracle
    shapes = _validate.check_inputs(c.q, c.kv, c.bt, c.sl, scale=c.scale, window=c.window,
                                    tokens_per_request=c.NQ, **c.scales())
    shapes = _validate.check_drafts(shapes, *(None if drafts.get(k) is None else jnp.asarray(drafts[k])
                                              for k in ("draft_lens", "tree_mask", "draft_depths")),
                                    True)
    plan = _ffi.launch_plan(shapes, "ROCM", 0, overrides, device=ae.DEVICES[emu.target])
    chain = _ffi.launch_plan(dataclasses.replace(shapes, drafts="chain", lse=False), "ROCM", 0, overrides,
                             device=ae.DEVICES[emu.target])
    kernel = "two_tile" if "two_tile" in overrides else "per_tile"
    assert plan == (chain if shapes.drafts == "chain" else dict(chain, split_kernel=kernel)), plan
    out, lse = emu.run(c.q_np, c.kv_np, c.bt_np, c.sl_np, scale=c.scale, tokens=c.NQ, window=c.window,
                       num_reqs=c.num_reqs, plan=plan, schedule=schedule, return_lse=True,
                       k_scale=c.k_scale_np, v_scale=c.v_scale_np, **drafts)
    want, want_lse = oracle.verify_attention_drafts(
        c.q_np, c.kv_np, c.bt_np, c.sl_np, scale=c.scale, window=c.window, num_reqs=c.num_reqs,
        tokens_per_request=c.NQ, k_scale=c.k_scale_np, v_scale=c.v_scale_np, **drafts)
    assert_close(jnp.asarray(as_f64(out, c.q.shape), jnp.bfloat16), want, q_shape=c.q.shape,
                 what=f"{emu.target} {schedule} {what}")
    want_lse = np.asarray(want_lse, np.float64)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse)), what
    fin = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[fin], want_lse[fin], rtol=0, atol=2e-3, err_msg=what)


def test_drafts_two_tile_kernel(emu):
    """The drafts target's two-tile kernel, forced (AMD takes its segments tile by tile): ragged
    counts and a tree at two-tile segments."""
    rng = np.random.default_rng(22)
    c = make_case(rng, 3, [250, 128, 70], P=16, window=100)
    check_drafts(emu, c, "lockstep", "ragged two_tile", overrides="split_kernel=two_tile",
                 draft_lens=np.array([3, 8, 0], np.int32))
    mask, depth = _trees(rng, 3, c.NQ)
    check_drafts(emu, c, "wave_serial", "tree two_tile", overrides="split_kernel=two_tile",
                 draft_lens=np.array([8, 5, 7], np.int32), tree_mask=mask, draft_depths=depth)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("window", [None, 3, 100])
def test_drafts_ragged_trees_and_lse(emu, schedule, window):
    """Ragged counts (0 and NQ among them, and one past the context), trees with windows and
    junk bits, and lse, on both targets against the oracle; NaN-poisoned unread slots as ever."""
    rng = np.random.default_rng(21)
    c = make_case(rng, 4, [700, 37, 5, 260], P=48, window=window)
    counts = np.array([3, 0, 8, 8], np.int32)
    check_drafts(emu, c, schedule, f"ragged w{window}", draft_lens=counts)
    check_drafts(emu, c, schedule, f"chain lse w{window}")
    mask, depth = _trees(rng, 4, c.NQ)
    check_drafts(emu, c, schedule, f"tree w{window}", draft_lens=np.array([8, 5, 8, 2], np.int32),
                 tree_mask=mask, draft_depths=depth)
    # A tree's absent operands are null: the kernels make the defaults (NQ drafts, depth = row,
    # the causal mask).
    check_drafts(emu, c, schedule, f"tree mask only w{window}", tree_mask=mask)
    check_drafts(emu, c, schedule, f"tree depths only w{window}", draft_depths=depth)


@pytest.mark.parametrize("kind", SCALE_KINDS)
@pytest.mark.parametrize("fmt", FP8_DTYPES)
def test_drafts_fp8(emu, emu_staged, fmt, kind):
    """Ragged drafts and trees over FP8 caches, both forms (direct: gfx942 / gfx950 as built;
    staged: the gfx950 build NVIDIA's form runs in), against the oracle."""
    rng = np.random.default_rng(31)
    c = make_case(rng, 3, [500, 40, 130], P=40, window=64, kv_dtype=fmt, scale_kind=kind)
    mask, depth = _trees(rng, 3, c.NQ)
    for e in (emu, emu_staged) if emu.target == "gfx950" else (emu,):
        check_drafts(e, c, "wave_serial", f"fp8 ragged {fmt} {kind}",
                     draft_lens=np.array([5, 8, 1], np.int32))
        check_drafts(e, c, "lockstep", f"fp8 tree {fmt} {kind}", draft_lens=np.array([8, 3, 6], np.int32),
                     tree_mask=mask, draft_depths=depth)


def test_drafts_tree_slots_no_row_sees_are_never_read(emu):
    """A tree draft no row sees, its K/V slots NaN: the output is the clean one's."""
    rng = np.random.default_rng(5)
    c = make_case(rng, 2, [300, 130], P=24)
    mask, depth = _trees(rng, 2, c.NQ)
    mask[:, :] &= np.uint32(~(1 << 7) & 0xFFFFFFFF)  # draft 7: nobody sees it, nor itself
    kv = np.array(c.kv_np)
    for i in range(2):
        slot = int(c.sl_np[i]) - c.NQ + 7
        kv[c.bt_np[i, slot // PAGE], :, slot % PAGE] = np.nan
    c.kv_np = kv
    check_drafts(emu, c, "wave_serial", "unseen draft poisoned", draft_lens=np.array([8, 8], np.int32),
                 tree_mask=mask, draft_depths=depth)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("which, message", [
    (0, "divergence: lane 32 exited without reaching __shfl_xor"),
    (1, "reads lane 40, which has exited"),
    (4, "waves at different barriers"),
    (5, "is outside the block's LDS"),
    (6, "over-budget launch: 73728 bytes of dynamic LDS"),
    (7, "over-budget launch: 32768 bytes of dynamic LDS, the kernel's limit 16384"),
])
def test_planted_bugs_are_errors(emu, which, message, schedule):
    assert message in emu.probe(which, schedule)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_lds_read_before_any_write_is_an_error(emu, schedule):
    """Wave 1 reads what wave 0 writes with no barrier between: an error wherever wave 1 runs
    first (the shuffled orders reach it within a few seeds), and never with the barrier."""
    errors = [emu.probe(2, schedule, seed) for seed in range(8)]
    assert any("LDS read before any write in the block" in e for e in errors), errors
    assert all(emu.probe(3, schedule, seed) == "" for seed in range(8))


# ---- one run under AddressSanitizer and UBSan ---------------------------------------------------
def test_under_address_and_undefined_behaviour_sanitizers(emu_dir, tmp_path):
    """The emulated kernels, built with -fsanitize=address,undefined into a program that runs a
    case written to a file; its output against the oracle."""
    target = "gfx942"
    exe = ae.build(target, emu_dir, sanitize=True, executable=True)
    fp8 = dict(kv_dtype="float8_e4m3fnuz", scale_kind="token")
    for name, more in (("swa-16/2", {}), ("padding", {}), ("full-d128", {}), ("swa-16/2", fp8)):
        c = _case(name, seed=11, **more)
        plan = _ffi.launch_plan(
            _validate.check_inputs(c.q, c.kv, c.bt, c.sl, scale=c.scale, window=c.window,
                                   tokens_per_request=c.NQ, **c.scales()),
            "ROCM", 5, "", device=ae.DEVICES[target])
        case_file, out_file = tmp_path / f"{name.replace('/', '_')}.case", tmp_path / "out.bin"
        ae.write_case(case_file, c, plan, schedule="wave_serial")
        r = subprocess.run([exe, str(case_file), str(out_file)], capture_output=True, text=True,
                           env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"), timeout=600)
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        out = np.fromfile(out_file, np.uint16)
        assert_close(jnp.asarray(as_f64(out, c.q.shape), jnp.bfloat16), c.oracle(),
                     q_shape=c.q.shape, what=f"sanitized {name} {more}")
