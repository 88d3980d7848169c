"""The FlashInfer the benchmark's peers run, assembled on the GPU machine from files carried in .fi/:

    python benchmarks/fi_site.py prepare  [--fi .fi] [--site /tmp/site]
    python benchmarks/fi_site.py build-fp8 [--fi .fi] [--site /tmp/site] [--out DIR]

prepare: unpacks .fi/flashinfer_site.tar.gz (FlashInfer with its fa2 bf16 modules prebuilt for
sm_90a) into SITE, then every .fi/xqa*_overlay.tar.gz on top (XQA's modules, bf16 and FP8 caches),
then puts each .fi/aot/NAME.so where FlashInfer looks before compiling (flashinfer/data/aot/NAME/).

build-fp8: compiles the fa2 modules for an FP8 cache (bf16 q and output, float8_e4m3fn K/V, D 64,
without and with a window), which the site tarball lacks, with FlashInfer's own JIT and nvcc, and
copies them to OUT (carry them back as .fi/aot/*.so). Minutes a module.
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _untar(path, dest):
    with tarfile.open(path) as t:
        t.extractall(dest, filter="fully_trusted")


def aot_dir(site):
    return os.path.join(site, "flashinfer", "data", "aot")


def prepare(fi, site):
    if not os.path.isdir(os.path.join(site, "flashinfer")):
        _untar(os.path.join(fi, "flashinfer_site.tar.gz"), site)
    for overlay in sorted(glob.glob(os.path.join(fi, "xqa*_overlay.tar.gz"))):
        _untar(overlay, site)
    for so in sorted(glob.glob(os.path.join(fi, "aot", "*.so"))):
        name = os.path.basename(so)[:-3]
        os.makedirs(os.path.join(aot_dir(site), name), exist_ok=True)
        shutil.copy(so, os.path.join(aot_dir(site), name, name + ".so"))
    print("fi_site:", ", ".join(sorted(os.listdir(aot_dir(site)))))


_BUILD = r"""
import os, shutil, sys, time
import torch
from flashinfer.jit.attention.modules import _gen_batch_prefill_primary_module
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for swa in (False, True):
    spec = _gen_batch_prefill_primary_module("fa2", torch.bfloat16, torch.float8_e4m3fn, torch.bfloat16,
                                             torch.int32, 64, 64, 0, swa, False, False)
    if spec.is_aot:
        print("present", spec.name, flush=True)
        continue
    t = time.time()
    spec.build(verbose=False)
    shutil.copy(spec.jit_library_path, os.path.join(out, spec.name + ".so"))
    print("built", spec.name, f"{time.time() - t:.0f} s", flush=True)
"""


def build_fp8(fi, site, out):
    prepare(fi, site)
    ninja = os.path.join(site, "_ninja")
    if not shutil.which("ninja"):
        (whl,) = glob.glob(os.path.join(fi, "ninja-*.whl"))
        zipfile.ZipFile(whl).extractall(ninja)
        for b in glob.glob(os.path.join(ninja, "*.data", "scripts", "ninja")):
            os.chmod(b, 0o755)
    paths = [os.path.dirname(b) for b in glob.glob(os.path.join(ninja, "*.data", "scripts", "ninja"))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([site] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
               PATH=os.pathsep.join(paths + [os.environ.get("PATH", "")]),
               FLASHINFER_CUDA_ARCH_LIST=os.environ.get("FLASHINFER_CUDA_ARCH_LIST", "9.0a"),
               FLASHINFER_WORKSPACE_BASE=os.path.join(site, "_ws"), MAX_JOBS=str(os.cpu_count() or 4))
    return subprocess.run([sys.executable, "-c", _BUILD, out], env=env).returncode


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("prepare", "build-fp8"))
    ap.add_argument("--fi", default=os.path.join(ROOT, ".fi"))
    ap.add_argument("--site", default="/tmp/site")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "fimods"))
    a = ap.parse_args(argv)
    if a.what == "prepare":
        prepare(a.fi, a.site)
        return 0
    return build_fp8(a.fi, a.site, a.out)


if __name__ == "__main__":
    sys.exit(main())
