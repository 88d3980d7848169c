"""Device-only compile check for the GPU kernels (no GPU needed).

Compiles every ``ffi/gpu/*.cu.cc`` (or ``--sources``) for CUDA with nvcc and for
HIP with a HIP-capable clang, reads the per-kernel resource usage that the
compilers print (ptxas ``-v`` / ``-Rpass-analysis=kernel-resource-usage``),
prints one table per target and fails when a kernel spills (CUDA spill bytes,
HIP ScratchSize / VGPR spills / dynamic stack).

    python tools/gpu_compile_check.py [--cuda] [--hip]
        [--arch sm_90a --arch sm_90 --arch gfx942 --arch gfx950] [--sources F ...]
        [--root DIR] [--hip-compiler PATH] [--json PATH] [--strict]

HIP compilers, best first (per arch, the first that can build it wins):
  1. ``--hip-compiler PATH`` / ``$MUSE_HIP_CLANG``
  2. a real ROCm clang: ``$ROCM_PATH/llvm/bin/clang++``, ``/opt/rocm/llvm/bin/clang++``
  3. a distro clang (``clang++-19`` ... ) with the distro HIP headers and
     device libraries (Debian: ``libamdhip64-dev``, ``rocm-device-libs``).
     Missing ``oclc_isa_version_<N>.bc`` files (Debian ships none for gfx942)
     are generated into a private copy of the device-lib folder under
     ``${XDG_CACHE_HOME:-~/.cache}/jax_muse_attn/amdgcn-bitcode``.
  4. for archs the distro clang does not know (gfx950 with clang 19): the clang
     bundled in the PyPI package ``ziglang`` (clang 22), given the distro
     clang's HIP wrapper headers, ``-D__AMDGCN_WAVEFRONT_SIZE=64``, the
     device libraries linked by hand and the distro ``lld``.

Standard library only; does not import jax.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

DEFAULT_CUDA_ARCHS = ("sm_90a", "sm_90")  # the default build (warpgroup MMA) and the mma.sync path
DEFAULT_HIP_ARCHS = ("gfx942", "gfx950")
# The optimisation flags of the real builds (ffi/gpu/cuda.cmake, ffi/gpu/hip.cmake; the tests
# check they agree), so the tables describe the code that ships: clang's -ffast-math alone would
# also imply -ffinite-math-only, under which clang deletes the kernels' -inf tests
# (muse_attn/softmax_state.h refuses to compile so).
CUDA_BUILD_FLAGS = ("-O3", "--use_fast_math")
HIP_BUILD_FLAGS = ("-O3", "-ffast-math", "-fno-finite-math-only")
DISTRO_CLANG_VERSIONS = tuple(range(30, 16, -1))  # clang++-30 ... clang++-17
DEVICE_LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode",
    "/usr/lib/aarch64-linux-gnu/amdgcn/bitcode",
    "/usr/lib64/amdgcn/bitcode",
    "/usr/lib/amdgcn/bitcode",
    "/usr/share/amdgcn/bitcode",
)
# Device libraries the HIP driver links for a wave64 gfx9 code object v5
# (what clang 19 passes as -mlink-builtin-bitcode); used for the ziglang clang.
HIP_DEVICE_LIBS = (
    "hip.bc", "ocml.bc", "ockl.bc", "oclc_daz_opt_off.bc", "oclc_unsafe_math_off.bc",
    "oclc_finite_only_off.bc", "oclc_correctly_rounded_sqrt_on.bc",
    "oclc_wavefrontsize64_on.bc", "{isa}", "oclc_abi_version_500.bc",
)


# --------------------------------------------------------------------------- data


@dataclasses.dataclass
class KernelUsage:
    name: str  # mangled
    demangled: str = ""
    kind: str = "kernel"  # "kernel" or "function" (CUDA non-entry functions)
    # CUDA
    registers: Optional[int] = None
    spill_stores: Optional[int] = None
    spill_loads: Optional[int] = None
    smem: Optional[int] = None
    stack_frame: Optional[int] = None
    barriers: Optional[int] = None
    # HIP
    vgprs: Optional[int] = None
    agprs: Optional[int] = None
    sgprs: Optional[int] = None
    scratch: Optional[int] = None
    lds: Optional[int] = None
    occupancy: Optional[int] = None
    vgpr_spill: Optional[int] = None
    sgpr_spill: Optional[int] = None
    dynamic_stack: Optional[bool] = None
    raw: Dict[str, str] = dataclasses.field(default_factory=dict)

    def problems(self, backend: str) -> List[str]:
        out = []
        if backend == "cuda":
            if (self.spill_stores or 0) > 0 or (self.spill_loads or 0) > 0:
                out.append(f"spills {self.spill_stores} B stores / {self.spill_loads} B loads")
        else:
            if self.scratch is None:
                out.append(f"ScratchSize unknown ({self.raw.get('ScratchSize')!r})")
            elif self.scratch > 0:
                out.append(f"ScratchSize {self.scratch} B/lane")
            if (self.vgpr_spill or 0) > 0:
                out.append(f"{self.vgpr_spill} VGPRs spilled")
            if self.dynamic_stack:
                out.append("dynamic stack (unresolved call or recursion)")
        return out


@dataclasses.dataclass
class TargetResult:
    backend: str  # "cuda" | "hip"
    arch: str
    source: str
    status: str  # "ok" | "fail" | "error" | "skipped"
    compiler: str = ""
    command: List[str] = dataclasses.field(default_factory=list)
    kernels: List[KernelUsage] = dataclasses.field(default_factory=list)
    problems: List[str] = dataclasses.field(default_factory=list)
    message: str = ""  # compiler diagnostics on error, reason when skipped


class Unsupported(Exception):
    """This toolchain cannot build this arch; the message says why."""


class Missing(Unsupported):
    """A piece of this toolchain is not installed; the message names it and what installs it."""


# --------------------------------------------------------------------------- helpers


def _run(cmd: Sequence[str], timeout: float = 900) -> Tuple[int, str]:
    p = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, errors="replace", timeout=timeout)
    return p.returncode, p.stdout


def _first_error(text: str) -> str:
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    errs = [l for l in lines if "error" in l.lower()]
    return (errs or lines or ["(no output)"])[0][:300]


def _int(s: Optional[str]) -> Optional[int]:
    if s is None:
        return None
    s = s.strip()
    return int(s) if re.fullmatch(r"-?\d+", s) else None


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = os.path.join(base, "jax_muse_attn")
    try:
        os.makedirs(d, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    d = os.path.join(tempfile.gettempdir(), f"jax_muse_attn-{os.getuid()}")
    os.makedirs(d, exist_ok=True)
    return d


def _demangle(names: Sequence[str]) -> Dict[str, str]:
    tool = shutil.which("c++filt") or shutil.which("llvm-cxxfilt") or shutil.which("cu++filt")
    if not tool or not names:
        return {n: n for n in names}
    try:
        p = subprocess.run([tool], input="\n".join(names) + "\n", stdout=subprocess.PIPE,
                           text=True, timeout=60)
        outs = p.stdout.splitlines()
        if len(outs) == len(names):
            return dict(zip(names, outs))
    except (OSError, subprocess.SubprocessError):
        pass
    return {n: n for n in names}


def find_repo_root(start: Optional[str] = None) -> str:
    d = os.path.abspath(start or os.path.dirname(__file__))
    while True:
        if os.path.isdir(os.path.join(d, "ffi")) and (
            os.path.isdir(os.path.join(d, "jax_muse_attn")) or os.path.isdir(os.path.join(d, ".git"))
        ):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            raise SystemExit("gpu_compile_check: cannot find the repo root (a folder with ffi/); use --root")
        d = parent


def _atomic_publish(tmp: str, final: str) -> None:
    os.chmod(tmp, 0o755)
    try:
        os.rename(tmp, final)
    except OSError:  # someone else published it first
        shutil.rmtree(tmp, ignore_errors=True)


def isa_version(arch: str) -> int:
    """gfx942 -> 9402, gfx90a -> 9010, gfx1100 -> 11000 (value of __oclc_ISA_version)."""
    m = re.fullmatch(r"gfx(\d+)([0-9a-f])([0-9a-f])", arch)
    if not m:
        raise Unsupported(f"cannot derive the ISA version of {arch!r}")
    return int(m.group(1)) * 1000 + int(m.group(2), 16) * 100 + int(m.group(3), 16)


def isa_lib_name(arch: str) -> str:
    return f"oclc_isa_version_{arch[3:]}.bc"


# --------------------------------------------------------------------------- CUDA


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PTXAS_PROPS = re.compile(r"Function properties for (\S+)")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_BAR = re.compile(r"used (\d+) barriers")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(text: str) -> List[KernelUsage]:
    kernels: Dict[str, KernelUsage] = {}
    entries = set()
    current: Optional[KernelUsage] = None
    for line in text.splitlines():
        m = _PTXAS_ENTRY.search(line)
        if m:
            entries.add(m.group(1))
            current = kernels.setdefault(m.group(1), KernelUsage(m.group(1)))
            continue
        m = _PTXAS_PROPS.search(line)
        if m:
            current = kernels.setdefault(m.group(1), KernelUsage(m.group(1)))
            continue
        if current is None:
            continue
        m = _PTXAS_FRAME.search(line)
        if m:
            current.stack_frame, current.spill_stores, current.spill_loads = map(int, m.groups())
            continue
        m = _PTXAS_USED.search(line)
        if m:
            current.registers = int(m.group(1))
            b = _PTXAS_BAR.search(line)
            current.barriers = int(b.group(1)) if b else 0
            s = _PTXAS_SMEM.search(line)
            current.smem = int(s.group(1)) if s else 0
    for k in kernels.values():
        k.kind = "kernel" if k.name in entries else "function"
    return list(kernels.values())


def find_nvcc() -> Optional[str]:
    """nvcc on PATH, else /usr/local/cuda/bin/nvcc, else None."""
    return shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)


def check_cuda(source: str, arch: str, includes: Sequence[str], defines: Sequence[str],
               extra: Sequence[str], nvcc: Optional[str]) -> TargetResult:
    res = TargetResult("cuda", arch, source, "error")
    nvcc = nvcc or find_nvcc()
    if not nvcc:
        res.status, res.message = "skipped", "nvcc not found (PATH, /usr/local/cuda/bin)"
        return res
    res.compiler = nvcc
    with tempfile.TemporaryDirectory(prefix="muse_cc_") as tmp:
        # -x cu: nvcc would treat *.cu.cc as plain host C++. -cubin: device only, no host compiler.
        cmd = [nvcc, "-x", "cu", "-std=c++17", f"-arch={arch}", *CUDA_BUILD_FLAGS, "-cubin", "-Xptxas", "-v",
               *[f"-I{i}" for i in includes], *[f"-D{d}" for d in defines], *extra,
               source, "-o", os.path.join(tmp, "out.cubin")]
        res.command = cmd
        rc, out = _run(cmd)
    if rc != 0:
        res.message = out
        return res
    res.kernels = parse_ptxas(out)
    _finish(res)
    return res


# --------------------------------------------------------------------------- HIP


_REMARK = re.compile(r"remark:\s+(.*?)\s*\[-Rpass-analysis=kernel-resource-usage\]\s*$")

# -Rpass-analysis=kernel-resource-usage keys (after "[unit]" is stripped) -> KernelUsage fields.
_HIP_INT_FIELDS = {
    "SGPRs": "sgprs", "TotalSGPRs": "sgprs", "VGPRs": "vgprs", "AGPRs": "agprs",
    "ScratchSize": "scratch", "Occupancy": "occupancy", "SGPRs Spill": "sgpr_spill",
    "VGPRs Spill": "vgpr_spill", "LDS Size": "lds",
}


def parse_hip_remarks(text: str) -> List[KernelUsage]:
    kernels: List[KernelUsage] = []
    cur: Optional[KernelUsage] = None
    for line in text.splitlines():
        m = _REMARK.search(line)
        if not m:
            continue
        body = m.group(1)
        key, _, val = body.partition(":")
        key, val = key.strip(), val.strip()
        if key == "Function Name":
            cur = KernelUsage(val)
            kernels.append(cur)
            continue
        if cur is None:
            continue
        key = re.sub(r"\s*\[.*?\]$", "", key)  # "ScratchSize [bytes/lane]" -> "ScratchSize"
        cur.raw[key] = val
        if key in _HIP_INT_FIELDS:
            setattr(cur, _HIP_INT_FIELDS[key], _int(val))
        elif key == "Dynamic Stack":
            cur.dynamic_stack = val.lower() == "true"
    return kernels


@dataclasses.dataclass
class HipToolchain:
    """A clang that can compile HIP device code, plus what it needs for a given arch."""

    kind: str  # "rocm" | "distro" | "zig" | "user"
    cmd: List[str]  # argv prefix to run the compiler
    label: str
    distro_include: Optional[str] = None  # zig: resource dir include of a distro clang
    lld_dir: Optional[str] = None  # zig: folder holding lld / ld.lld
    _arch_cache: Dict[str, object] = dataclasses.field(default_factory=dict)

    def flags(self, arch: str) -> List[str]:
        """Extra flags for `arch`; raises Unsupported with a reason."""
        if arch in self._arch_cache:
            v = self._arch_cache[arch]
            if isinstance(v, Unsupported):
                raise v
            return list(v)  # type: ignore[arg-type]
        try:
            v = self._flags(arch)
        except Unsupported as e:
            self._arch_cache[arch] = e
            raise
        self._arch_cache[arch] = v
        return list(v)

    # -- per kind
    def _flags(self, arch: str) -> List[str]:
        if self.kind == "zig":
            return self._zig_flags(arch)
        flags = ["-mcode-object-version=5"]
        # Does it know the arch and find device libs by itself (real ROCm)?
        err = self._trial(arch, flags)
        if err is None:
            return flags
        if "hip_runtime.h" in err and not find_hip_headers():
            raise Missing(f"{self.label} finds no {HIP_HEADERS}")
        self._raise_missing_program(err)
        if "device library" not in err:
            raise Unsupported(f"{self.label} cannot build a trivial {arch} kernel: {_first_error(err)}")
        libdir = prepare_device_libs(arch, self)
        flags = flags + [f"--rocm-device-lib-path={libdir}"]
        err = self._trial(arch, flags)
        if err is not None:
            self._raise_missing_program(err)
            raise Unsupported(f"{self.label} cannot build a trivial {arch} kernel with {libdir}: "
                              f"{_first_error(err)}")
        return flags

    def _raise_missing_program(self, err: str) -> None:
        """Missing, naming the package, where clang could not find one of its helper programs."""
        m = re.search(r'Executable "([^"]+)" doesn\'t exist', err)
        if m:
            v = _clang_major(self.cmd) or 19
            package = {"lld": f"lld-{v}", "ld.lld": f"lld-{v}",
                       "clang-offload-bundler": f"clang-tools-{v}"}.get(m.group(1), m.group(1))
            raise Missing(f"{self.label} finds no {m.group(1)} beside it (Debian: apt-get install {package})")

    def _zig_flags(self, arch: str) -> List[str]:
        if not self.distro_include:
            raise Missing("ziglang clang needs the HIP wrapper headers of a distro clang "
                          "(Debian: apt-get install clang-19)")
        if not self.lld_dir:
            raise Missing("ziglang clang needs an lld to link the code object (Debian: apt-get install lld-19)")
        libdir = prepare_device_libs(arch, self)
        resdir = prepare_zig_resource_dir(self)
        flags = ["-nogpulib", f"-resource-dir={resdir}", f"-B{self.lld_dir}",
                 # clang >= 22 no longer predefines it; HIP 5.x/6.x headers use it. gfx9 is wave64.
                 "-D__AMDGCN_WAVEFRONT_SIZE=64", "-mcode-object-version=5"]
        for lib in HIP_DEVICE_LIBS:
            lib = isa_lib_name(arch) if lib == "{isa}" else lib
            flags += ["-Xclang", "-mlink-builtin-bitcode", "-Xclang", os.path.join(libdir, lib)]
        err = self._trial(arch, flags)
        if err is not None:
            raise Unsupported(f"{self.label} cannot build a trivial {arch} kernel: {_first_error(err)}")
        return flags

    def _trial(self, arch: str, flags: Sequence[str]) -> Optional[str]:
        with tempfile.TemporaryDirectory(prefix="muse_hip_trial_") as tmp:
            src = os.path.join(tmp, "t.hip")
            with open(src, "w") as f:
                f.write("#include <hip/hip_runtime.h>\n"
                        "__global__ void t(float* p) { p[threadIdx.x] = exp2f(p[threadIdx.x]); }\n")
            cmd = [*self.cmd, "-x", "hip", f"--offload-arch={arch}", *flags, "--cuda-device-only",
                   "--no-gpu-bundle-output", "-c", "-O1", src, "-o", os.path.join(tmp, "t.o")]
            try:
                rc, out = _run(cmd, timeout=300)
            except (OSError, subprocess.SubprocessError) as e:
                return str(e)
        return None if rc == 0 else out

    def resource_dir(self) -> Optional[str]:
        try:
            rc, out = _run([*self.cmd, "-print-resource-dir"], timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.strip() if rc == 0 else None

    def llvm_tool(self, name: str) -> Optional[str]:
        exe = os.path.realpath(self.cmd[0])
        cand = os.path.join(os.path.dirname(exe), name)
        if os.access(cand, os.X_OK):
            return cand
        m = re.search(r"-(\d+)$", os.path.basename(self.cmd[0]))
        return shutil.which(f"{name}-{m.group(1)}" if m else name) or shutil.which(name)


def _clang_major(cmd: Sequence[str]) -> Optional[int]:
    try:
        rc, out = _run([*cmd, "--version"], timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"clang version (\d+)", out)
    return int(m.group(1)) if rc == 0 and m else None


def find_hip_toolchains(user: Optional[str] = None) -> List[HipToolchain]:
    chains: List[HipToolchain] = []
    if user or os.environ.get("MUSE_HIP_CLANG"):
        path = user or os.environ["MUSE_HIP_CLANG"]
        chains.append(HipToolchain("user", [path], f"{path}"))
        return chains
    rocm_roots = [os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH"), "/opt/rocm"]
    rocm_roots += sorted(glob.glob("/opt/rocm-*"), reverse=True)
    for root in rocm_roots:
        if root:
            c = os.path.join(root, "llvm", "bin", "clang++")
            if os.access(c, os.X_OK):
                chains.append(HipToolchain("rocm", [c], f"ROCm clang {c}"))
                break
    distro, _ = find_distro_clang()
    if distro:
        chains.append(distro)
    zig = _find_zig()
    if zig:
        inc = None
        lld_dir = None
        if distro:
            rd = distro.resource_dir()
            if rd and os.path.exists(os.path.join(rd, "include", "__clang_hip_runtime_wrapper.h")):
                inc = os.path.join(rd, "include")
            lld = distro.llvm_tool("ld.lld")
            if lld:
                lld_dir = os.path.dirname(lld)
                if not os.path.exists(os.path.join(lld_dir, "lld")):
                    lld_dir = None
        major = _clang_major([zig, "clang"])
        chains.append(HipToolchain("zig", [zig, "clang"], f"ziglang clang {major} ({zig})",
                                   distro_include=inc, lld_dir=lld_dir))
    return chains


def find_distro_clang() -> Tuple[Optional[HipToolchain], str]:
    """The newest distro clang++-NN that has its ld.lld-NN, or None and what is missing."""
    without_lld = []
    for v in DISTRO_CLANG_VERSIONS:
        c = shutil.which(f"clang++-{v}")
        if not c:
            continue
        if shutil.which(f"ld.lld-{v}") or os.path.exists(f"/usr/lib/llvm-{v}/bin/ld.lld"):
            return HipToolchain("distro", [c], f"clang {v} ({c})"), ""
        without_lld.append(v)
    if without_lld:
        v = without_lld[0]
        return None, f"clang++-{v} has no ld.lld-{v} to link AMD code objects (Debian: apt-get install lld-{v})"
    return None, ("no distro clang++-NN on PATH (Debian: apt-get install clang-19 lld-19 llvm-19 "
                  "clang-tools-19 libclang-rt-19-dev libamdhip64-dev rocm-device-libs, as "
                  ".ci/install_gpu_compilers.sh does)")


HIP_HEADERS = "the HIP headers, hip/hip_runtime.h (Debian: apt-get install libamdhip64-dev)"


def _rocm_roots() -> List[str]:
    return [r for r in (os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH"), "/opt/rocm") if r]


def find_hip_headers() -> Optional[str]:
    """The include folder holding hip/hip_runtime.h (a ROCm install's or the distro's), or None."""
    dirs = [os.path.join(r, "include") for r in _rocm_roots()] + ["/usr/include", "/usr/local/include"]
    return next((d for d in dirs if os.path.exists(os.path.join(d, "hip", "hip_runtime.h"))), None)


def find_hip_runtime_library() -> Optional[str]:
    """libamdhip64.so (the name a build links against), or None."""
    dirs = [os.path.join(r, lib) for r in _rocm_roots() for lib in ("lib", "lib64")]
    dirs += sorted(glob.glob("/usr/lib/*-linux-gnu")) + ["/usr/lib64", "/usr/lib", "/usr/local/lib"]
    return next((os.path.join(d, "libamdhip64.so") for d in dirs
                 if os.path.exists(os.path.join(d, "libamdhip64.so"))), None)


def cmake_hip_missing(chain: HipToolchain) -> List[str]:
    """What the CMake build of the ROCm handler (ffi/gpu/hip.cmake, CMake's HIP language) needs
    with a distro clang and is not installed, each named with what installs it; [] when all is
    there. (Without clang-offload-bundler, CMake stops at "Failed to find HIP root directory".)"""
    major = _clang_major(chain.cmd) or 19
    missing = []

    def ask(*flags: str) -> str:
        try:
            rc, out = _run([*chain.cmd, *flags], timeout=60)
        except (OSError, subprocess.SubprocessError):
            return ""
        return out.strip().splitlines()[-1] if rc == 0 and out.strip() else ""

    bundler = ask("-print-prog-name=clang-offload-bundler")
    if not (os.path.isabs(bundler) and os.access(bundler, os.X_OK)):
        missing.append(f"clang's clang-offload-bundler (Debian: apt-get install clang-tools-{major})")
    builtins = ask("--rtlib=compiler-rt", "-print-libgcc-file-name")
    if not (builtins and os.path.exists(builtins)):
        missing.append(f"clang's compiler-rt builtins (Debian: apt-get install libclang-rt-{major}-dev)")
    if not find_hip_headers():
        missing.append(HIP_HEADERS)
    if not find_hip_runtime_library():
        missing.append("the HIP runtime library, libamdhip64.so (Debian: apt-get install libamdhip64-dev)")
    return missing


def _find_zig() -> Optional[str]:
    try:
        import ziglang  # type: ignore

        p = os.path.join(os.path.dirname(ziglang.__file__), "zig")
        if os.access(p, os.X_OK):
            return p
    except ImportError:
        pass
    return None


def _find_device_lib_dir(chain: HipToolchain) -> str:
    cands = [os.environ.get("MUSE_AMDGCN_BITCODE_DIR")]
    rd = chain.resource_dir() if chain.kind != "zig" else None
    if rd:
        cands.append(os.path.join(rd, "lib", "amdgcn", "bitcode"))
    cands += list(DEVICE_LIB_DIRS)
    for c in cands:
        if c and os.path.exists(os.path.join(c, "ocml.bc")):
            return c
    raise Missing("no AMD device libraries (ocml.bc) found (Debian: apt-get install rocm-device-libs)")


def prepare_device_libs(arch: str, chain: HipToolchain) -> str:
    """A device-lib folder holding everything the driver links for `arch`.

    Returns the system folder when it already has oclc_isa_version_<arch>.bc, else a
    private cached copy (symlinks) with that file generated from a sibling ISA file.
    """
    src = _find_device_lib_dir(chain)
    want = isa_lib_name(arch)
    if os.path.exists(os.path.join(src, want)):
        return src
    key = hashlib.sha1(os.path.realpath(src).encode()).hexdigest()[:10]
    dst = os.path.join(_cache_dir(), "amdgcn-bitcode", key)
    if os.path.exists(os.path.join(dst, want)):
        return dst
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(dst))
    if os.path.isdir(dst):  # keep the ISA files generated earlier
        for f in os.listdir(dst):
            shutil.copy2(os.path.join(dst, f), tmp, follow_symlinks=False)
    for f in os.listdir(src):
        if f.endswith(".bc") and not os.path.lexists(os.path.join(tmp, f)):
            os.symlink(os.path.join(src, f), os.path.join(tmp, f))
    _write_isa_bitcode(arch, src, os.path.join(tmp, want), chain)
    if os.path.isdir(dst):
        old = dst + f".old-{os.getpid()}"
        os.rename(dst, old)
        _atomic_publish(tmp, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        _atomic_publish(tmp, dst)
    return dst


def _write_isa_bitcode(arch: str, src_dir: str, out: str, chain: HipToolchain) -> None:
    value = isa_version(arch)
    # Use the system's own assembler tools (bitcode readable by every newer clang).
    tools_from = chain
    if chain.kind == "zig":
        tools_from = next((c for c in find_hip_toolchains() if c.kind == "distro"), chain)
    dis, asm = tools_from.llvm_tool("llvm-dis"), tools_from.llvm_tool("llvm-as")
    templates = sorted(glob.glob(os.path.join(src_dir, "oclc_isa_version_9*.bc")))
    if dis and asm and templates:
        rc, text = _run([dis, templates[-1], "-o", "-"], timeout=60)
        if rc == 0:
            text, n = re.subn(r"(@__oclc_ISA_version\s*=.*?constant i32 )\d+", rf"\g<1>{value}", text)
            if n == 1:
                ll = out + ".ll"
                with open(ll, "w") as f:
                    f.write(text)
                rc, msg = _run([asm, ll, "-o", out], timeout=60)
                os.unlink(ll)
                if rc == 0:
                    return
    # Fallback: have the (non-zig) clang assemble textual IR (no datalayout: link warns, harmless).
    ll = out + ".ll"
    with open(ll, "w") as f:
        f.write('target triple = "amdgcn-amd-amdhsa"\n'
                f"@__oclc_ISA_version = linkonce_odr protected local_unnamed_addr addrspace(4) "
                f"constant i32 {value}, align 4\n")
    rc, msg = _run([*tools_from.cmd, "--target=amdgcn-amd-amdhsa", "-x", "ir", "-c", "-emit-llvm",
                    ll, "-o", out], timeout=60)
    os.unlink(ll)
    if rc != 0:
        raise Unsupported(f"cannot generate {os.path.basename(out)}:\n{msg}")


def prepare_zig_resource_dir(chain: HipToolchain) -> str:
    """ziglang's clang has no usable resource dir and no HIP/CUDA wrapper headers: build
    one from zig's builtin headers plus the distro clang's wrapper headers (symlinks)."""
    zig_inc = os.path.join(os.path.dirname(chain.cmd[0]), "lib", "include")
    assert chain.distro_include
    key = hashlib.sha1(f"{os.path.realpath(zig_inc)}|{chain.distro_include}".encode()).hexdigest()[:10]
    dst = os.path.join(_cache_dir(), "zig-clang-resource", key)
    if os.path.isdir(os.path.join(dst, "include")):
        return dst
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(dst))
    inc = os.path.join(tmp, "include")
    os.makedirs(inc)
    for d in (zig_inc, chain.distro_include):  # zig's own headers win
        for f in os.listdir(d):
            if not os.path.lexists(os.path.join(inc, f)):
                os.symlink(os.path.join(d, f), os.path.join(inc, f))
    _atomic_publish(tmp, dst)
    return dst


def check_hip(source: str, arch: str, includes: Sequence[str], defines: Sequence[str],
              extra: Sequence[str], chains: Sequence[HipToolchain]) -> TargetResult:
    res = TargetResult("hip", arch, source, "skipped")
    if not chains:
        res.message = ("no HIP-capable clang found (ROCm /opt/rocm/llvm/bin/clang++, clang++-19 "
                       "with libamdhip64-dev + rocm-device-libs, or pip ziglang); "
                       "see .ci/install_gpu_compilers.sh")
        return res
    reasons = []
    for chain in chains:
        try:
            flags = chain.flags(arch)
        except Unsupported as e:
            reasons.append(str(e).strip().splitlines()[0])
            continue
        res.compiler = chain.label
        with tempfile.TemporaryDirectory(prefix="muse_hip_") as tmp:
            cmd = [*chain.cmd, "-x", "hip", "-std=c++17", f"--offload-arch={arch}", *flags,
                   "--cuda-device-only", "--no-gpu-bundle-output", "-c", *HIP_BUILD_FLAGS,
                   "-Rpass-analysis=kernel-resource-usage",
                   *[f"-I{i}" for i in includes], *[f"-D{d}" for d in defines], *extra,
                   source, "-o", os.path.join(tmp, "out.o")]
            res.command = cmd
            rc, out = _run(cmd)
        if rc != 0:
            res.status, res.message = "error", out
            return res
        res.kernels = parse_hip_remarks(out)
        _finish(res)
        return res
    res.message = f"skipped: no toolchain builds {arch}: " + " | ".join(reasons)
    return res


# --------------------------------------------------------------------------- driver


def _finish(res: TargetResult) -> None:
    names = _demangle([k.name for k in res.kernels])
    for k in res.kernels:
        k.demangled = names.get(k.name, k.name)
        res.problems += [f"{k.demangled}: {p}" for p in k.problems(res.backend)]
    res.status = "fail" if res.problems else "ok"


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def format_table(results: Sequence[TargetResult], root: str) -> str:
    lines: List[str] = []
    for r in results:
        src = os.path.relpath(r.source, root) if r.source.startswith(root) else r.source
        head = f"== {r.backend.upper()} {r.arch}  {src}  [{r.status}]"
        if r.compiler:
            head += f"  ({r.compiler})"
        lines.append(head)
        if r.status in ("skipped", "error"):
            lines += ["   " + l for l in (r.message or "").strip().splitlines()[-40:]]
            continue
        if r.backend == "cuda":
            hdr = ("kernel", "regs", "spill st", "spill ld", "smem", "stack", "bar")
            rows = [(_short(k.demangled) + ("" if k.kind == "kernel" else " (fn)"), k.registers,
                     k.spill_stores, k.spill_loads, k.smem, k.stack_frame, k.barriers)
                    for k in r.kernels]
        else:
            hdr = ("kernel", "VGPR", "AGPR", "SGPR", "scratch", "LDS", "occ", "vspill", "sspill")
            rows = [(_short(k.demangled), k.vgprs if k.vgprs is not None else k.raw.get("VGPRs"),
                     k.agprs, k.sgprs, k.scratch, k.lds,
                     k.occupancy if k.occupancy is not None else "?", k.vgpr_spill, k.sgpr_spill)
                    for k in r.kernels]
        if not rows:
            lines.append("   (no kernels found)")
            continue
        cells = [[("-" if c is None else str(c)) for c in row] for row in [hdr, *rows]]
        w = [max(len(row[i]) for row in cells) for i in range(len(hdr))]
        for j, row in enumerate(cells):
            lines.append("   " + "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i])
                                           for i, c in enumerate(row)))
        for p in r.problems:
            lines.append(f"   FAIL {p}")
        for k in r.kernels:
            if r.backend == "cuda" and (k.stack_frame or 0) > 0 and not k.problems("cuda"):
                lines.append(f"   WARN {k.demangled}: {k.stack_frame} B stack frame (local memory)")
    return "\n".join(lines)


def run_checks(sources: Sequence[str], cuda_archs: Sequence[str], hip_archs: Sequence[str],
               includes: Sequence[str], defines: Sequence[str] = (), extra_cuda: Sequence[str] = (),
               extra_hip: Sequence[str] = (), hip_compiler: Optional[str] = None,
               nvcc: Optional[str] = None) -> List[TargetResult]:
    results: List[TargetResult] = []
    for arch in cuda_archs:
        for s in sources:
            results.append(check_cuda(s, arch, includes, defines, extra_cuda, nvcc))
    if hip_archs:
        chains = find_hip_toolchains(hip_compiler)
        for arch in hip_archs:
            for s in sources:
                results.append(check_hip(s, arch, includes, defines, extra_hip, chains))
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/gpu_compile_check.py",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--cuda", action="store_true", help="check CUDA (default: both)")
    ap.add_argument("--hip", action="store_true", help="check HIP (default: both)")
    ap.add_argument("--arch", action="append", default=[],
                    help="sm_XX[a] (CUDA) or gfxNNN (HIP); repeatable. "
                         f"Default {','.join(DEFAULT_CUDA_ARCHS + DEFAULT_HIP_ARCHS)}")
    ap.add_argument("--sources", nargs="+", help="kernel sources (default: <root>/ffi/gpu/*.cu.cc)")
    ap.add_argument("--root", help="repo root (default: found from this file)")
    ap.add_argument("-I", dest="includes", action="append", default=[],
                    help="extra include dir (<root>/ffi is always added)")
    ap.add_argument("-D", dest="defines", action="append", default=[], help="macro definition")
    ap.add_argument("--nvcc", help="nvcc to use (default: PATH, /usr/local/cuda/bin/nvcc)")
    ap.add_argument("--hip-compiler", help="HIP clang to use (default: ROCm, clang++-NN, ziglang)")
    ap.add_argument("--cuda-flag", action="append", default=[], help="extra nvcc flag")
    ap.add_argument("--hip-flag", action="append", default=[], help="extra clang flag")
    ap.add_argument("--json", help="write the results as JSON to this path")
    ap.add_argument("--strict", action="store_true",
                    help="a skipped target (toolchain missing, arch unsupported) also fails")
    a = ap.parse_args(argv)

    root = os.path.abspath(a.root) if a.root else find_repo_root()
    sources = [os.path.abspath(s) for s in a.sources] if a.sources else sorted(
        glob.glob(os.path.join(root, "ffi", "gpu", "*.cu.cc")))
    if not sources:
        print(f"gpu_compile_check: no sources (looked for {root}/ffi/gpu/*.cu.cc)")
        return 0
    do_cuda, do_hip = (a.cuda, a.hip) if (a.cuda or a.hip) else (True, True)
    cuda_archs = [x for x in a.arch if x.startswith(("sm_", "compute_"))]
    hip_archs = [x for x in a.arch if x.startswith("gfx")]
    bad = [x for x in a.arch if x not in cuda_archs + hip_archs]
    if bad:
        ap.error(f"unknown arch {bad}")
    cuda_archs = (cuda_archs or list(DEFAULT_CUDA_ARCHS)) if do_cuda else []
    hip_archs = (hip_archs or list(DEFAULT_HIP_ARCHS)) if do_hip else []
    includes = [os.path.join(root, "ffi"), *map(os.path.abspath, a.includes)]

    results = run_checks(sources, cuda_archs, hip_archs, includes, a.defines, a.cuda_flag,
                         a.hip_flag, a.hip_compiler, a.nvcc)
    print(format_table(results, root))
    if a.json:
        with open(a.json, "w") as f:
            json.dump([dataclasses.asdict(r) for r in results], f, indent=1)
    failed = [r for r in results if r.status in ("fail", "error")]
    skipped = [r for r in results if r.status == "skipped"]
    ok = [r for r in results if r.status == "ok"]
    print(f"gpu_compile_check: {len(ok)} ok, {len(failed)} failed, {len(skipped)} skipped")
    return 1 if failed or (a.strict and skipped) else 0


if __name__ == "__main__":
    sys.exit(main())
