"""Does a source change leave the GPU kernels' machine code alone? Dumps every split and merge
kernel's code (NVIDIA SASS by nvcc + nvdisasm; AMD ISA by the HIP clangs gpu_compile_check finds)
of a source tree, normalised for what a refactor may move without changing code (label numbers,
addresses, the anonymous namespace's hash), and compares two dumps kernel by kernel. No GPU needed.

    python tools/isa_compare.py dump TREE OUT_DIR [--arch sm_90a gfx950 ...]
    python tools/isa_compare.py diff OLD_DIR NEW_DIR [--rename REGEX REPL ...]
    python tools/isa_compare.py tree OLD_TREE [NEW_TREE]     # both dumps, then the diff

TREE holds ffi/ (e.g. `git worktree add /tmp/old HEAD`). Exit 0 when every kernel of the old dump
has identical code in the new one, after --rename on the old names (mangled: a renamed kernel's
length prefix goes with it, e.g. --rename 12split_kernel 14split_kernel_v2); kernels only the new
dump has are listed, not compared. nvdisasm: $NVDISASM, else on PATH (pip's nvidia-cuda-nvdisasm).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_compile_check as gcc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ("split_kernel.cu.cc", "split_kernel_fp8.cu.cc", "split_kernel_drafts.cu.cc",
           "split_kernel_balanced.cu.cc", "merge_kernel.cu.cc")
CUDA_ARCHS = ("sm_90a", "sm_90", "sm_80", "sm_100a")
HIP_ARCHS = ("gfx942", "gfx950")


def _norm(line: str) -> str:
    line = re.sub(r"_GLOBAL__N__[0-9a-f]{8}_\d+_\w+?_cu_cc_[0-9a-f]{8}", "ANON", line)
    line = re.sub(r"\.L_x_\d+", ".L_x", line)
    line = re.sub(r"\.LBB\d+_\d+", ".LBB", line)
    line = re.sub(r"__hip_cuid_[0-9a-f]+", "__hip_cuid", line)
    line = re.sub(r"/\*[0-9a-f]{4,}\*/", "", line)  # SASS addresses
    line = re.sub(r"\s;.*$", "", line)  # AMD assembler comments
    return line.rstrip()


def sass(tree: str, src: str, arch: str) -> dict[str, list[str]]:
    nvdisasm = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if not nvdisasm:
        sys.exit("isa_compare: no nvdisasm (set NVDISASM or pip install nvidia-cuda-nvdisasm)")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        subprocess.run([gcc.find_nvcc() or "nvcc", "-x", "cu", "-std=c++17", f"-arch={arch}",
                        *gcc.CUDA_BUILD_FLAGS, "-DMUSE_ATTN_WITH_CUDA", "-I", os.path.join(tree, "ffi"),
                        "-cubin", "-o", cubin, os.path.join(tree, "ffi", "gpu", src)], check=True)
        text = subprocess.run([nvdisasm, "-c", cubin], check=True, capture_output=True,
                              text=True).stdout
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*//-+ \.text\.(\S+) -+", line)
        if m:
            cur = _norm(m.group(1))
            out[cur] = []
        elif cur:
            out[cur].append(_norm(line))
    return out


def amd_isa(tree: str, src: str, arch: str) -> dict[str, list[str]]:
    for chain in gcc.find_hip_toolchains():
        try:
            flags = chain.flags(arch)
        except gcc.Unsupported:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            asm = os.path.join(tmp, "k.s")
            subprocess.run([*chain.cmd, "-x", "hip", "-std=c++17", f"--offload-arch={arch}", *flags,
                            "--cuda-device-only", "-S", *gcc.HIP_BUILD_FLAGS, "-DMUSE_ATTN_WITH_HIP",
                            f"-I{os.path.join(tree, 'ffi')}", os.path.join(tree, "ffi", "gpu", src),
                            "-o", asm], check=True)
            with open(asm) as f:
                text = f.read()
        out, cur = {}, None
        for line in text.splitlines():
            m = re.match(r"^(\S+):\s*(;.*)?$", line)
            if m and not m.group(1).startswith(".") and not m.group(1).startswith("__hip_cuid"):
                cur = _norm(m.group(1))
                out[cur] = []
            elif cur and re.match(r"\s*\.Lfunc_end", line):
                cur = None
            elif cur and line.strip() and not line.strip().startswith(";"):
                out[cur].append(_norm(line))
        return out
    sys.exit(f"isa_compare: no HIP clang builds {arch} (see .ci/install_gpu_compilers.sh)")


def dump(tree: str, out_dir: str, archs) -> None:
    for arch in archs:
        for src in SOURCES:
            if not os.path.exists(os.path.join(tree, "ffi", "gpu", src)):
                continue  # an older tree
            code = amd_isa(tree, src, arch) if arch.startswith("gfx") else sass(tree, src, arch)
            d = os.path.join(out_dir, arch)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, src + ".txt"), "w") as f:
                for name, body in sorted(code.items()):
                    f.write(f"@@ {name}\n" + "\n".join(body) + "\n")
            print(f"{arch:8s} {src}: {len(code)} kernels")


def _read(path: str) -> dict[str, list[str]]:
    """A dump file's kernels; none where the tree had no such source."""
    out, cur = {}, None
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f.read().splitlines():
            if line.startswith("@@ "):
                cur = line[3:]
                out[cur] = []
            else:
                out[cur].append(line)
    return out


def diff(old_dir: str, new_dir: str, renames) -> bool:
    same = True
    for arch in sorted(os.listdir(old_dir)):
        for src in SOURCES:
            old = _read(os.path.join(old_dir, arch, src + ".txt"))
            new = _read(os.path.join(new_dir, arch, src + ".txt"))
            seen = set()
            for name, body in old.items():
                want = name
                for a, b in renames:
                    want = re.sub(a, b, want)
                seen.add(want)
                got = new.get(want)
                if got is not None:
                    for a, b in renames:  # calls and symbols inside a body follow the renames
                        body = [re.sub(a, b, x) for x in body]
                verdict = ("missing in new" if got is None else
                           "identical" if got == body else "DIFFERS")
                same &= verdict == "identical"
                print(f"{arch:8s} {want[-70:]:70s} {verdict}")
            for name in sorted(set(new) - seen):
                print(f"{arch:8s} {name[-70:]:70s} new (not compared)")
    return same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("tree")
    d.add_argument("out")
    d.add_argument("--arch", nargs="+", default=[*CUDA_ARCHS, *HIP_ARCHS])
    c = sub.add_parser("diff")
    c.add_argument("old")
    c.add_argument("new")
    t = sub.add_parser("tree")
    t.add_argument("old")
    t.add_argument("new", nargs="?", default=ROOT)
    t.add_argument("--arch", nargs="+", default=[*CUDA_ARCHS, *HIP_ARCHS])
    for p in (c, t):
        p.add_argument("--rename", nargs=2, action="append", default=[], metavar=("REGEX", "REPL"),
                       help="rename the old dump's kernels (and symbols in their code) first")
    args = ap.parse_args(argv)
    if args.cmd == "dump":
        dump(args.tree, args.out, args.arch)
        return 0
    if args.cmd == "diff":
        return 0 if diff(args.old, args.new, args.rename) else 1
    with tempfile.TemporaryDirectory() as tmp:
        dump(args.old, os.path.join(tmp, "old"), args.arch)
        dump(args.new, os.path.join(tmp, "new"), args.arch)
        return 0 if diff(os.path.join(tmp, "old"), os.path.join(tmp, "new"), args.rename) else 1


if __name__ == "__main__":
    sys.exit(main())
