"""AMD speed MODEL of the split and merge kernels, read from their gfx942 / gfx950 assembly.
MODEL, not a measurement: no AMD GPU has run these kernels.

    python tools/amd_model.py [--arch gfx942 gfx950] [--json PATH] [--no-roofline]
                              [--hbm-fraction F] [--launch-us US] [--root DIR]

For every kernel of ffi/gpu/{split_kernel,split_kernel_fp8,split_kernel_drafts,merge_kernel}.cu.cc,
compiled as
tools/gpu_compile_check.py compiles them (the real build's flags, the HIP clang it finds):

- resources: VGPR / AGPR / SGPR, LDS a workgroup (static, plus the dynamic size the host code
  passes at launch, read from the host side's LLVM IR), scratch, and occupancy (waves a SIMD from
  the unified VGPR file and from LDS);
- the split kernels' tile loop, found as the loop (back edge) holding the most MFMA: its
  instruction mix per 64-key tile (one wave), on the path an interior tile takes (see
  `iteration_path`), and the loop's whole static body;
- an llvm-mca estimate of that path on gfx942 (llvm-mca's model ignores memory latency) and this
  file's issue-rate model (`tile_cycles`);
- a roofline of each config of benchmarks/bench.py's grid, bf16 and FP8, on MI300X and MI355X
  (`roofline`), with the launch plan the module gives those devices.

Exit 1 when a kernel uses scratch or spills (the compile check's rule), 2 when no HIP clang builds
an arch. Standard library only, plus jax_muse_attn (the launch plan) for the roofline.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_compile_check as gcc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ("split_kernel.cu.cc", "split_kernel_fp8.cu.cc", "split_kernel_drafts.cu.cc",
           "split_kernel_balanced.cu.cc", "merge_kernel.cu.cc")
ARCHS = ("gfx942", "gfx950")
BANNER = "MODEL, not a measurement: no AMD GPU has run these kernels."

# --------------------------------------------------------------------------- hardware
# Each number decides something below; its public source beside it.


@dataclasses.dataclass(frozen=True)
class ArchSpec:
    name: str
    # VGPRs a lane a SIMD, architected and accumulation registers together (unified on gfx90a
    # and later), allocated in granules of 8; at most 8 waves a SIMD. LLVM AMDGPU
    # (AMDGPUBaseInfo getMaxWavesPerEU: 8 where the target has AccVGPRs; getVGPRAllocGranule 8;
    # llvm.org/docs/AMDGPUUsage.html "gfx90a/gfx942: unified register file").
    vgprs_per_simd: int
    vgpr_granule: int
    max_waves_per_simd: int
    simds_per_cu: int
    # LDS a CU, and its allocation granule. gfx942: 64 KiB (LLVM getAddressableLocalMemorySize:
    # 65536 for gfx9); gfx950: 160 KiB (LLVM getAddressableLocalMemorySize: GK_GFX950 163840; Chips and
    # Cheese, "AMD's CDNA 4 Architecture Announcement": LDS 64 KB -> 160 KB). Granules:
    # AMDGPUUsage.rst COMPUTE_PGM_RSRC2.LDS_SIZE, 128 dwords (gfx9) / 320 dwords (GFX950).
    lds_per_cu: int
    lds_granule: int
    # LDS bytes a CU a clock: 128 on CDNA3; CDNA4 doubled the read bandwidth to 256 (Chips and
    # Cheese, CDNA 4 announcement). The model charges every lane 4 bytes at least (a bank).
    lds_bytes_per_clk: int
    # Clocks a SIMD is busy with one MFMA of the kinds these kernels use, from the peak dense
    # bf16 rate: MI300X 1307 TFLOPS at 2.1 GHz on 304 CUs = 2048 FLOP/clk/CU = 512 a SIMD, so a
    # 16x16x16 (8192 FLOP) is 16 clk; MI355X 2.5 PFLOPS at 2.4 GHz on 256 CUs (CDNA4 doubled the
    # per-CU matrix rate: 8192 FP8 FLOP/clk/CU, ISSCC 2026 talk) = 4096 bf16 FLOP/clk/CU, so a
    # 16x16x32 (16384 FLOP) is 16 clk. Other MFMA: FLOP / (the per-SIMD rate).
    mfma_flop_per_clk_simd: int


ARCH_SPECS = {
    "gfx942": ArchSpec("gfx942", 512, 8, 8, 4, 64 * 1024, 512, 128, 512),
    "gfx950": ArchSpec("gfx950", 512, 8, 8, 4, 160 * 1024, 1280, 256, 1024),
}

# VALU: a wave64 instruction on a 16-lane SIMD takes 4 clocks (MI300X: 81.7 TFLOPS FP32 vector
# without packed math at 2.1 GHz on 304 CUs = 128 FLOP/clk/CU = 16 FMA lanes a SIMD); transcendentals (v_exp, v_log, v_rcp, v_rsq, v_sqrt, v_sin,
# v_cos) a quarter of that rate. SALU, branches, waits, barriers: 1 issue clock (their latency is
# not modelled). VMEM: 1 issue clock (the bytes are the roofline's).
VALU_CLK = 4
TRANS_CLK = 16
TRANS = re.compile(r"^v_(exp|log|rcp|rsq|sqrt|sin|cos)_")


@dataclasses.dataclass(frozen=True)
class Gpu:
    name: str
    arch: str
    cus: int
    clock_ghz: float
    hbm_tbps: float


# AMD's spec sheets: MI300X 304 CUs, 2100 MHz peak engine clock, 5.3 TB/s HBM3; MI355X 256 CUs,
# 2400 MHz, 8 TB/s HBM3E (AMD Instinct MI355X product page; Hot Chips 2025 CDNA 4 talk).
GPUS = {
    "MI300X": Gpu("MI300X", "gfx942", 304, 2.1, 5.3),
    "MI355X": Gpu("MI355X", "gfx950", 256, 2.4, 8.0),
}
# What a streaming kernel reaches of the HBM spec rate. An assumption: this repo's copy floors
# are 0.86-0.89 of spec on NVIDIA (H200 4130 of 4800 GB/s, H100 2983 of 3350); the first run on
# hardware (tools/rocm_first_run.py) prints the measured copy rate beside it.
HBM_FRACTION = 0.8
# A kernel boundary in a HIP graph. No MI300 / MI355 figure was found in public; this is the
# per-node cost of a HIP graph chain measured on gfx1100 (ROCm/rocm-systems issue 10834: 941
# dependent kernel nodes in 3.6-3.9 ms, ~3.9 µs a node). This repo's H200 floor is ~1 µs a launch
# (docs/DESIGN.md, two empty launches 2.07 µs). Override with --launch-us.
LAUNCH_US = 3.9
LAUNCHES = 2  # split + merge

# --------------------------------------------------------------------------- compiling


def _digest(parts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() + b"\0")
    return h.hexdigest()[:16]


def _source_digest(root: str) -> str:
    files = []
    for d, _, fs in os.walk(os.path.join(root, "ffi")):
        if os.sep + "emu" in d or os.sep + "cpu" in d:
            continue
        files += [os.path.join(d, f) for f in sorted(fs) if f.endswith((".h", ".cc"))]
    h = hashlib.sha256()
    for f in sorted(files):
        with open(f, "rb") as fh:
            h.update(os.path.relpath(f, root).encode() + b"\0" + fh.read())
    return h.hexdigest()[:16]


def _cache_dir() -> str:
    d = os.path.join(gcc._cache_dir(), "amd_model")
    os.makedirs(d, exist_ok=True)
    return d


def compile_device(root: str, source: str, arch: str, chains) -> Tuple[str, str, str]:
    """(assembly, resource remarks, compiler label) of one source for one arch, cached by the
    sources, flags and compiler. Raises gcc.Unsupported where no toolchain builds arch."""
    reasons = []
    for chain in chains:
        try:
            flags = chain.flags(arch)
        except gcc.Unsupported as e:
            reasons.append(str(e).strip().splitlines()[0])
            continue
        cmd = [*chain.cmd, "-x", "hip", "-std=c++17", f"--offload-arch={arch}", *flags,
               "--cuda-device-only", "-S", *gcc.HIP_BUILD_FLAGS, "-DMUSE_ATTN_WITH_HIP",
               "-Rpass-analysis=kernel-resource-usage", f"-I{os.path.join(root, 'ffi')}",
               os.path.join(root, "ffi", "gpu", source)]
        key = _digest([_source_digest(root), source, arch, chain.label, *cmd])
        base = os.path.join(_cache_dir(), key)
        if os.path.exists(base + ".s") and os.path.exists(base + ".remarks"):
            with open(base + ".s") as f, open(base + ".remarks") as g:
                return f.read(), g.read(), chain.label
        with tempfile.TemporaryDirectory(prefix="muse_amd_model_") as tmp:
            out = os.path.join(tmp, "k.s")
            p = subprocess.run(cmd + ["-o", out], capture_output=True, text=True, errors="replace")
            if p.returncode != 0:
                raise RuntimeError(f"{chain.label} failed on {source} for {arch}:\n{p.stderr[-4000:]}")
            with open(out) as f:
                asm = f.read()
        for suffix, text in ((".s", asm), (".remarks", p.stderr)):
            with open(base + suffix + ".tmp", "w") as f:
                f.write(text)
            os.replace(base + suffix + ".tmp", base + suffix)
        return asm, p.stderr, chain.label
    raise gcc.Unsupported(f"no HIP clang builds {arch}: " + " | ".join(reasons or ["none found"]))


def compile_host_ir(root: str, source: str, chains) -> Optional[str]:
    """The host side's LLVM IR of a source (what the launches pass), or None where no clang with
    HIP headers is here (a ROCm or distro clang; ziglang's has no host HIP headers)."""
    for chain in chains:
        if chain.kind == "zig":
            continue
        cmd = [*chain.cmd, "-x", "hip", "-std=c++17", "--cuda-host-only", "-O2", "-S", "-emit-llvm",
               "--offload-arch=gfx942", "-DMUSE_ATTN_WITH_HIP", f"-I{os.path.join(root, 'ffi')}",
               os.path.join(root, "ffi", "gpu", source)]
        key = _digest([_source_digest(root), source, "host", chain.label, *cmd])
        path = os.path.join(_cache_dir(), key + ".ll")
        if os.path.exists(path):
            with open(path) as f:
                return f.read()
        with tempfile.TemporaryDirectory(prefix="muse_amd_model_") as tmp:
            out = os.path.join(tmp, "h.ll")
            p = subprocess.run(cmd + ["-o", out], capture_output=True, text=True, errors="replace")
            if p.returncode != 0:
                continue
            with open(out) as f:
                text = f.read()
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        return text
    return None


# --------------------------------------------------------------------------- host launches

_SETATTR = re.compile(r"@hipFuncSetAttribute\(ptr (?:noundef )?(?:nonnull )?(@[\w.$]+|%\d+), i32 (?:noundef )?8, "
                      r"i32 (?:noundef )?(\d+)\)")
_PUSH = re.compile(r"@__hipPushCallConfiguration\(i64 [^,]+, i32 [^,]+, i64 (?:noundef )?(\d+), "
                   r"i32 (?:noundef )?(\d+), i64 (?:noundef )?(\d+),")
_DEFINE = re.compile(r"^define .*? @([\w.$]+)\((.*)\)")
_CALL = re.compile(r"call [^@]*@([\w.$]+)\((.*)\)")


def host_launches(ir: str) -> Dict[str, dict]:
    """{kernel: {"dynamic_lds": [bytes ...], "threads": [n ...]}} from the host IR: the constant
    sizes given to hipFuncSetAttribute(kernel, MaxDynamicSharedMemorySize, N) and to the launch
    (__hipPushCallConfiguration), where the kernel is named in the call or passed by a caller to
    the function that makes it (one level). Sizes the IR computes at run time are not found."""
    kernels = set(re.findall(r"^@([\w.$]+) = [\w ]*constant ptr @[\w.$]*__device_stub__", ir, re.M))
    funcs: Dict[str, dict] = {}
    cur = None
    for line in ir.splitlines():
        m = _DEFINE.match(line)
        if m:
            params = [p.strip().split()[-1] for p in m.group(2).split(",") if p.strip()]
            cur = funcs[m.group(1)] = dict(params=params, attrs=[], pushes=[], calls=[], refs=set())
            continue
        if cur is None:
            continue
        if line.startswith("}"):
            cur = None
            continue
        for m in _SETATTR.finditer(line):
            cur["attrs"].append((m.group(1).lstrip("@"), int(m.group(2))))
        for m in _PUSH.finditer(line):
            packed, z, smem = int(m.group(1)), int(m.group(2)), int(m.group(3))
            cur["pushes"].append(((packed & 0xFFFFFFFF) * (packed >> 32 or 1) * z, smem))
        for m in _CALL.finditer(line):
            cur["calls"].append((m.group(1), [a.strip().split()[-1] for a in m.group(2).split(",")
                                              if a.strip()]))
        cur["refs"] |= {k for k in re.findall(r"@([\w.$]+)", line) if k in kernels}
    out: Dict[str, dict] = {k: dict(dynamic_lds=[], threads=[]) for k in kernels}

    def add(kernel, smem=None, threads=None):
        if kernel in out:
            if smem is not None and smem not in out[kernel]["dynamic_lds"]:
                out[kernel]["dynamic_lds"].append(smem)
            if threads is not None and threads not in out[kernel]["threads"]:
                out[kernel]["threads"].append(threads)

    for name, f in funcs.items():
        # The kernels this function may launch: those it names, or those its callers pass to
        # the parameter a hipFuncSetAttribute / launch uses.
        direct = [k for k in f["refs"]]
        for target, smem in f["attrs"]:
            if not target.startswith("%"):
                add(target, smem=smem)
            else:
                idx = f["params"].index(target) if target in f["params"] else None
                for caller in funcs.values():
                    for callee, args in caller["calls"]:
                        if callee == name and idx is not None and idx < len(args):
                            add(args[idx].lstrip("@"), smem=smem)
        for threads, smem in f["pushes"]:
            ks = direct
            if not ks and f["params"]:
                ks = [a.lstrip("@") for caller in funcs.values() for callee, args in caller["calls"]
                      if callee == name for a in args if a.lstrip("@") in kernels]
            # A function naming several kernels: a size goes to those it set that size for.
            same = [t for t, sz in f["attrs"] if smem and sz == smem and t in ks]
            ks = same or ks
            for k in ks:
                add(k, smem=smem if smem else None, threads=threads)
    return out


# --------------------------------------------------------------------------- assembly


@dataclasses.dataclass
class Block:
    label: Optional[str]
    insts: List[str]
    succs: List[int] = dataclasses.field(default_factory=list)


_LABEL = re.compile(r"^([.\w$]+):")
_BRANCH = re.compile(r"^(s_branch|s_cbranch_\w+)\s+([.\w$]+)")


def functions(asm: str) -> Dict[str, List[str]]:
    """{symbol: its lines (labels and instructions, comments dropped)} for each function."""
    out: Dict[str, List[str]] = {}
    cur = None
    for raw in asm.splitlines():
        line = raw.split(";")[0].rstrip()
        if not line.strip():
            continue
        m = _LABEL.match(line)
        if m and not line.startswith((" ", "\t")):
            name = m.group(1)
            if not name.startswith(".") and not name.startswith("__hip_cuid"):
                cur = name
                out[cur] = []
                continue
            if name.startswith(".Lfunc_end"):
                cur = None
                continue
            if cur is not None:
                out[cur].append(name + ":")
            continue
        if cur is not None:
            s = line.strip()
            if not s.startswith("."):  # assembler directives
                out[cur].append(s)
    return out


def kernel_metadata(asm: str) -> Dict[str, dict]:
    """The amdhsa.kernels note's fields of each kernel (name -> {field: value})."""
    out: Dict[str, dict] = {}
    m = re.search(r"^amdhsa\.kernels:\n(.*?)^(?:amdhsa\.target|\.end_amdgpu_metadata)", asm, re.M | re.S)
    if not m:
        return out
    for item in re.split(r"^  - ", m.group(1), flags=re.M):
        fields = dict(re.findall(r"^\s*\.(\w+):\s+(\S+)\s*$", item, re.M))
        if "name" in fields:
            out[fields["name"]] = fields
    acc = dict(re.findall(r"\.amdhsa_kernel (\S+)\n(?:.*\n)*?\s*\.amdhsa_accum_offset (\d+)", asm))
    for name, fields in out.items():
        if name in acc:
            fields["accum_offset"] = acc[name]
    return out


def build_cfg(lines: Sequence[str]) -> List[Block]:
    """Basic blocks of a function in layout order, with their successors."""
    blocks: List[Block] = [Block(None, [])]
    for line in lines:
        if line.endswith(":"):
            if blocks[-1].insts or blocks[-1].label is not None:
                blocks.append(Block(line[:-1], []))
            else:
                blocks[-1].label = line[:-1]
            continue
        blocks[-1].insts.append(line)
        if _BRANCH.match(line) or line.startswith(("s_endpgm", "s_setpc_b64")):
            blocks.append(Block(None, []))
    blocks = [b for b in blocks if b.insts or b.label is not None]
    index = {b.label: i for i, b in enumerate(blocks) if b.label}
    for i, b in enumerate(blocks):
        last = b.insts[-1] if b.insts else ""
        m = _BRANCH.match(last)
        if m:
            if m.group(2) in index:
                b.succs.append(index[m.group(2)])
            if m.group(1) != "s_branch" and i + 1 < len(blocks):
                b.succs.append(i + 1)
        elif not last.startswith(("s_endpgm", "s_setpc_b64", "s_trap")) and i + 1 < len(blocks):
            b.succs.append(i + 1)
    return blocks


def mnemonic(inst: str) -> str:
    return inst.split()[0] if inst.split() else ""


def category(m: str) -> str:
    """The instruction class the model counts: mfma, lds_read, lds_write, lds_xfer (bpermute,
    swizzle, atomics), vmem_load, vmem_store, smem (scalar loads), waitcnt, barrier, branch,
    trans (VALU transcendental), valu, salu, other."""
    if m.startswith(("v_mfma", "v_smfmac")):
        return "mfma"
    if m.startswith("ds_"):
        if m.startswith(("ds_read", "ds_load")):
            return "lds_read"
        if m.startswith(("ds_write", "ds_store")):
            return "lds_write"
        return "lds_xfer"
    if m.startswith(("global_load", "buffer_load", "flat_load", "scratch_load")):
        return "vmem_load"
    if m.startswith(("global_store", "buffer_store", "flat_store", "scratch_store", "global_atomic",
                     "buffer_atomic", "flat_atomic")):
        return "vmem_store"
    if m.startswith(("s_load", "s_buffer_load", "s_store", "s_dcache")):
        return "smem"
    if m.startswith("s_waitcnt"):
        return "waitcnt"
    if m in ("s_barrier",) or m.startswith("s_barrier"):
        return "barrier"
    if m.startswith(("s_branch", "s_cbranch", "s_setpc", "s_swappc", "s_endpgm")):
        return "branch"
    if TRANS.match(m):
        return "trans"
    if m.startswith("v_"):
        return "valu"
    if m.startswith("s_"):
        return "salu"
    return "other"


CATEGORIES = ("mfma", "lds_read", "lds_write", "lds_xfer", "vmem_load", "vmem_store", "smem",
              "waitcnt", "barrier", "branch", "trans", "valu", "salu", "other")
# Instructions reported by name too (issue 60 names them).
WATCH = ("ds_read_u16", "ds_read_b128", "ds_read_b64_tr_b16", "ds_bpermute_b32", "ds_swizzle_b32",
         "s_waitcnt_vmcnt0", "v_cvt_pk_bf16_f32")


def count(insts: Iterable[str]) -> Dict[str, int]:
    """Instruction counts: by category, total, and the WATCH names (s_waitcnt_vmcnt0: a wait for
    every load in flight)."""
    c: collections.Counter = collections.Counter()
    for inst in insts:
        m = mnemonic(inst)
        if not m:
            continue
        c[category(m)] += 1
        c["total"] += 1
        if m in WATCH:
            c[m] += 1
        if m == "s_waitcnt" and re.search(r"vmcnt\(0\)", inst):
            c["s_waitcnt_vmcnt0"] += 1
    return {k: c.get(k, 0) for k in ("total",) + CATEGORIES + WATCH}


def buffer_load_policy(insts: Iterable[str]) -> Dict[str, int]:
    """The buffer loads (the K/V loads) by cache policy: nontemporal (the `nt` bit) or cached."""
    n = dict(nt=0, cached=0)
    for i in insts:
        if mnemonic(i).startswith("buffer_load"):
            n["nt" if re.search(r"\bnt\b", i) else "cached"] += 1
    return n


def vmem_round_trips(insts: Iterable[str]) -> int:
    """Vector-memory round trips along a path: waits (s_waitcnt vmcnt) with a load issued since
    the previous one, i.e. loads that cannot all be in flight together."""
    trips, pending = 0, False
    for inst in insts:
        m = mnemonic(inst)
        if category(m) == "vmem_load":
            pending = True
        elif m == "s_waitcnt" and "vmcnt" in inst and pending:
            trips, pending = trips + 1, False
    return trips


def _dfs_back_edges(blocks: List[Block], start: int = 0) -> set:
    """Edges (u, v) where v is on the DFS stack when u reaches it."""
    back, state = set(), {}
    stack = [(start, iter(blocks[start].succs))]
    state[start] = 1
    while stack:
        u, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            state[u] = 2
            stack.pop()
            continue
        if state.get(nxt) == 1:
            back.add((u, nxt))
        elif nxt not in state:
            state[nxt] = 1
            stack.append((nxt, iter(blocks[nxt].succs)))
    return back


def loops(blocks: List[Block]) -> List[dict]:
    """Natural loops: {header, latches, body (block indices)} for each back edge's target."""
    back = _dfs_back_edges(blocks)
    preds = collections.defaultdict(list)
    for i, b in enumerate(blocks):
        for s in b.succs:
            preds[s].append(i)
    by_header: Dict[int, dict] = {}
    for u, h in back:
        body = by_header.setdefault(h, dict(header=h, latches=[], body={h}))
        body["latches"].append(u)
        work = [u]
        while work:
            x = work.pop()
            if x not in body["body"]:
                body["body"].add(x)
                work += preds[x]
    return list(by_header.values())


def _weight(insts: Sequence[str]) -> Tuple[int, int, int]:
    c = count(insts)
    return (c["mfma"], c["vmem_load"], -c["total"])


def best_path(blocks: List[Block], nodes: set, start: int, ends: set, skip_edges: set) -> List[int]:
    """The path from start to any block of ends, inside nodes, without skip_edges, that issues the
    most MFMA, then the most VMEM loads, then the fewest instructions (lexicographic; longest
    path on the DAG that remains)."""
    order, seen = [], set()

    def visit(n):  # iterative post-order
        stack = [(n, iter(blocks[n].succs))]
        seen.add(n)
        while stack:
            u, it = stack[-1]
            v = next(it, None)
            if v is None:
                order.append(u)
                stack.pop()
            elif v in nodes and (u, v) not in skip_edges and v not in seen:
                seen.add(v)
                stack.append((v, iter(blocks[v].succs)))

    visit(start)
    best: Dict[int, Tuple[Tuple[int, int, int], List[int]]] = {}
    for u in order:  # reverse topological: successors first
        w = _weight(blocks[u].insts)
        cand = [best[v] for v in blocks[u].succs if v in best and v in nodes and (u, v) not in skip_edges]
        if u in ends:
            cand.append(((0, 0, 0), []))
        if not cand:
            continue
        tail = max(cand, key=lambda t: t[0])
        best[u] = (tuple(a + b for a, b in zip(w, tail[0])), [u] + tail[1])
    return best.get(start, ((0, 0, 0), []))[1]


def iteration_path(blocks: List[Block], loop: dict) -> List[int]:
    """One iteration of a loop as an interior tile runs it: from the header to a latch, the path
    with the most MFMA, then the most VMEM loads (every page present, every copy issued), then
    the fewest instructions (no mask or boundary work); inner loops counted once."""
    body = loop["body"]
    skip = {(u, v) for u, v in _dfs_back_edges(blocks, loop["header"]) if u in body and v in body}
    skip |= {(l, loop["header"]) for l in loop["latches"]}
    return best_path(blocks, body, loop["header"], set(loop["latches"]), skip)


def outside_path(blocks: List[Block], loop: Optional[dict]) -> List[int]:
    """Entry to exit (s_endpgm) with the loop's blocks weighing nothing: the prologue and
    epilogue a workgroup runs once (the path with the most MFMA, VMEM, then fewest instructions
    outside the loop)."""
    exits = {i for i, b in enumerate(blocks) if b.insts and b.insts[-1].startswith("s_endpgm")}
    skip = _dfs_back_edges(blocks)
    nodes = set(range(len(blocks)))
    if loop is None:
        return best_path(blocks, nodes, 0, exits, skip)
    saved = {i: blocks[i].insts for i in loop["body"]}
    try:
        for i in loop["body"]:
            blocks[i].insts = [x for x in blocks[i].insts if _BRANCH.match(x)]  # keep the edges
        path = best_path(blocks, nodes, 0, exits, skip)
    finally:
        for i, insts in saved.items():
            blocks[i].insts = insts
    return [i for i in path if i not in loop["body"]]


# --------------------------------------------------------------------------- model arithmetic


def vgpr_total(vgprs: int, agprs: int, spec: ArchSpec) -> int:
    """Registers a lane is allocated: VGPRs (to 4 where AGPRs follow), AGPRs, in the granule."""
    total = (-(-max(vgprs, 1) // 4) * 4 if agprs else max(vgprs, 1)) + agprs
    return -(-total // spec.vgpr_granule) * spec.vgpr_granule


def vgpr_occupancy(vgprs: int, agprs: int, spec: ArchSpec) -> int:
    """Waves a SIMD the unified register file allows: architected VGPRs rounded to 4 (the AGPR
    offset), plus AGPRs, rounded to the allocation granule."""
    return max(0, min(spec.max_waves_per_simd, spec.vgprs_per_simd // vgpr_total(vgprs, agprs, spec)))


def lds_workgroups(lds_bytes: int, spec: ArchSpec) -> Optional[int]:
    """Workgroups a CU's LDS holds (None: unlimited by LDS)."""
    if lds_bytes <= 0:
        return None
    alloc = -(-lds_bytes // spec.lds_granule) * spec.lds_granule
    return spec.lds_per_cu // alloc


def occupancy(vgprs: int, agprs: int, lds_bytes: int, threads: int, spec: ArchSpec) -> dict:
    """Waves a SIMD and workgroups a CU, by VGPRs and by LDS (a workgroup's waves spread over the
    CU's SIMDs)."""
    waves_wg = max(1, -(-threads // 64))
    by_vgpr = vgpr_occupancy(vgprs, agprs, spec)
    wg_by_vgpr = by_vgpr * spec.simds_per_cu // waves_wg
    wg_by_lds = lds_workgroups(lds_bytes, spec)
    wgs = wg_by_vgpr if wg_by_lds is None else min(wg_by_vgpr, wg_by_lds)
    waves = min(by_vgpr, wgs * waves_wg // spec.simds_per_cu) if wgs else 0
    return dict(waves_per_simd=waves, waves_per_simd_by_vgpr=by_vgpr, workgroups_per_cu=wgs,
                workgroups_per_cu_by_vgpr=wg_by_vgpr, workgroups_per_cu_by_lds=wg_by_lds,
                waves_per_workgroup=waves_wg,
                limited_by=("LDS" if wg_by_lds is not None and wg_by_lds < wg_by_vgpr else "VGPRs"))


_MFMA_SHAPE = re.compile(r"v_mfma_\w*?(\d+)x(\d+)x(\d+)")


def mfma_clocks(m: str, spec: ArchSpec) -> float:
    """Clocks a SIMD spends on one MFMA: its FLOP over the SIMD's dense bf16 rate (ArchSpec)."""
    s = _MFMA_SHAPE.search(m)
    if not s:
        return 16.0
    a, b, k = map(int, s.groups())
    return 2.0 * a * b * k / spec.mfma_flop_per_clk_simd


def lds_clocks(inst: str, spec: ArchSpec) -> float:
    """Clocks of a CU's LDS for one wave64 LDS instruction: 64 lanes x max(4, bytes a lane),
    over the LDS bytes a clock (no bank conflicts)."""
    m = mnemonic(inst)
    width = 4
    w = re.search(r"_(?:b|u|i)(\d+)", m)
    if w:
        width = max(4, int(w.group(1)) // 8)
    if m.startswith(("ds_read2", "ds_write2", "ds_load_2", "ds_store_2")):
        width *= 2
    return 64.0 * width / spec.lds_bytes_per_clk


def tile_cycles(insts: Sequence[str], spec: ArchSpec, waves_per_workgroup: int = 4) -> dict:
    """The issue-rate model of one pass over insts by every wave of a workgroup, in clocks:
    per SIMD (one wave a SIMD): VALU 4 a wave64 instruction, transcendental 16, MFMA its FLOP
    over the SIMD's rate, everything else 1 issue clock; per CU: the LDS bytes of all the
    workgroup's waves over the LDS rate. `serial`: one wave's pipes one after another, plus
    nothing for latency (a lone wave with perfect latency hiding); `bound`: the busiest pipe
    (MFMA, VALU, LDS, the rest), what overlapping waves could at best reach."""
    pipes = collections.Counter()
    for inst in insts:
        m = mnemonic(inst)
        cat = category(m)
        if cat == "mfma":
            pipes["mfma"] += mfma_clocks(m, spec)
        elif cat == "valu":
            pipes["valu"] += VALU_CLK
        elif cat == "trans":
            pipes["valu"] += TRANS_CLK
        elif cat.startswith("lds"):
            pipes["lds_cu"] += lds_clocks(inst, spec) * waves_per_workgroup
            pipes["issue"] += 1
        elif m:
            pipes["issue"] += 1
    simd = pipes["mfma"] + pipes["valu"] + pipes["issue"]
    return dict(mfma=pipes["mfma"], valu=pipes["valu"], lds_cu=pipes["lds_cu"], other=pipes["issue"],
                serial=max(simd, pipes["lds_cu"]),
                bound=max(pipes["mfma"], pipes["valu"], pipes["lds_cu"], pipes["issue"]))


_BUFFER_LOAD = re.compile(r"^buffer_load_(\w+)\s+(v\[\d+:\d+\]|v\d+),\s*v(\d+),")


def _mca_stand_in(inst: str) -> str:
    """inst as llvm-mca takes it: a buffer load (which crashes llvm-mca 19) as the global load of
    the same width (both VMEM; its model has no memory latency either way)."""
    m = _BUFFER_LOAD.match(inst)
    if not m:
        return inst
    v = int(m.group(3))
    return f"global_load_{m.group(1)} {m.group(2)}, v[{v}:{v + 1}], off"


def llvm_mca(insts: Sequence[str], mcpu: str = "gfx942") -> Optional[dict]:
    """llvm-mca's estimate of insts run back to back (cycles an iteration), or None where no
    llvm-mca is here or it cannot read them. Its gfx942 model has no memory latency."""
    # The newest versioned one first: an old unversioned llvm-mca may not know gfx942.
    tool = next((shutil.which(t) for t in (*[f"llvm-mca-{v}" for v in range(30, 16, -1)], "llvm-mca")
                 if shutil.which(t)), None)
    if tool is None:
        return None
    text = "\n".join(_mca_stand_in(i) for i in insts if not _BRANCH.match(i)) + "\n"
    iters = 100
    p = subprocess.run([tool, "-mtriple=amdgcn", f"-mcpu={mcpu}", f"-iterations={iters}"], input=text,
                       capture_output=True, text=True)
    m = re.search(r"Total Cycles:\s+(\d+)", p.stdout)
    if p.returncode != 0 or not m:
        return dict(tool=tool, error=(p.stderr.strip().splitlines() or ["no output"])[0][:200])
    return dict(tool=tool, cycles_per_iteration=int(m.group(1)) / iters, mcpu=mcpu,
                note="llvm-mca's gfx942 model ignores memory latency (LDS, VMEM, waits)")


# --------------------------------------------------------------------------- per arch


def _demangled(names):
    return gcc._demangle(list(names))


def kernel_role(demangled: str) -> Tuple[str, Optional[int], str]:
    """(role, head dim, variant) from a demangled name: role split / merge / other."""
    m = re.search(r"(split_kernel\w*|merge_kernel\w*)<(\d+)([^>]*)>", demangled)
    if not m:
        return "other", None, demangled
    role = "split" if m.group(1).startswith("split") else "merge"
    return role, int(m.group(2)), m.group(1) + "<" + m.group(2) + m.group(3) + ">"


def analyze_arch(root: str, arch: str, chains, mca: bool = True) -> dict:
    spec = ARCH_SPECS[arch]
    res = dict(arch=arch, compiler=None, kernels={}, problems=[])
    for source in SOURCES:
        if not os.path.exists(os.path.join(root, "ffi", "gpu", source)):
            continue
        asm, remarks, label = compile_device(root, source, arch, chains)
        res["compiler"] = label
        usage = {k.name: k for k in gcc.parse_hip_remarks(remarks)}
        meta = kernel_metadata(asm)
        ir = compile_host_ir(root, source, chains)
        launches = host_launches(ir) if ir else {}
        funcs = functions(asm)
        names = _demangled(meta)
        for name, fields in meta.items():
            role, d, variant = kernel_role(names.get(name, name))
            u = usage.get(name)
            # The remarks give architected VGPRs and AGPRs apart; some compilers' metadata
            # vgpr_count holds both.
            ag = u.agprs if u is not None and u.agprs is not None else int(fields.get("agpr_count", 0))
            vg = (u.vgprs if u is not None and u.vgprs is not None
                  else int(fields.get("vgpr_count", 0)) - ag)
            static_lds = int(fields.get("group_segment_fixed_size", 0))
            launch = launches.get(name, {})
            dyn = sorted(x for x in launch.get("dynamic_lds", []) if x)
            # Several sizes the host could pass: the largest that fits this target.
            fits = [x for x in dyn if x + static_lds <= spec.lds_per_cu]
            dynamic = max(fits) if fits else (max(dyn) if dyn else 0)
            threads = (max(launch["threads"]) if launch.get("threads")
                       else int(fields.get("max_flat_workgroup_size", 256)))
            k = dict(name=name, demangled=names.get(name, name), role=role, head_dim=d, variant=variant,
                     source=source, vgprs=vg, agprs=ag, sgprs=int(fields.get("sgpr_count", 0)),
                     scratch=int(fields.get("private_segment_fixed_size", 0)),
                     lds_static=static_lds, lds_dynamic=dynamic, lds=static_lds + dynamic,
                     lds_dynamic_found=bool(dyn) or static_lds > 0 or role != "split",
                     threads=threads, compiler_occupancy=u.occupancy if u else None)
            k["occupancy"] = occupancy(vg, ag, k["lds"], threads, spec)
            if u is not None:
                res["problems"] += [f"{k['demangled']}: {p}" for p in u.problems("hip")]
            elif k["scratch"]:
                res["problems"].append(f"{k['demangled']}: ScratchSize {k['scratch']} B/lane")
            blocks = build_cfg(funcs.get(name, []))
            k["static_total"] = count(i for b in blocks for i in b.insts)
            k["buffer_loads"] = buffer_load_policy(i for b in blocks for i in b.insts)
            ls = loops(blocks)
            main = max(ls, key=lambda l: (count(i for n in l["body"] for i in blocks[n].insts)["mfma"],
                                           len(l["body"])), default=None)
            if main is not None and role == "split":
                path = iteration_path(blocks, main)
                insts = [i for n in path for i in blocks[n].insts]
                k["tile"] = dict(
                    path=count(insts),
                    static_body=count(i for n in main["body"] for i in blocks[n].insts),
                    blocks_on_path=len(path), blocks_in_loop=len(main["body"]),
                    cycles=tile_cycles(insts, spec, k["occupancy"]["waves_per_workgroup"]))
                if mca and arch == "gfx942":
                    k["tile"]["llvm_mca"] = llvm_mca(insts, "gfx942")
                outside = [i for n in outside_path(blocks, main) for i in blocks[n].insts]
                k["once"] = dict(path=count(outside),
                                 cycles=tile_cycles(outside, spec, k["occupancy"]["waves_per_workgroup"]),
                                 vmem_round_trips=vmem_round_trips(outside))
            elif role == "merge":
                path = outside_path(blocks, None)
                insts = [i for n in path for i in blocks[n].insts]
                k["once"] = dict(path=count(insts),
                                 cycles=tile_cycles(insts, spec, k["occupancy"]["waves_per_workgroup"]),
                                 loops=len(ls))
            res["kernels"][name] = k
    return res


# --------------------------------------------------------------------------- roofline

SPLIT_NAMES = {"per_tile": "split_kernel", "two_tile": "split_kernel_two_tile",
               "fill_ring": "split_kernel_fill_ring", "pingpong": "split_kernel_pingpong",
               "pingpong_two_pairs": "split_kernel_pingpong_two_pairs",
               "per_tile_cached": "split_kernel_cached"}
# An FP8 cache's split kernels: one a cache policy (every other plan runs the per-tile one).
FP8_SPLIT_NAMES = {"per_tile": "split_kernel_fp8", "per_tile_cached": "split_kernel_fp8_cached"}
TILE = 64
ROWS_PER_BLOCK = 64


def find_kernel(arch_res: dict, role: str, base: str, d: int, merge_warps: Optional[int] = None):
    for k in arch_res["kernels"].values():
        if k["role"] != role or k["head_dim"] != d:
            continue
        if role == "split" and re.fullmatch(rf"{base}<{d}>", k["variant"]):
            return k
        if role == "merge" and re.match(rf"merge_kernel<{d}, {merge_warps}\b", k["variant"]):
            return k
    return None


def request_tiles(L: int, window: Optional[int], tokens: int) -> int:
    """64-key tiles a request at full context L covers: [key_lo, L) cut at multiples of 64."""
    lo = 0 if window is None else max(0, L - tokens - (window - 1))
    return -(-L // TILE) - lo // TILE


def roofline_row(cfg, plan: dict, gpu: Gpu, split: Optional[dict], merge: Optional[dict],
                 hbm_fraction: float = HBM_FRACTION, launch_us: float = LAUNCH_US) -> dict:
    """One config's modelled time on one GPU, in µs:
    memory = bytes / (hbm_fraction x HBM rate), bytes = the K/V bytes read (Config.kv_bytes) plus
    q, the output and the partials (written and read once);
    compute = max(the longest segment's tiles one after another on one workgroup,
                  every tile spread over the CUs at the occupancy the grid reaches),
    with a tile's cycles from tile_cycles (serial / (resident workgroups) but not below the
    busiest pipe), plus each workgroup's once-only work;
    total = max(memory, compute) + the merge's path + launch_us a launch, two launches."""
    hq, hkv, d, tokens = cfg.as_dict()["q_heads"], cfg.as_dict()["kv_heads"], cfg.as_dict()["head_dim"], 8
    groups = cfg.R * hkv
    rows = tokens * hq // hkv
    blocks_per_group = -(-rows // ROWS_PER_BLOCK)
    splits = plan["num_splits"]
    tiles = request_tiles(cfg.L, cfg.window, tokens)
    seg_tiles = -(-tiles // splits)
    ctas = groups * blocks_per_group * splits
    busy_ctas = groups * blocks_per_group * min(splits, -(-tiles // seg_tiles))
    part_bytes = ctas * ROWS_PER_BLOCK * (d * 2 + 8) * 2
    qo_bytes = 2 * cfg.R * tokens * hq * d * 2
    total_bytes = cfg.kv_bytes + part_bytes + qo_bytes
    mem_us = total_bytes / (hbm_fraction * gpu.hbm_tbps * 1e12) * 1e6
    row = dict(config=cfg.name, kv_bytes=cfg.kv_bytes, bytes=total_bytes, num_splits=splits,
               split_kernel=plan["split_kernel"], tiles_per_request=tiles, tiles_per_segment=seg_tiles,
               workgroups=ctas, memory_us=mem_us, compute_us=None, merge_us=None,
               launch_us=LAUNCHES * launch_us)
    if split is None or "tile" not in split:
        row["note"] = "split kernel not in the ISA: no compute estimate"
        row["model_us"] = mem_us + LAUNCHES * launch_us
        row["bound"] = "memory"
        return row
    f = gpu.clock_ghz * 1e3  # clocks a µs
    occ = split["occupancy"]["workgroups_per_cu"] or 1
    resident = max(1, min(occ, -(-busy_ctas // gpu.cus)))
    cyc = split["tile"]["cycles"]
    per_tile = max(cyc["serial"] / resident, cyc["bound"])
    once = split["once"]["cycles"]["serial"]
    chain_us = (once + seg_tiles * cyc["serial"]) / f
    waves_of_ctas = -(-busy_ctas // (gpu.cus * occ))
    spread_us = (busy_ctas * seg_tiles * per_tile / gpu.cus + waves_of_ctas * once) / f
    row["compute_us"] = max(chain_us, spread_us)
    row["merge_us"] = merge["once"]["cycles"]["serial"] / f if merge else None
    row["bound"] = "memory" if mem_us >= row["compute_us"] else "compute"
    row["model_us"] = max(mem_us, row["compute_us"]) + (row["merge_us"] or 0) + LAUNCHES * launch_us
    row["pct_of_hbm"] = 100 * cfg.kv_bytes / (row["model_us"] * 1e-6) / (gpu.hbm_tbps * 1e12)
    return row


def amd_device(gpu: Gpu) -> dict:
    """The launch plan's description of the device (as tests/amd_emulator.py describes it)."""
    return dict(vendor="amd", multiprocessors=gpu.cus, compute_major=0, warp_size=64,
                merge_can_wait=False, has_two_pairs=False, amd_gfx=int(gpu.arch[3:]))


def _bench():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import bench  # noqa: E402

    return bench


def plan_for(cfg, gpu: Gpu) -> dict:
    """The launch plan the module gives this config on this device (jax_muse_attn built)."""
    from jax_muse_attn import _ffi, _validate

    if _ffi._MODULE is None:
        raise RuntimeError(f"jax_muse_attn's extension is not built ({_ffi.IMPORT_ERROR}): "
                           "pip install -e . (the roofline needs the launch plan)")
    pages = -(-cfg.L // 16)
    d = cfg.as_dict()
    s = _validate.Shapes(num_requests=cfg.R, tokens=d["tokens"], num_q_heads=d["q_heads"],
                         num_kv_heads=d["kv_heads"], head_dim=d["head_dim"], num_blocks=cfg.R * pages,
                         pages=pages, window=cfg.window or 0, q_rank=3,
                         kv_dtype="float8_e4m3fn" if cfg.fp8 else "bfloat16",
                         scale_kind="tensor" if cfg.fp8 else "none")
    return _ffi.launch_plan(s, "ROCM", 0, "", device=amd_device(gpu))


def roofline(archs: Dict[str, dict], hbm_fraction: float = HBM_FRACTION, launch_us: float = LAUNCH_US,
             configs=None) -> Dict[str, dict]:
    bench = _bench()
    cfgs = configs or [c for base in bench.full_grid() for c in (base, base.with_kv("fp8"))]
    out = {}
    for gpu in GPUS.values():
        if gpu.arch not in archs:
            continue
        rows = []
        for cfg in cfgs:
            plan = plan_for(cfg, gpu)
            names = FP8_SPLIT_NAMES if cfg.fp8 else SPLIT_NAMES
            base = names.get(plan["split_kernel"], names["per_tile"])
            d = cfg.as_dict()["head_dim"]
            split = find_kernel(archs[gpu.arch], "split", base, d)
            merge = find_kernel(archs[gpu.arch], "merge", "merge_kernel", d, plan["merge_warps"])
            rows.append(roofline_row(cfg, plan, gpu, split, merge, hbm_fraction, launch_us))
        out[gpu.name] = dict(gpu=dataclasses.asdict(gpu), hbm_fraction=hbm_fraction,
                             launch_us=launch_us, launches=LAUNCHES, rows=rows)
    return out


# --------------------------------------------------------------------------- output


def _table(hdr, rows) -> List[str]:
    cells = [[str(c) for c in hdr]] + [["-" if c is None else str(c) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(hdr))]
    return ["  " + "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r))
            for r in cells]


def format_report(result: dict) -> str:
    lines = [BANNER, ""]
    for arch, a in result["archs"].items():
        lines.append(f"== {arch} ({a['compiler']})")
        ks = sorted(a["kernels"].values(), key=lambda k: (k["role"] != "split", k["variant"]))
        lines += _table(("kernel", "VGPR", "AGPR", "SGPR", "LDS B", "scratch", "threads", "waves/SIMD",
                         "WG/CU", "limit", "cc occ"),
                        [(k["variant"], k["vgprs"], k["agprs"], k["sgprs"],
                          f"{k['lds']}" + ("" if k["lds_dynamic_found"] else "?"), k["scratch"],
                          k["threads"], k["occupancy"]["waves_per_simd"], k["occupancy"]["workgroups_per_cu"],
                          k["occupancy"]["limited_by"], k["compiler_occupancy"]) for k in ks])
        tiles = [k for k in ks if "tile" in k]
        if tiles:
            lines.append(f"  per 64-key tile, one wave (interior-tile path; static loop body in brackets):")
            keys = ("mfma", "lds_read", "ds_read_u16", "lds_write", "lds_xfer", "ds_bpermute_b32",
                    "vmem_load", "waitcnt", "s_waitcnt_vmcnt0", "barrier", "valu", "trans", "salu",
                    "branch", "total")
            lines += _table(("kernel",) + keys,
                            [(k["variant"],) + tuple(f"{k['tile']['path'][x]} ({k['tile']['static_body'][x]})"
                                                     for x in keys) for k in tiles])
            lines.append("  tile-loop cycles a tile (this file's issue model: serial / busiest pipe; "
                         "llvm-mca on gfx942, which ignores memory latency):")
            rows = []
            for k in tiles:
                c, mca = k["tile"]["cycles"], k["tile"].get("llvm_mca") or {}
                rows.append((k["variant"], f"{c['mfma']:.0f}", f"{c['valu']:.0f}", f"{c['lds_cu']:.0f}",
                             f"{c['other']:.0f}", f"{c['serial']:.0f}", f"{c['bound']:.0f}",
                             f"{mca['cycles_per_iteration']:.0f}" if "cycles_per_iteration" in mca
                             else mca.get("error", "-")))
            lines += _table(("kernel", "MFMA clk", "VALU clk", "LDS clk (CU)", "other", "serial", "bound",
                             "llvm-mca"), rows)
        once = [k for k in tiles if "once" in k]
        if once:
            lines.append("  once a workgroup (outside the tile loop: Q, the prologue's tiles, the partials):")
            lines += _table(("kernel", "vmem loads", "vmem round trips", "instructions"),
                            [(k["variant"], k["once"]["path"]["vmem_load"], k["once"]["vmem_round_trips"],
                              k["once"]["path"]["total"]) for k in once])
        for p in a["problems"]:
            lines.append(f"  FAIL {p}")
        lines.append("")
    for name, r in (result.get("roofline") or {}).items():
        g = r["gpu"]
        lines.append(f"== roofline MODEL on {name} ({g['arch']}, {g['cus']} CUs, {g['clock_ghz']} GHz, "
                     f"{g['hbm_tbps']} TB/s x {r['hbm_fraction']} achievable, {r['launches']} launches x "
                     f"{r['launch_us']} µs)")
        lines += _table(("config", "KV MB", "splits", "kernel", "tiles/seg", "WGs", "mem µs", "compute µs",
                         "merge µs", "model µs", "bound", "% HBM"),
                        [(x["config"], f"{x['kv_bytes'] / 1e6:.1f}", x["num_splits"], x["split_kernel"],
                          x["tiles_per_segment"], x["workgroups"], f"{x['memory_us']:.1f}",
                          "-" if x["compute_us"] is None else f"{x['compute_us']:.1f}",
                          "-" if x["merge_us"] is None else f"{x['merge_us']:.2f}", f"{x['model_us']:.1f}",
                          x["bound"], f"{x.get('pct_of_hbm', 0):.0f}") for x in r["rows"]])
        lines.append("")
    if result.get("roofline_skipped"):
        lines.append(f"roofline skipped: {result['roofline_skipped']}")
    lines.append(BANNER)
    return "\n".join(lines)


def run(root: str = ROOT, archs: Sequence[str] = ARCHS, do_roofline: bool = True,
        hbm_fraction: float = HBM_FRACTION, launch_us: float = LAUNCH_US, mca: bool = True) -> dict:
    chains = gcc.find_hip_toolchains()
    result = dict(note=BANNER, archs={}, skipped={}, roofline=None, roofline_skipped=None,
                  model=dict(valu_clk=VALU_CLK, trans_clk=TRANS_CLK,
                             arch_specs={k: dataclasses.asdict(v) for k, v in ARCH_SPECS.items()}))
    for arch in archs:
        try:
            result["archs"][arch] = analyze_arch(root, arch, chains, mca)
        except gcc.Unsupported as e:
            result["skipped"][arch] = str(e)
    if do_roofline and result["archs"]:
        try:
            result["roofline"] = roofline(result["archs"], hbm_fraction, launch_us)
        except (ImportError, RuntimeError) as e:
            result["roofline_skipped"] = str(e)
    return result


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/amd_model.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", nargs="+", default=list(ARCHS), choices=list(ARCH_SPECS))
    ap.add_argument("--json", help="write the whole model as JSON here")
    ap.add_argument("--root", default=ROOT, help="source tree holding ffi/ (default: this repo)")
    ap.add_argument("--no-roofline", action="store_true", help="skip the per-config roofline")
    ap.add_argument("--no-mca", action="store_true", help="skip llvm-mca")
    ap.add_argument("--hbm-fraction", type=float, default=HBM_FRACTION,
                    help=f"achievable share of the HBM spec rate (default {HBM_FRACTION})")
    ap.add_argument("--launch-us", type=float, default=LAUNCH_US,
                    help=f"µs a kernel launch costs, two a call (default {LAUNCH_US})")
    a = ap.parse_args(argv)
    if not 0 < a.hbm_fraction <= 1:
        ap.error("--hbm-fraction must be in (0, 1]")
    if a.launch_us < 0:
        ap.error("--launch-us must be >= 0")
    result = run(os.path.abspath(a.root), a.arch, not a.no_roofline, a.hbm_fraction, a.launch_us, not a.no_mca)
    print(format_report(result))
    for arch, why in result["skipped"].items():
        print(f"amd_model: {arch} skipped: {why}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"amd_model: wrote {a.json}")
    problems = [p for r in result["archs"].values() for p in r["problems"]]
    if problems:
        print("amd_model: FAIL: " + "; ".join(problems))
        return 1
    return 0 if result["archs"] else 2


if __name__ == "__main__":
    sys.exit(main())
