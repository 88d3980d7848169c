"""The GPU programs of benchmarks/ build (nvcc, no GPU needed): kernel_bench.cu with the kernels and
the device query it plans with, and read_floor_probe.cu."""

import os
import subprocess

import pytest

pytestmark = pytest.mark.gpu_compile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _build(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]


def test_kernel_bench_builds(nvcc, tmp_path):
    out = tmp_path / "kernel_bench"
    gpu = os.path.join(ROOT, "ffi", "gpu")
    _build([nvcc, "-O1", "-std=c++17", "-arch=sm_90a", "-I", os.path.join(ROOT, "ffi"), "-o", str(out),
            "-x", "cu", os.path.join(ROOT, "benchmarks", "kernel_bench.cu"),
            os.path.join(gpu, "split_kernel.cu.cc"), os.path.join(gpu, "split_kernel_fp8.cu.cc"),
            os.path.join(gpu, "split_kernel_balanced.cu.cc"), os.path.join(gpu, "merge_kernel.cu.cc"),
            os.path.join(gpu, "device_query.cc")])
    assert out.exists()


def test_read_floor_probe_builds(nvcc, tmp_path):
    _build([nvcc, "-O1", "-std=c++17", "-arch=sm_90a", "-o", str(tmp_path / "read_floor"),
            os.path.join(ROOT, "benchmarks", "read_floor_probe.cu")])
