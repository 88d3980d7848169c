#!/usr/bin/env bash
# Installs what the GPU *compile* checks need (no GPU): run as root, idempotent, quiet.
#   HIP gfx942: clang-19 + lld-19 + llvm-19 (llvm-dis/llvm-as); for the ROCm handler's CMake build
#               (test_rocm_handler_builds) clang-tools-19 (clang-offload-bundler) and
#               libclang-rt-19-dev (compiler-rt builtins); Debian's HIP headers and runtime
#               (libamdhip64-dev) and device libraries (rocm-device-libs). Debian ships no
#               oclc_isa_version_942.bc (nor _950): tools/gpu_compile_check.py generates it into
#               ${XDG_CACHE_HOME:-~/.cache}/jax_muse_attn/amdgcn-bitcode (a real ROCm needs none).
#   HIP gfx950: the clang 22 bundled in the PyPI package ziglang (clang 19 does not know gfx950).
#   CUDA sm_90: nvcc is expected on the machine already (/usr/local/bin/nvcc); not installed here.
# Set MUSE_SKIP_ZIG=1 to leave out ziglang (gfx950 is then reported as skipped).
set -euo pipefail

APT_PKGS=(clang-19 lld-19 llvm-19 clang-tools-19 libclang-rt-19-dev libamdhip64-dev rocm-device-libs)
ZIG_SPEC="ziglang==0.17.1"
PYTHON="${PYTHON:-python3}"

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_gpu_compilers: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ "${MUSE_SKIP_ZIG:-0}" != 1 ]]; then
  if ! "$PYTHON" -c 'import importlib.metadata as m, sys; sys.exit(m.version("ziglang") != "0.17.1")' 2>/dev/null; then
    echo "install_gpu_compilers: pip install $ZIG_SPEC"
    "$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore "$ZIG_SPEC"
  fi
fi

# Warm the private device-lib / resource folders now (optional: the checker makes them on demand).
cd "$(dirname "$0")/.."
"$PYTHON" - <<'EOF' || echo "install_gpu_compilers: warm-up failed (the checker will retry and say why)"
import sys
sys.path.insert(0, "tools")
import gpu_compile_check as g
chains = g.find_hip_toolchains()
for arch in ("gfx942", "gfx950"):
    why = []
    for c in chains:
        try:
            c.flags(arch)
            print(f"install_gpu_compilers: {arch}: {c.label}")
            break
        except g.Unsupported as e:
            why.append(str(e))
    else:
        print(f"install_gpu_compilers: {arch}: no toolchain: {' | '.join(why) or 'none found'}")
EOF
