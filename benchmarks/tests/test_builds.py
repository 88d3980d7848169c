"""The GPU programs of benchmarks/ build (nvcc, no GPU needed): kernel_bench.cu with the kernels and
the device query it plans with, its timeline build, and read_floor_probe.cu."""

import os
import subprocess

import pytest

pytestmark = pytest.mark.gpu_compile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _build(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]


def _build_kernel_bench(nvcc, out, *flags):
    gpu = os.path.join(ROOT, "ffi", "gpu")
    _build([nvcc, "-O1", "-std=c++17", "-arch=sm_90a", "-I", os.path.join(ROOT, "ffi"), *flags, "-o", str(out),
            "-x", "cu", os.path.join(ROOT, "benchmarks", "kernel_bench.cu"),
            os.path.join(gpu, "split_kernel.cu.cc"), os.path.join(gpu, "split_kernel_fp8.cu.cc"),
            os.path.join(gpu, "split_kernel_balanced.cu.cc"), os.path.join(gpu, "merge_kernel.cu.cc"),
            os.path.join(gpu, "device_query.cc")])
    assert out.exists()


def test_kernel_bench_builds(nvcc, tmp_path):
    _build_kernel_bench(nvcc, tmp_path / "kernel_bench")


def test_read_floor_probe_builds(nvcc, tmp_path):
    _build([nvcc, "-O1", "-std=c++17", "-arch=sm_90a", "-o", str(tmp_path / "read_floor"),
            os.path.join(ROOT, "benchmarks", "read_floor_probe.cu")])


def _ptx(nvcc, tmp_path, src, *flags):
    out = tmp_path / (os.path.basename(src) + ("-marks" if flags else "") + ".ptx")
    _build([nvcc, "-O1", "-std=c++17", "-arch=sm_90a", "-I", os.path.join(ROOT, "ffi"), *flags, "-ptx",
            "-o", str(out), "-x", "cu", src])
    text = out.read_text()
    # each kernel's body: from its .entry to the next one
    parts = text.split(".entry ")[1:]
    return {p.split("(")[0].strip(): p for p in parts}


def test_timeline_marks_stamp_every_kernel_and_vanish_from_the_library(nvcc, tmp_path):
    """kernel_bench's timeline build (benchmarks/timeline_marks.h forced in): every split and merge
    kernel reads the global timer; the library's build of the same files reads it nowhere."""
    marks = os.path.join(ROOT, "benchmarks", "timeline_marks.h")
    for name in ("split_kernel.cu.cc", "merge_kernel.cu.cc"):
        src = os.path.join(ROOT, "ffi", "gpu", name)
        plain = _ptx(nvcc, tmp_path, src)
        marked = _ptx(nvcc, tmp_path, src, "-include", marks)
        assert plain and set(plain) == set(marked)
        assert not [k for k, body in plain.items() if "globaltimer" in body]
        unmarked = [k for k, body in marked.items() if "globaltimer" not in body]
        assert not unmarked, f"{name}: kernels without timeline marks: {unmarked}"


def test_kernel_timeline_builds(nvcc, tmp_path):
    _build_kernel_bench(nvcc, tmp_path / "kernel_timeline", "-include",
                        os.path.join(ROOT, "benchmarks", "timeline_marks.h"))
