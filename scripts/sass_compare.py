"""Is a refactor of the GPU kernels free? Compiles the split and merge kernels of two source trees
for each architecture and compares every kernel's SASS, normalised for what a refactor may move
without changing the code (the anonymous namespace's hash, label numbers, a template argument
that only renames a kernel). No GPU needed: nvcc and nvdisasm only.

    python scripts/sass_compare.py OLD_TREE [NEW_TREE] [--arch sm_90a sm_80 ...]

OLD_TREE / NEW_TREE hold ffi/ (e.g. `git archive REF ffi | tar -x -C /tmp/old`); NEW_TREE
defaults to this checkout. nvdisasm: $NVDISASM, else on PATH (pip's nvidia-cuda-nvdisasm has it).
Exit 0 when every kernel of OLD_TREE has identical SASS in NEW_TREE; kernels only NEW_TREE has
are listed, not compared.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ["ffi/gpu/split_kernel.cu.cc", "ffi/gpu/merge_kernel.cu.cc"]


def normalise(line, renames):
    line = re.sub(r"GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_cc_[0-9a-f]+", "ANON", line)
    line = re.sub(r"\.L_x_\d+", ".L_x", line)
    line = re.sub(r"/\*[0-9a-f]{4,}\*/", "", line)  # addresses
    for a, b in renames:
        line = re.sub(a, b, line)
    return line


def kernels(tree, src, arch, nvdisasm, renames):
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        subprocess.run(["nvcc", "-O3", "-std=c++17", "--use_fast_math", f"-arch={arch}", "-I",
                        os.path.join(tree, "ffi"), "-cubin", "-o", cubin, "-x", "cu",
                        os.path.join(tree, src)], check=True)
        sass = subprocess.run([nvdisasm, "-c", cubin], check=True, capture_output=True, text=True).stdout
    out, cur = {}, None
    for line in sass.splitlines():
        line = normalise(line, renames)
        m = re.match(r"//-+ \.text\.(\S+) -+", line)
        if m:
            cur = m.group(1)
            out[cur] = []
        elif cur:
            out[cur].append(line)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new", nargs="?", default=ROOT)
    ap.add_argument("--arch", nargs="+", default=["sm_90a", "sm_90", "sm_80", "sm_100a"])
    ap.add_argument("--rename", nargs=2, action="append", default=[], metavar=("REGEX", "REPL"),
                    help="also rewrite kernel names, e.g. 'ELb0EE' 'EE' for a new defaulted bool")
    args = ap.parse_args()
    nvdisasm = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if not nvdisasm:
        sys.exit("sass_compare: no nvdisasm (set NVDISASM or pip install nvidia-cuda-nvdisasm)")
    same = True
    for arch in args.arch:
        for src in SOURCES:
            old = kernels(args.old, src, arch, nvdisasm, args.rename)
            new = kernels(args.new, src, arch, nvdisasm, args.rename)
            for name, body in old.items():
                verdict = "identical" if new.get(name) == body else (
                    "missing in new" if name not in new else "DIFFERS")
                same &= verdict == "identical"
                print(f"{arch:8s} {name[-60:]:60s} {verdict}")
            for name in sorted(set(new) - set(old)):
                print(f"{arch:8s} {name[-60:]:60s} new (not compared)")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
