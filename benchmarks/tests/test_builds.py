"""Builds of the benchmark tools: benchmarks/kernel_bench.cu and the read-floor probe (nvcc, no GPU)."""

import os
import subprocess
import sys

import pytest

@pytest.mark.parametrize(
    "flags", [[], ["-DMUSE_ATTN_TIMELINE"], ["-DMUSE_ATTN_TIMELINE", "-DMUSE_ATTN_TIMELINE_LEAN"]],
    ids=["plain", "timeline", "timeline_lean"])
def test_kernel_bench_builds(flags, tmp_path):
    """benchmarks/kernel_bench.cu (the kernels alone, with timeline stamps and with the lean
    stamps) still builds."""
    _require_nvcc()
    out = tmp_path / "kb"
    cmd = [gcc.find_nvcc(), "-O1", "-std=c++17", "-arch=sm_90", "-I", os.path.join(ROOT, "ffi"),
           *flags, "-o", str(out), "-x", "cu", os.path.join(ROOT, "benchmarks", "kernel_bench.cu"),
           os.path.join(ROOT, "ffi", "gpu", "split_kernel.cu.cc"),
           os.path.join(ROOT, "ffi", "gpu", "merge_kernel.cu.cc")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    assert out.exists()


@pytest.mark.parametrize("probe, arch", [("latency_probe", "sm_90"), ("pdl_probe", "sm_90a"),
                                         ("read_floor_probe", "sm_90a")])
def test_probe_builds(probe, arch, tmp_path):
    """The standalone GPU probes of benchmarks/ (and their probe_common.h) still build, each for
    the architecture scripts/device_check.sh builds it for."""
    _require_nvcc()
    out = tmp_path / probe
    r = subprocess.run([gcc.find_nvcc(), "-O1", "-std=c++17", f"-arch={arch}", "-o", str(out),
                        os.path.join(ROOT, "benchmarks", f"{probe}.cu")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]


