"""The AMD device helpers of ffi/gpu/amd_ops.h (the gfx950 design's cross-lane, conversion and
memory instructions): each run by the wave64 emulator through a probe kernel
(tests/emu_ops_probes.cc) on gfx950 (the instruction, emulated from its documented semantics,
ffi/gpu/emu/lane_ops.h) and gfx942 (the fallback), against a numpy model written from the
documentation; and what each helper lowers to, read from the real compilers' assembly
(tests/amd_ops_isa.cc). Skips where no clang 17+ builds the emulator, or no HIP clang builds the
target."""

import os
import re
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import amd_emulator as ae

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gpu_compile_check as gcc  # noqa: E402

THREADS = 128  # two waves: every helper acts within its own wave
LDS_READ_TR, SWAP16, SWAP32, CVT, DPP, REDUCE, LOAD, BUFFER_LOAD, LOAD_INVARIANT, CVT_FP8 = range(10)

needs_emulator = pytest.mark.skipif(
    ae.find_clang() is None, reason="no clang++ 17+ for the AMD emulator (apt-get install clang-19)")


@pytest.fixture(scope="module")
def emu_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("amd_ops"))


@pytest.fixture(scope="module", params=ae.TARGETS)
def emu(request, emu_dir):
    if ae.find_clang() is None:
        pytest.skip("no clang++ 17+ for the AMD emulator (apt-get install clang-19)")
    return ae.Emulator(ae.build(request.param, emu_dir))


SCHEDULES = pytest.mark.parametrize("schedule", ["lockstep", "wave_serial"])


# ---- ds_read_b64_tr_b16 ------------------------------------------------------------------------
def run_tr(emu, lds_u16, offsets, schedule="lockstep"):
    lds = np.ascontiguousarray(lds_u16, np.uint16).view(np.uint32)
    words = np.concatenate([lds, np.asarray(offsets, np.uint32)])
    out = emu.ops_probe(LDS_READ_TR, words, 2 * THREADS, lds_words=lds.size, schedule=schedule)
    return out.view(np.uint16).reshape(THREADS, 4)


def tr_model(lds_u16, offsets):
    """The documented lane map: in each 16-lane group, lane l element n = 16-bit element l % 4 of
    the 8 bytes that lane 16 (l // 16) + (l % 16) // 4 + 4 n addresses."""
    out = np.zeros((THREADS, 4), np.uint16)
    for t in range(THREADS):
        group, l = t - t % 16, t % 16
        for n in range(4):
            src = group + l // 4 + 4 * n
            out[t, n] = lds_u16[offsets[src] // 2 + l % 4]
    return out


@SCHEDULES
def test_lds_read_tr_b16_transposes_a_4x16_block_per_lane_group(emu, schedule):
    """Lane 4 r + c of a group addresses row r, columns 4c..4c+3 of a row-major 4 x 16 block of
    its own: lane j of the group then holds column j (rows 0..3), the MFMA operand order."""
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 1 << 16, (THREADS // 16, 4, 16), dtype=np.uint16)  # [group][r][col]
    lds = blocks.reshape(-1)
    offsets = [2 * (64 * (t // 16) + 16 * ((t % 16) // 4) + 4 * (t % 4)) for t in range(THREADS)]
    got = run_tr(emu, lds, offsets, schedule)
    for t in range(THREADS):
        np.testing.assert_array_equal(got[t], blocks[t // 16, :, t % 16], err_msg=f"lane {t}")


def test_lds_read_tr_b16_random_addresses(emu):
    rng = np.random.default_rng(1)
    lds = rng.integers(0, 1 << 16, 4096, dtype=np.uint16)  # 8 KiB
    offsets = 8 * rng.integers(0, lds.size // 4, THREADS)
    np.testing.assert_array_equal(run_tr(emu, lds, offsets), tr_model(lds, offsets))


def test_lds_read_tr_b16_gives_v_transposed_for_the_mfma(emu):
    """vLLM's gfx950 P.V: V [64 keys][64 d] row-major in LDS; lane 16 g + i (i < 16) reads key
    32 c + 4 g + i // 4, d 16 j + 4 (i % 4), and the same 16 keys later: lane 16 g + i then holds
    V[32 c + 4 g + n][16 j + i] (n < 4) and V[32 c + 16 + 4 g + n][16 j + i], the A operand of a
    16x16x32 MFMA over keys permuted so that P^T is lane-local."""
    rng = np.random.default_rng(2)
    v = rng.integers(0, 1 << 16, (64, 64), dtype=np.uint16)
    for c, j in [(0, 0), (1, 3), (0, 2)]:
        lo, hi = [], []
        for t in range(THREADS):
            g, i = (t % 64) // 16, t % 16
            lo.append(2 * (64 * (32 * c + 4 * g + i // 4) + 16 * j + 4 * (i % 4)))
            hi.append(lo[-1] + 2 * 64 * 16)
        got_lo, got_hi = run_tr(emu, v.reshape(-1), lo), run_tr(emu, v.reshape(-1), hi)
        for t in range(THREADS):
            g, i = (t % 64) // 16, t % 16
            np.testing.assert_array_equal(got_lo[t], v[32 * c + 4 * g + np.arange(4), 16 * j + i])
            np.testing.assert_array_equal(got_hi[t], v[32 * c + 16 + 4 * g + np.arange(4), 16 * j + i])


def test_lds_read_tr_b16_of_unwritten_lds_is_an_error(emu):
    """An element the block never wrote is caught (the 8 bytes a lane addresses all go somewhere)."""
    lds = np.zeros(64, np.uint16)
    offsets = np.zeros(THREADS, np.uint32)
    assert run_tr(emu, lds, offsets).shape == (THREADS, 4)
    offsets[5] = lds.size * 2  # the probe's LDS tail past the words it fills
    with pytest.raises(ae.EmulatorError, match="LDS read before any write"):
        run_tr(emu, lds, offsets)


# ---- v_permlane16_swap / v_permlane32_swap ------------------------------------------------------
def swap_model(first, second, rows):
    """permlane16: odd rows (16 lanes) of the first trade with even rows of the second;
    permlane32: rows 2-3 of the first with rows 0-1 of the second; each wave alone."""
    f = first.reshape(-1, 64 // rows // 2, 2, rows).copy()
    s = second.reshape(-1, 64 // rows // 2, 2, rows).copy()
    f[:, :, 1], s[:, :, 0] = s[:, :, 0].copy(), f[:, :, 1].copy()
    return f.reshape(-1), s.reshape(-1)


@SCHEDULES
@pytest.mark.parametrize("rows", [16, 32])
def test_permlane_swap(emu, rows, schedule):
    rng = np.random.default_rng(rows)
    first = rng.integers(0, 1 << 32, THREADS, dtype=np.uint32)
    second = rng.integers(0, 1 << 32, THREADS, dtype=np.uint32)
    out = emu.ops_probe(SWAP16 if rows == 16 else SWAP32, np.concatenate([first, second]),
                        2 * THREADS, schedule=schedule)
    want_f, want_s = swap_model(first, second, rows)
    np.testing.assert_array_equal(out[:THREADS], want_f)
    np.testing.assert_array_equal(out[THREADS:], want_s)


@pytest.mark.parametrize("variant,partner", [(1, 16), (2, 32)])
def test_xor_step_adds_the_partner_lane(emu, variant, partner):
    rng = np.random.default_rng(variant)
    x = rng.standard_normal(THREADS).astype(np.float32)
    out = emu.ops_probe(REDUCE, x, THREADS, variant=variant).view(np.float32)
    lanes = np.arange(THREADS)
    np.testing.assert_array_equal(out, x + x[lanes ^ partner])


# ---- v_cvt_pk_bf16_f32 -------------------------------------------------------------------------
SPECIAL = np.array([0x00000000, 0x80000000, 0x7f800000, 0xff800000,  # +-0, +-inf
                    0x7f7fffff, 0xff7fffff,  # the largest finite: rounds to +-inf
                    0x3f808000, 0x3f818000, 0x3f80ffff, 0x3f807fff,  # ties to even, either side
                    0x00800000, 0x80808000, 0x477fe000, 0x4f7fffff], np.uint32)
NANS = np.array([0x7f800001, 0xff800001, 0x7fc00000, 0xffc00000, 0x7fa12345, 0xffbfffff],
                np.uint32)


def test_cvt_pk_bf16_f32_rounds_to_nearest_even(emu):
    rng = np.random.default_rng(3)
    normal = (rng.standard_normal(THREADS) * 10.0 ** rng.integers(-30, 30, THREADS)).astype(
        np.float32).view(np.uint32)
    a = np.concatenate([SPECIAL, normal])[:THREADS]
    b = np.roll(normal, 7)
    out = emu.ops_probe(CVT, np.concatenate([a, b]), THREADS)

    def model(bits):  # ml_dtypes' float32 -> bfloat16: round to nearest even
        return bits.view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)
    np.testing.assert_array_equal(out & 0xffff, model(a))
    np.testing.assert_array_equal(out >> 16, model(b))


def test_cvt_pk_bf16_f32_keeps_nan_a_quiet_nan_of_its_sign(emu):
    a = np.resize(NANS, THREADS)
    b = np.resize(NANS[::-1], THREADS)
    out = emu.ops_probe(CVT, np.concatenate([a, b]), THREADS)
    for half, src in ((out & 0xffff, a), (out >> 16, b)):
        assert np.all((half & 0x7f80) == 0x7f80) and np.all(half & 0x0040), [hex(h) for h in half[:6]]
        np.testing.assert_array_equal(half >> 15, src >> 31)


# ---- DPP ---------------------------------------------------------------------------------------
def dpp_model(variant, old, src):
    lanes = np.arange(THREADS)
    i = lanes % 16
    quad = lambda sel: (lanes & ~3) + np.array(sel)[lanes % 4]  # noqa: E731
    ok = np.ones(THREADS, bool)
    row_mask, bound_zero = 0xf, False
    if variant == 0:
        s = quad([3, 2, 1, 0])
    elif variant == 1:
        s = quad([1, 0, 3, 2])
    elif variant == 2:
        s, ok = lanes - 1, i >= 1
    elif variant == 3:
        s, ok, bound_zero = lanes - 3, i >= 3, True
    elif variant == 4:
        s, ok, row_mask = lanes + 2, i + 2 < 16, 0x5
    elif variant == 5:
        s = lanes - i + (i - 5) % 16
    elif variant == 6:
        s = lanes - i + 15 - i
    else:
        s, row_mask = (lanes & ~7) + 7 - (lanes & 7), 0xa
    got = np.where(ok, src[np.where(ok, s, 0)], 0 if bound_zero else old)
    written = (row_mask >> ((lanes % 64) // 16)) & 1 == 1
    return np.where(written, got, old).astype(np.uint32)


@pytest.mark.parametrize("variant", range(8),
                         ids=["quad_perm3210", "quad_perm1032", "row_shr1", "row_shr3_bound_zero",
                              "row_shl2_rows02", "row_ror5", "row_mirror", "row_half_mirror_rows13"])
def test_dpp(emu, variant):
    rng = np.random.default_rng(10 + variant)
    old = rng.integers(0, 1 << 32, THREADS, dtype=np.uint32)
    src = rng.integers(0, 1 << 32, THREADS, dtype=np.uint32)
    out = emu.ops_probe(DPP, np.concatenate([old, src]), THREADS, variant=variant)
    np.testing.assert_array_equal(out, dpp_model(variant, old, src))


@SCHEDULES
def test_row_reduce16_is_the_max_of_the_row(emu, schedule):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(THREADS).astype(np.float32)
    out = emu.ops_probe(REDUCE, x, THREADS, variant=0, schedule=schedule).view(np.float32)
    np.testing.assert_array_equal(out, np.repeat(x.reshape(-1, 16).max(axis=1), 16))


# ---- global loads with a cache policy -------------------------------------------------------------
@pytest.mark.parametrize("variant", [0, 1], ids=["cached", "nontemporal"])
def test_global_load16(emu, variant):
    words = np.random.default_rng(5).integers(0, 1 << 32, 4 * THREADS, dtype=np.uint32)
    np.testing.assert_array_equal(emu.ops_probe(LOAD, words, 4 * THREADS, variant=variant), words)


# ---- buffer_load_dwordx4: in range read, past the range zeros -------------------------------------
def test_buffer_load16_reads_in_range_and_gives_zeros_past_it(emu):
    rng = np.random.default_rng(6)
    words = rng.integers(0, 1 << 32, 4 * THREADS, dtype=np.uint32)
    # Every thread a chunk of the buffer, in a shuffled order; every third thread out of range.
    chunk = rng.permutation(THREADS)
    offsets = (16 * chunk).astype(np.uint32)
    far = np.arange(THREADS) % 3 == 0
    offsets[far] = np.array([0x80000000, 16 * THREADS, 0xFFFFFFF0], np.uint32)[np.arange(far.sum()) % 3]
    out = emu.ops_probe(BUFFER_LOAD, np.concatenate([words, offsets]), 4 * THREADS).reshape(THREADS, 4)
    want = words.reshape(THREADS, 4)[chunk]
    want[far] = 0
    np.testing.assert_array_equal(out, want)


def test_buffer_load16_straddling_its_range_is_an_error(emu):
    words = np.arange(4 * THREADS, dtype=np.uint32)
    offsets = (16 * np.arange(THREADS)).astype(np.uint32)
    with pytest.raises(ae.EmulatorError, match="straddling"):
        emu.ops_probe(BUFFER_LOAD, np.concatenate([words, offsets]), 4 * THREADS, variant=2)


def test_load_invariant(emu):
    rng = np.random.default_rng(7)
    words = rng.integers(0, 1 << 32, THREADS, dtype=np.uint32)
    index = rng.integers(0, THREADS, THREADS).astype(np.uint32)
    np.testing.assert_array_equal(
        emu.ops_probe(LOAD_INVARIANT, np.concatenate([words, index]), THREADS), words[index])


# ---- v_cvt_pk_f32_fp8: every byte, in the target's format ----------------------------------------
def test_cvt_pk_f32_fp8_decodes_every_byte_in_the_targets_format(emu):
    """gfx942 reads e4m3fnuz, gfx950 OCP e4m3fn (ml_dtypes' decoding is the model); NaN bytes
    give NaN, every other byte its exact value, in each byte position of the word."""
    fmt = ml_dtypes.float8_e4m3fnuz if emu.target == "gfx942" else ml_dtypes.float8_e4m3fn
    b = np.arange(256, dtype=np.uint32)
    every = b | np.roll(b, 1) << 8 | np.roll(b, 2) << 16 | np.roll(b, 3) << 24  # each byte in each place
    for words in (every[:THREADS], every[THREADS:]):
        out = emu.ops_probe(CVT_FP8, words, 4 * THREADS).view(np.float32).reshape(THREADS, 4)
        want = np.stack([np.array((words >> (8 * k)) & 0xFF, np.uint8).view(fmt).astype(np.float32)
                         for k in range(4)], axis=1)
        nan = np.isnan(want)
        assert (np.isnan(out) == nan).all()
        np.testing.assert_array_equal(out[~nan], want[~nan])


# ---- what the helpers lower to -------------------------------------------------------------------
ISA_SOURCE = os.path.join(ROOT, "tests", "amd_ops_isa.cc")


@pytest.fixture(scope="module", params=["gfx942", "gfx950"])
def isa(request, tmp_path_factory):
    """{kernel: its instructions} of tests/amd_ops_isa.cc for the target."""
    arch = request.param
    for chain in gcc.find_hip_toolchains():
        try:
            flags = chain.flags(arch)
        except gcc.Unsupported:
            continue
        asm = str(tmp_path_factory.mktemp(f"isa_{arch}") / "ops.s")
        cmd = [*chain.cmd, "-x", "hip", "-std=c++17", f"--offload-arch={arch}", *flags,
               "--cuda-device-only", "-S", *gcc.HIP_BUILD_FLAGS, "-DMUSE_ATTN_WITH_HIP",
               f"-I{os.path.join(ROOT, 'ffi')}", ISA_SOURCE, "-o", asm]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]
        kernels, cur = {}, None
        for line in open(asm):
            m = re.match(r"^(isa_\w+):", line)
            if m:
                cur = kernels.setdefault(m.group(1), [])
            elif cur is not None and re.match(r"\s*s_endpgm", line):
                cur = None
            elif cur is not None and re.match(r"\s+[a-z]", line) and not line.strip().startswith("."):
                cur.append(line.strip())
        return arch, kernels
    pytest.skip(f"no HIP clang builds {arch} (ROCm clang, clang-19 + rocm-device-libs, or pip ziglang)")


def _has(lines, pattern):
    return any(re.search(pattern, x) for x in lines)


def test_lowering(isa):
    arch, k = isa
    gfx950 = arch == "gfx950"
    tr = k["isa_lds_read_tr_b16"]
    assert _has(tr, r"^ds_read_b64_tr_b16 ") == gfx950 and _has(tr, r"^ds_bpermute_b32") != gfx950, tr
    for rows in (16, 32):
        sw = k[f"isa_permlane{rows}_swap"]
        assert _has(sw, rf"^v_permlane{rows}_swap_b32") == gfx950, sw
        assert _has(sw, r"^ds_bpermute_b32") != gfx950, sw
    assert _has(k["isa_cvt_pk_bf16_f32"], r"^v_cvt_pk_bf16_f32 ") == gfx950, k["isa_cvt_pk_bf16_f32"]
    red = k["isa_row_reduce16"]
    for ctrl in (r"quad_perm:\[1,0,3,2\]", r"quad_perm:\[2,3,0,1\]", r"row_half_mirror", r"row_mirror"):
        assert _has(red, ctrl), (ctrl, red)
    assert not _has(red, r"^ds_"), red
    assert _has(k["isa_row_shr1"], r"_dpp .*row_shr:1 "), k["isa_row_shr1"]
    nt = [x for x in k["isa_load_nontemporal"] if x.startswith("global_load")]
    cached = [x for x in k["isa_load_cached"] if x.startswith("global_load")]
    assert nt and all(re.search(r"^global_load_dwordx4 .* nt$", x) for x in nt), nt
    assert cached and not any(re.search(r" (nt|sc0|sc1)\b", x) for x in cached), cached
    buf = [x for x in k["isa_buffer_load16"] if x.startswith("buffer_load")]
    assert buf and all(re.search(r"^buffer_load_dwordx4 .* offen nt$", x) for x in buf), buf
    assert not _has(k["isa_buffer_load16"], r"^s_cbranch"), k["isa_buffer_load16"]
    assert _has(k["isa_cvt_pk_f32_fp8"], r"^v_cvt_pk_f32_fp8"), k["isa_cvt_pk_f32_fp8"]
    inv = k["isa_load_invariant"]
    assert _has(inv, r"^s_load_dword ") and not _has(inv, r"^global_load"), inv
