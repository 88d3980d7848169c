"""tools/amd_model.py, the AMD speed model: its instruction counter, loop finder, occupancy and
roofline arithmetic on hand-written inputs (any machine), and the whole model on the real kernels
where the HIP compilers are installed (.ci/install_gpu_compilers.sh)."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import amd_model as am  # noqa: E402
import gpu_compile_check as gcc  # noqa: E402

# A kernel with a prologue, a tile loop (header .LBB0_2, back edge from .LBB0_5) holding a masked
# branch (.LBB0_3, taken by boundary tiles only) and a per-lane predicated load, and an epilogue.
SNIPPET = """
\t.text
_Z4kernPf:                              ; @_Z4kernPf
; %bb.0:
\ts_load_dwordx2 s[0:1], s[4:5], 0x0
\tv_mov_b32_e32 v1, 0
\ts_waitcnt lgkmcnt(0)
.LBB0_2:                                ; =>This Inner Loop Header: Depth=1
\tglobal_load_dwordx4 v[4:7], v1, s[0:1]
\ts_waitcnt vmcnt(0)
\tds_write_b128 v1, v[4:7]
\ts_barrier
\tds_read_u16 v8, v1
\tds_read_u16 v9, v1 offset:2
\tds_bpermute_b32 v10, v1, v8
\ts_waitcnt lgkmcnt(0)
\tv_mfma_f32_16x16x16_bf16 v[12:15], v[8:9], v[10:11], v[12:15]
\ts_cbranch_vccnz .LBB0_4
; %bb.3:                                ;   in Loop: Header=BB0_2 Depth=1
\tv_cndmask_b32_e32 v2, v2, v3, vcc
\tv_cndmask_b32_e32 v2, v2, v3, vcc
\tv_cndmask_b32_e32 v2, v2, v3, vcc
.LBB0_4:                                ;   in Loop: Header=BB0_2 Depth=1
\tv_exp_f32_e32 v2, v2
\ts_and_saveexec_b64 s[2:3], vcc
\ts_cbranch_execz .LBB0_5
\tglobal_load_dword v3, v1, s[0:1]
.LBB0_5:                                ;   in Loop: Header=BB0_2 Depth=1
\ts_add_i32 s6, s6, 1
\ts_cmp_lt_i32 s6, s7
\ts_cbranch_scc1 .LBB0_2
; %bb.6:
\tglobal_store_dword v1, v2, s[0:1]
\ts_endpgm
.Lfunc_end0:
\t.size\t_Z4kernPf, .Lfunc_end0-_Z4kernPf
"""


def _loop():
    (lines,) = am.functions(SNIPPET).values()
    blocks = am.build_cfg(lines)
    (loop,) = am.loops(blocks)
    return blocks, loop


def test_functions_and_cfg():
    funcs = am.functions(SNIPPET)
    assert list(funcs) == ["_Z4kernPf"]
    blocks, loop = _loop()
    assert blocks[loop["header"]].label == ".LBB0_2"
    assert [blocks[i].label for i in loop["latches"]] == [".LBB0_5"]
    assert len(loop["body"]) == 5  # header, the masked block, .LBB0_4, the load, .LBB0_5


def test_tile_path_and_static_body_counts():
    blocks, loop = _loop()
    path = am.iteration_path(blocks, loop)
    c = am.count(i for n in path for i in blocks[n].insts)
    # The interior tile: every load issued (the predicated one too), the mask block skipped.
    assert (c["mfma"], c["vmem_load"], c["lds_read"], c["ds_read_u16"], c["lds_write"]) == (1, 2, 2, 2, 1)
    assert (c["lds_xfer"], c["ds_bpermute_b32"], c["waitcnt"], c["s_waitcnt_vmcnt0"]) == (1, 1, 2, 1)
    assert (c["barrier"], c["trans"], c["valu"], c["branch"], c["salu"]) == (1, 1, 0, 3, 3)
    assert c["total"] == 17
    static = am.count(i for n in loop["body"] for i in blocks[n].insts)
    assert static["valu"] == 3 and static["total"] == 20  # the mask block's three selects too
    outside = am.count(i for n in am.outside_path(blocks, loop) for i in blocks[n].insts)
    assert (outside["smem"], outside["vmem_store"], outside["mfma"], outside["total"]) == (1, 1, 0, 5)


def test_categories():
    cat = am.category
    assert cat("v_mfma_f32_16x16x32_bf16") == "mfma" and cat("ds_read_b64_tr_b16") == "lds_read"
    assert cat("ds_bpermute_b32") == "lds_xfer" and cat("buffer_load_dwordx4") == "vmem_load"
    assert cat("v_exp_f32_e32") == "trans" and cat("v_cvt_pk_bf16_f32") == "valu"
    assert cat("s_waitcnt") == "waitcnt" and cat("s_cbranch_execz") == "branch"
    assert cat("s_load_dwordx4") == "smem" and cat("s_add_u32") == "salu"


def test_vmem_round_trips():
    """A wait counts as a round trip only when a load was issued since the last wait."""
    insts = ["global_load_dwordx4 v[0:3], v[4:5], off", "buffer_load_dwordx4 v[6:9], v10, s[0:3], 0 offen",
             "s_waitcnt vmcnt(1)", "ds_write_b128 v1, v[0:3]", "s_waitcnt vmcnt(0)",
             "ds_write_b128 v1, v[6:9]", "global_load_dwordx4 v[0:3], v[4:5], off", "s_waitcnt vmcnt(0)",
             "s_waitcnt lgkmcnt(0)"]
    assert am.vmem_round_trips(insts) == 2
    assert am.vmem_round_trips(["s_waitcnt vmcnt(0)"]) == 0


def test_llvm_mca_reads_buffer_loads_as_global_loads():
    """llvm-mca 19 crashes on buffer loads: they reach it as VMEM global loads of the same width
    and destination; every other instruction unchanged."""
    assert (am._mca_stand_in("buffer_load_dwordx4 v[66:69], v18, s[36:39], 0 offen nt")
            == "global_load_dwordx4 v[66:69], v[18:19], off")
    assert am._mca_stand_in("buffer_load_dword v7, v3, s[4:7], 0 offen") == "global_load_dword v7, v[3:4], off"
    for inst in ("global_load_dwordx4 v[2:5], v[0:1], off nt", "s_load_dword s4, s[0:1], 0x8",
                 "v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]"):
        assert am._mca_stand_in(inst) == inst


def test_tile_cycles():
    blocks, loop = _loop()
    insts = [i for n in am.iteration_path(blocks, loop) for i in blocks[n].insts]
    c = am.tile_cycles(insts, am.ARCH_SPECS["gfx942"], waves_per_workgroup=4)
    assert c["mfma"] == 16  # 2*16*16*16 FLOP at 512 a clock
    assert c["valu"] == am.TRANS_CLK
    # LDS, a CU, 4 waves: b128 write 64*16/128 = 8, two u16 reads and a bpermute 64*4/128 = 2 each
    assert c["lds_cu"] == 4 * (8 + 2 + 2 + 2)
    assert c["serial"] == max(16 + 16 + c["other"], c["lds_cu"]) and c["bound"] == 56
    c950 = am.tile_cycles(insts, am.ARCH_SPECS["gfx950"], waves_per_workgroup=4)
    assert c950["mfma"] == 8 and c950["lds_cu"] == c["lds_cu"] / 2
    assert am.mfma_clocks("v_mfma_f32_16x16x32_bf16", am.ARCH_SPECS["gfx950"]) == 16


@pytest.mark.parametrize("vgprs,agprs,waves", [
    (129, 32, 3),   # gfx942 split_kernel<64> as clang 19 builds it: 132 + 32 = 164 -> 168
    (155, 0, 3),    # 155 -> 160
    (230, 0, 2),
    (226, 48, 1),   # 228 + 48 = 276 -> 280
    (64, 0, 8),     # capped at 8 waves a SIMD
    (512, 0, 1),
])
def test_vgpr_occupancy(vgprs, agprs, waves):
    assert am.vgpr_occupancy(vgprs, agprs, am.ARCH_SPECS["gfx942"]) == waves


def test_lds_occupancy():
    g942, g950 = am.ARCH_SPECS["gfx942"], am.ARCH_SPECS["gfx950"]
    # 56 KiB a workgroup: one fits 64 KiB; 57344 rounds to 57600 on gfx950, two fit 160 KiB.
    assert am.lds_workgroups(57344, g942) == 1 and am.lds_workgroups(57344, g950) == 2
    assert am.lds_workgroups(0, g942) is None and am.lds_workgroups(65537, g942) == 0
    o = am.occupancy(155, 0, 57344, 256, g950)
    assert (o["waves_per_simd"], o["workgroups_per_cu"], o["limited_by"]) == (2, 2, "LDS")
    o = am.occupancy(64, 0, 2112, 512, g942)  # 8 waves a workgroup: 8 a SIMD by VGPRs = 4 WGs
    assert (o["waves_per_simd"], o["workgroups_per_cu"], o["limited_by"]) == (8, 4, "VGPRs")


HOST_IR = """
@_ZN1k1aEv = internal constant ptr @_ZN1k16__device_stub__aEv, align 8
@_ZN1k1bEv = internal constant ptr @_ZN1k16__device_stub__bEv, align 8
define dso_local i32 @launch(ptr %0, i32 %1) {
  %3 = tail call fastcc i32 @helper(ptr noundef nonnull @_ZN1k1aEv, ptr noundef %0)
  %4 = call noundef i32 @hipFuncSetAttribute(ptr noundef nonnull @_ZN1k1bEv, i32 noundef 8, i32 noundef 49152)
  %5 = call i32 @__hipPushCallConfiguration(i64 %2, i32 %3, i64 4294967552, i32 1, i64 noundef 49152, ptr noundef %0)
  ret i32 %3
}
define internal fastcc i32 @helper(ptr noundef %0, ptr noundef %1) {
  %5 = call noundef i32 @hipFuncSetAttribute(ptr noundef %0, i32 noundef 8, i32 noundef 57344)
  %6 = call i32 @__hipPushCallConfiguration(i64 %2, i32 %3, i64 4294967552, i32 1, i64 noundef 57344, ptr noundef %1)
  ret i32 %6
}
"""


def test_host_launches():
    # `launch` names both kernels; its launch with 49152 bytes is b's (the size it set for b).
    got = am.host_launches(HOST_IR)
    assert got["_ZN1k1aEv"] == dict(dynamic_lds=[57344], threads=[256])
    assert got["_ZN1k1bEv"]["dynamic_lds"] == [49152]


class _Cfg:
    """benchmarks/bench.py's Config, as much as the roofline reads."""

    def __init__(self, L, R, window=None, kv_bytes=None):
        self.L, self.R, self.window, self.fp8 = L, R, window, False
        self.name = f"t{L}-r{R}"
        self.kv_bytes = kv_bytes if kv_bytes is not None else R * L * 2 * 64 * 2 * 2

    def as_dict(self):
        return dict(q_heads=16, kv_heads=2, head_dim=64, tokens=8)


def _fake_split(serial, bound, once, wgs_per_cu):
    return dict(tile=dict(cycles=dict(serial=serial, bound=bound)), once=dict(cycles=dict(serial=once)),
                occupancy=dict(workgroups_per_cu=wgs_per_cu))


def test_roofline_arithmetic():
    gpu = am.Gpu("X", "gfx942", 100, 2.0, 4.0)  # 2000 clocks a µs
    cfg = _Cfg(8192, 4)  # 128 tiles a request, 8 groups
    plan = dict(num_splits=16, split_kernel="per_tile", merge_warps=1)
    split = _fake_split(serial=2000, bound=1000, once=4000, wgs_per_cu=2)
    merge = dict(once=dict(cycles=dict(serial=2000)))
    r = am.roofline_row(cfg, plan, gpu, split, merge, hbm_fraction=0.5, launch_us=3.0)
    assert (r["tiles_per_request"], r["tiles_per_segment"], r["workgroups"]) == (128, 8, 128)
    partials = 128 * 64 * (64 * 2 + 8) * 2
    qo = 2 * 4 * 8 * 16 * 64 * 2
    assert r["bytes"] == cfg.kv_bytes + partials + qo
    assert r["memory_us"] == pytest.approx(r["bytes"] / (0.5 * 4e12) * 1e6)
    # chain: (4000 + 8 * 2000) / 2000 = 10 µs; spread: 128 WGs over 100 CUs, 2 resident:
    # 128 * 8 * max(2000 / 2, 1000) / 100 + one wave of WGs * 4000 = 10240 + 4000 clk = 7.12 µs
    assert r["compute_us"] == pytest.approx(10.0)
    assert r["merge_us"] == pytest.approx(1.0) and r["launch_us"] == 6.0
    assert r["bound"] == "compute"
    assert r["model_us"] == pytest.approx(10.0 + 1.0 + 6.0)
    big = am.roofline_row(_Cfg(8192, 4, kv_bytes=10 ** 9), plan, gpu, split, merge, 0.5, 3.0)
    assert big["bound"] == "memory" and big["model_us"] == pytest.approx(big["memory_us"] + 1.0 + 6.0)
    none = am.roofline_row(cfg, plan, gpu, None, None, 0.5, 3.0)
    assert none["compute_us"] is None and "not in the ISA" in none["note"]


def test_request_tiles():
    assert am.request_tiles(2048, None, 8) == 32
    assert am.request_tiles(32768, 2048, 8) == 33  # [30713, 32768): 2055 keys over 33 tiles
    assert am.request_tiles(100, None, 8) == 2


def test_cli_arguments():
    with pytest.raises(SystemExit):
        am.main(["--hbm-fraction", "1.5"])
    with pytest.raises(SystemExit):
        am.main(["--arch", "gfx1100"])


def _hip_arch_or_skip(arch):
    chains = gcc.find_hip_toolchains()
    reasons = []
    for c in chains:
        try:
            c.flags(arch)
            return
        except gcc.Unsupported as e:
            reasons.append(str(e).splitlines()[0])
    pytest.skip(f"no HIP clang here builds {arch} ({'; '.join(reasons) or gcc.find_distro_clang()[1]}); "
                "bash .ci/install_gpu_compilers.sh installs clang-19 + ziglang")


@pytest.mark.gpu_compile
def test_model_on_the_real_kernels(tmp_path, capsys):
    """The model of today's kernels on both targets: every split kernel has its tile loop with
    MFMA and LDS reads in it, no kernel uses scratch, and the report and JSON are written."""
    for arch in am.ARCHS:
        _hip_arch_or_skip(arch)
    from jax_muse_attn import _ffi

    out = tmp_path / "m.json"
    argv = ["--json", str(out)] + ([] if _ffi._MODULE is not None else ["--no-roofline"])
    rc = am.main(argv)
    text = capsys.readouterr().out
    assert rc == 0, text[-4000:]
    assert text.startswith(am.BANNER)
    data = am.json.loads(out.read_text())
    for arch in am.ARCHS:
        ks = data["archs"][arch]["kernels"].values()
        splits = [k for k in ks if k["role"] == "split"]
        assert splits and any(k["role"] == "merge" for k in ks)
        for k in ks:
            assert k["scratch"] == 0, k["variant"]
            assert k["occupancy"]["waves_per_simd"] >= 1, k["variant"]
        for k in splits:
            t = k["tile"]["path"]
            assert t["mfma"] > 0 and t["lds_read"] > 0 and t["vmem_load"] > 0, (arch, k["variant"], t)
            if arch == "gfx950" and k["head_dim"] == 64 and "balanced" not in k["variant"]:
                # Q, then every prologue tile's loads in flight together (split_cta.h): a
                # workgroup's start waits on memory a few times, not once a chunk. (The balanced
                # cut's kernels read the batch's lengths first: kernels of their own.)
                assert k["once"]["vmem_round_trips"] <= 3, (k["variant"], k["once"])
            assert k["lds_dynamic_found"] and k["lds"] <= am.ARCH_SPECS[arch].lds_per_cu, k["variant"]
            # The K/V loads' cache policy (amd_targets.h cache_window_kv): the cached variants'
            # loads keep their lines, every other split kernel's stream past the caches.
            loads = k["buffer_loads"]
            if "_cached<" in k["variant"]:
                assert loads["cached"] > 0 and loads["nt"] == 0, (arch, k["variant"], loads)
            else:
                assert loads["nt"] > 0 and loads["cached"] == 0, (arch, k["variant"], loads)
        for base in ("split_kernel_cached", "split_kernel_fp8_cached"):
            for d in (64, 128):
                assert am.find_kernel(data["archs"][arch], "split", base, d), (arch, base, d)
    if _ffi._MODULE is not None:
        # The AMD table's split VGPR budget (ffi/gpu/amd_targets.h) is the largest split
        # kernel's allocation as compiled (VGPRs, then AGPRs, in the target's granule).
        table = {row["name"]: row for row in _ffi._MODULE.amd_targets()}
        for arch in am.ARCHS:
            spec = am.ARCH_SPECS[arch]
            for d in (64, 128):
                need = max(am.vgpr_total(k["vgprs"], k["agprs"], spec)
                           for k in data["archs"][arch]["kernels"].values()
                           if k["role"] == "split" and k["head_dim"] == d)
                assert table[arch][f"split_vgprs_d{d}"] == need, (arch, d, need)
        rows = data["roofline"]["MI355X"]["rows"]
        assert len(rows) == 2 * len(am._bench().full_grid())
        assert all(r["model_us"] > r["launch_us"] for r in rows)
