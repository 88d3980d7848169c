"""Device-only compile checks of the GPU kernels (no GPU needed).

Needs nvcc for CUDA and a HIP-capable clang for HIP (`bash .ci/install_gpu_compilers.sh`). Where
a toolchain is absent or incomplete, each test skips and names the missing piece and what
installs it; a complete toolchain that fails to build the kernels fails the test.
"""

import glob
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import gpu_compile_check as gcc  # noqa: E402

pytestmark = pytest.mark.gpu_compile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = sorted(glob.glob(os.path.join(ROOT, "ffi", "gpu", "*.cu.cc")))
INCLUDES = [os.path.join(ROOT, "ffi")]

# A self-contained probe with the constructs the real kernels use, so that a broken
# toolchain shows up here even when a kernel source is at fault or absent.
PROBE_VENDOR_H = r"""
#pragma once
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define PROBE_SHFL_XOR(v, m) __shfl_xor((v), (m))
#define PROBE_WARP 64
#else
#include <cuda_runtime.h>
#define PROBE_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define PROBE_WARP 32
#endif
"""

PROBE_SRC = r"""
#include "probe/vendor.h"
#include <stdint.h>

__device__ __forceinline__ float probe_exp2(float x) {
#if defined(__HIP_DEVICE_COMPILE__)
  return __builtin_amdgcn_exp2f(x);
#else
  return exp2f(x);
#endif
}

__global__ void __launch_bounds__(256) probe_tile(const uint16_t* __restrict__ a,
                                                  const uint16_t* __restrict__ b,
                                                  float* __restrict__ out) {
  constexpr int K = 64;
  __shared__ uint16_t sa[16 * K];
  extern __shared__ uint16_t sb[];
  const int tid = threadIdx.x, lane = tid % PROBE_WARP;
  for (int i = tid; i < 16 * K; i += blockDim.x) { sa[i] = a[i]; sb[i] = b[i]; }
  __syncthreads();
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
#if defined(__HIP_DEVICE_COMPILE__)
  typedef float f32x4 __attribute__((ext_vector_type(4)));
  f32x4 c = {0.f, 0.f, 0.f, 0.f};
#if defined(__gfx950__)
  typedef __bf16 bf16x8 __attribute__((ext_vector_type(8)));
  for (int k0 = 0; k0 < K; k0 += 32) {
    bf16x8 av, bv;
    for (int j = 0; j < 8; ++j) {
      av[j] = __builtin_bit_cast(__bf16, sa[(lane % 16) * K + k0 + (lane / 16) * 8 + j]);
      bv[j] = __builtin_bit_cast(__bf16, sb[(k0 + (lane / 16) * 8 + j) * 16 + lane % 16]);
    }
    c = __builtin_amdgcn_mfma_f32_16x16x32_bf16(av, bv, c, 0, 0, 0);
  }
#else
  typedef short s16x4 __attribute__((ext_vector_type(4)));
  for (int k0 = 0; k0 < K; k0 += 16) {
    s16x4 av, bv;
    for (int j = 0; j < 4; ++j) {
      av[j] = (short)sa[(lane % 16) * K + k0 + (lane / 16) * 4 + j];
      bv[j] = (short)sb[(k0 + (lane / 16) * 4 + j) * 16 + lane % 16];
    }
    c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(av, bv, c, 0, 0, 0);
  }
#endif
  for (int j = 0; j < 4; ++j) acc[j] = c[j];
#elif defined(__CUDA_ARCH__)
  const uint32_t* sa32 = reinterpret_cast<const uint32_t*>(sa);
  const uint32_t* sb32 = reinterpret_cast<const uint32_t*>(sb);
  for (int k0 = 0; k0 < K; k0 += 16) {
    uint32_t a0 = sa32[(lane / 4) * (K / 2) + k0 / 2 + lane % 4];
    uint32_t a1 = sa32[(lane / 4 + 8) * (K / 2) + k0 / 2 + lane % 4];
    uint32_t a2 = sa32[(lane / 4) * (K / 2) + k0 / 2 + lane % 4 + 4];
    uint32_t a3 = sa32[(lane / 4 + 8) * (K / 2) + k0 / 2 + lane % 4 + 4];
    uint32_t b0 = sb32[(k0 / 2 + lane % 4) * 8 + lane / 4];
    uint32_t b1 = sb32[(k0 / 2 + lane % 4 + 4) * 8 + lane / 4];
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  __shared__ float4 stage[256];
  uint32_t saddr = static_cast<uint32_t>(__cvta_generic_to_shared(&stage[tid]));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr),
               "l"(reinterpret_cast<const float4*>(out) + tid));
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
  __syncthreads();
  acc[0] += stage[255 - tid].x;
#endif
  float m = fmaxf(fmaxf(acc[0], acc[1]), fmaxf(acc[2], acc[3]));
  for (int off = PROBE_WARP / 2; off > 0; off >>= 1) m = fmaxf(m, PROBE_SHFL_XOR(m, off));
  float s = 0.f;
  for (int j = 0; j < 4; ++j) s += probe_exp2(acc[j] - m);
  out[blockIdx.x * blockDim.x + tid] = s;
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu_probe")
    (d / "probe").mkdir()
    (d / "probe" / "vendor.h").write_text(PROBE_VENDOR_H)
    (d / "probe_kernels.cu.cc").write_text(PROBE_SRC)
    return str(d / "probe_kernels.cu.cc"), [str(d)]


@pytest.fixture(scope="module")
def hip_chains():
    return gcc.find_hip_toolchains()


def _require_nvcc():
    if not gcc.find_nvcc():
        pytest.skip("nvcc not found (PATH, /usr/local/cuda/bin): install the CUDA toolkit")


def _require_hip(chains, arch):
    """Returns where some toolchain builds arch; skips, naming what is missing, where none is
    complete; fails where a complete distro clang or ROCm cannot build gfx942 (the build's fault)."""
    no_distro = gcc.find_distro_clang()[1]
    if not chains:
        pytest.skip(f"no HIP-capable clang: {no_distro}; or a ROCm install, or pip install ziglang")
    missing, broken = [], []
    for c in chains:
        try:
            c.flags(arch)
            return
        except gcc.Missing as e:
            missing.append(str(e))
        except gcc.Unsupported as e:
            broken.append((c.kind, str(e)))
    if arch == "gfx942" and any(kind in ("distro", "rocm") for kind, _ in broken):
        pytest.fail(f"a complete HIP clang cannot build {arch}: {' | '.join(w for _, w in broken)}")
    pytest.skip(f"no toolchain here builds {arch}: "
                + " | ".join(missing + [w for _, w in broken] + ([no_distro] if no_distro else [])))


def _assert_clean(res, source):
    assert res.status in ("ok", "fail"), f"{res.backend} {res.arch} {source}:\n{res.message}"
    assert res.kernels, f"no kernels reported for {source} ({res.backend} {res.arch})"
    assert not res.problems, "\n".join(res.problems)


@pytest.mark.parametrize("arch", ["sm_90"])
def test_cuda_probe(probe, arch):
    _require_nvcc()
    src, inc = probe
    res = gcc.check_cuda(src, arch, inc, [], [], None)
    _assert_clean(res, src)
    k = [k for k in res.kernels if k.kind == "kernel"]
    assert len(k) == 1 and k[0].registers and k[0].smem >= 16 * 64 * 2


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_hip_probe(probe, hip_chains, arch):
    _require_hip(hip_chains, arch)
    src, inc = probe
    res = gcc.check_hip(src, arch, inc, [], [], hip_chains)
    _assert_clean(res, src)
    (k,) = res.kernels
    assert k.vgprs and k.lds == 16 * 64 * 2 and k.occupancy and k.dynamic_stack is False


def _sources():
    return SOURCES or [pytest.param(None, marks=pytest.mark.skip(
        reason="no ffi/gpu/*.cu.cc kernel sources yet"))]


@pytest.mark.parametrize("source", _sources(), ids=lambda s: os.path.basename(s) if s else "none")
# sm_90a: the warpgroup MMA path; sm_80 and newer are supported.
@pytest.mark.parametrize("arch", ["sm_90", "sm_90a", "sm_80", "sm_100"])
def test_cuda_kernels(source, arch):
    _require_nvcc()
    _assert_clean(gcc.check_cuda(source, arch, INCLUDES, [], [], None), source)


@pytest.mark.parametrize("source", _sources(), ids=lambda s: os.path.basename(s) if s else "none")
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_hip_kernels(source, arch, hip_chains):
    _require_hip(hip_chains, arch)
    _assert_clean(gcc.check_hip(source, arch, INCLUDES, [], [], hip_chains), source)


def test_cli_json(probe, tmp_path):
    """The CLI runs end to end (whatever is installed) and writes JSON."""
    src, inc = probe
    out = tmp_path / "r.json"
    rc = gcc.main(["--sources", src, "-I", inc[0], "--root", ROOT, "--json", str(out)])
    data = gcc.json.loads(out.read_text())
    assert {r["backend"] for r in data} == {"cuda", "hip"}
    assert rc == 0, data


def test_parsers():
    ptxas = """ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90'
ptxas info    : Function properties for _Z1kPf
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 49152 bytes smem, 360 bytes cmem[0]
"""
    (k,) = gcc.parse_ptxas(ptxas)
    assert (k.registers, k.spill_stores, k.spill_loads, k.smem, k.stack_frame, k.kind) == (
        255, 4, 4, 49152, 8, "kernel")
    assert k.problems("cuda")
    remarks = "\n".join(
        f"a.cu.cc:3:1: remark: {t} [-Rpass-analysis=kernel-resource-usage]" for t in (
            "Function Name: _Z1kPf", "    SGPRs: 23", "    VGPRs: 64", "    AGPRs: 4",
            "    ScratchSize [bytes/lane]: 16", "    Dynamic Stack: False",
            "    Occupancy [waves/SIMD]: 7", "    SGPRs Spill: 0", "    VGPRs Spill: 3",
            "    LDS Size [bytes/block]: 2048"))
    (h,) = gcc.parse_hip_remarks(remarks)
    assert (h.vgprs, h.agprs, h.sgprs, h.scratch, h.occupancy, h.lds, h.vgpr_spill) == (
        64, 4, 23, 16, 7, 2048, 3)
    assert len(h.problems("hip")) == 2
    assert gcc.isa_version("gfx942") == 9402 and gcc.isa_version("gfx90a") == 9010
    assert gcc.isa_version("gfx950") == 9500 and gcc.isa_version("gfx1100") == 11000


def _rocm_build_missing(chains):
    """(the distro clang, what the ROCm handler's CMake build needs and is not installed here)."""
    chain = next((c for c in chains if c.kind == "distro"), None)
    if chain is None:
        return None, [gcc.find_distro_clang()[1] or "no distro clang"]
    missing = [] if shutil.which("cmake") else ["cmake (pip install cmake)"]
    if importlib.util.find_spec("nanobind") is None:
        missing.append("nanobind (pip install nanobind)")
    missing += gcc.cmake_hip_missing(chain)
    if not missing:
        try:
            chain.flags("gfx942")  # the device libraries; a toolchain that is complete but broken raises on
        except gcc.Missing as e:
            missing.append(str(e))
    return chain, missing


def test_rocm_handler_builds(tmp_path, hip_chains):
    """The CMake project builds the ROCm handler (ffi/gpu/hip.cmake: CMake's HIP language) and
    the module registers it as "ROCM": with the distro clang-19 + Debian HIP toolchain of
    .ci/install_gpu_compilers.sh, for gfx942, the CUDA handler off (one GPU vendor a build)."""
    chain, missing = _rocm_build_missing(hip_chains)
    if missing:
        pytest.skip("the ROCm handler's CMake build needs " + "; ".join(missing))
    build = tmp_path / "build"
    configure = ["cmake", "-S", os.path.join(ROOT, "ffi"), "-B", str(build),
                 f"-DPython_EXECUTABLE={sys.executable}", "-DMUSE_ATTN_CUDA=OFF",
                 "-DMUSE_ATTN_HIP=ON", f"-DCMAKE_HIP_COMPILER={chain.cmd[0]}",
                 "-DCMAKE_HIP_ARCHITECTURES=gfx942",
                 f"-DCMAKE_HIP_FLAGS={' '.join(chain.flags('gfx942'))}"]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    r = subprocess.run(configure, capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "ROCm handler for gfx942" in r.stdout
    r = subprocess.run(["cmake", "--build", str(build), "-j", "4"], capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    (so,) = glob.glob(str(build / "_muse_attn*.so"))
    probe = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('_muse_attn', "
             "sys.argv[1]); m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
             "print(sorted(m.registrations()))")
    r = subprocess.run([sys.executable, "-c", probe, so], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.strip() == "['ROCM', 'cpu']", r.stdout


def _relocated_clang(tmp_path, chain):
    """This machine's distro clang run from an install folder of its own (tmp_path/bin, with its
    linker, and tmp_path/lib pointing at the real lib/): clang looks for its helper programs
    beside itself, so the real install's clang-offload-bundler is not found, as where Debian's
    clang-tools-NN is not installed."""
    real = os.path.realpath(chain.cmd[0])
    bindir = tmp_path / "bin"
    bindir.mkdir()
    try:
        os.link(real, bindir / "clang")
    except OSError:
        shutil.copy2(real, bindir / "clang")
    (bindir / os.path.basename(chain.cmd[0])).symlink_to("clang")
    for tool in ("lld", "ld.lld"):  # the linker stays: only the missing bundler is under test
        if os.path.exists(os.path.join(os.path.dirname(real), tool)):
            (bindir / tool).symlink_to(os.path.join(os.path.dirname(real), tool))
    (tmp_path / "lib").symlink_to(os.path.join(os.path.dirname(os.path.dirname(real)), "lib"))
    return gcc.HipToolchain("distro", [str(bindir / os.path.basename(chain.cmd[0]))], "relocated clang")


def test_rocm_build_names_a_missing_offload_bundler(tmp_path, hip_chains, monkeypatch):
    """Without clang-offload-bundler, CMake stops at "Failed to find HIP root directory": the
    ROCm handler's test must skip and name the package instead (the clang's own folder hidden)."""
    chain = next((c for c in hip_chains if c.kind == "distro"), None)
    if chain is None:
        pytest.skip(f"no distro clang to relocate: {gcc.find_distro_clang()[1]}")
    hidden = _relocated_clang(tmp_path, chain)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no bundler on PATH either
    _, missing = _rocm_build_missing([hidden])
    major = gcc._clang_major(chain.cmd)
    assert any(f"clang-offload-bundler (Debian: apt-get install clang-tools-{major})" in m for m in missing), missing


def test_rocm_build_names_a_missing_hip_runtime(hip_chains, monkeypatch):
    chain = next((c for c in hip_chains if c.kind == "distro"), None)
    if chain is None:
        pytest.skip(f"no distro clang: {gcc.find_distro_clang()[1]}")
    monkeypatch.setattr(gcc, "find_hip_runtime_library", lambda: None)
    _, missing = _rocm_build_missing([chain])
    assert any("libamdhip64.so (Debian: apt-get install libamdhip64-dev)" in m for m in missing), missing


def _cmake_language_flags(path, language):
    """The flags ffi/gpu/<vendor>.cmake passes for LANGUAGE (its $<$<COMPILE_LANGUAGE:...>:...>)."""
    import re
    text = open(path).read()
    found = re.findall(r"\$<\$<COMPILE_LANGUAGE:%s>:([^>]*)>" % language, text)
    assert len(found) == 1, f"{path}: expected one {language} flag list, found {found}"
    return found[0].split()


def test_compile_check_uses_the_build_flags():
    """The compile check compiles what ships: its flags are the CMake builds' (a change to one
    without the other fails here)."""
    cuda = _cmake_language_flags(os.path.join(ROOT, "ffi", "gpu", "cuda.cmake"), "CUDA")
    hip = _cmake_language_flags(os.path.join(ROOT, "ffi", "gpu", "hip.cmake"), "HIP")
    assert [f for f in cuda if not f.startswith("-Xptxas")] == list(gcc.CUDA_BUILD_FLAGS)
    assert hip == list(gcc.HIP_BUILD_FLAGS)
    assert "-fno-finite-math-only" in hip  # -ffast-math alone deletes the kernels' -inf tests


@pytest.mark.parametrize("flags,ok", [(["-ffast-math"], False),
                                      (["-ffinite-math-only"], False),
                                      (["-ffast-math", "-fno-finite-math-only"], True),
                                      ([], True)])
def test_finite_math_only_is_refused(tmp_path, flags, ok):
    """The kernels' -inf rules (muse_attn/softmax_state.h) cannot be compiled away silently: a
    build under -ffinite-math-only stops with the header's #error (the host compiler stands in
    for clang's HIP device pass, which defines __FINITE_MATH_ONLY__ the same way)."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    src = tmp_path / "t.cc"
    src.write_text('#include "muse_attn/softmax_state.h"\nint main() { return 0; }\n')
    r = subprocess.run([cxx, "-std=c++17", *flags, "-I", INCLUDES[0], "-fsyntax-only", str(src)],
                       capture_output=True, text=True)
    if ok:
        assert r.returncode == 0, r.stderr[-2000:]
    else:
        assert r.returncode != 0 and "needs infinities" in r.stderr, r.stderr[-2000:]
