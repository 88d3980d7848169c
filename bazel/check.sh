#!/usr/bin/env bash
# Offline Bazel check of jax_muse_attn (needs bazel on PATH and a Python with jax + jaxlib):
#   1. builds //:cpu_targets (-c opt) with no network: inside `unshare -n` where that is allowed
#      (root), and always with --experimental_repository_disable_download, so any attempt to
#      download fails the build instead of passing silently;
#   2. analyses (does not build) the GPU targets //:cuda_targets and //:rocm_targets, which proves
#      that they are well-formed and that their globs / labels resolve, but compiles nothing;
#   3. runs bazel/check_so.py on the CPU .so: ctypes symbol lookup, then one jax.ffi.ffi_call of
#      each configuration compared with jax_muse_attn.reference.
# Environment: PYTHON (python3), BAZEL (bazel), XLA_FFI_INCLUDE_DIR (from jax.ffi.include_dir()),
#   MUSE_BAZEL_OUTPUT_ROOT (Bazel's --output_user_root; default ~/.cache/jax_muse_attn/bazel).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
BAZEL="${BAZEL:-bazel}"
say() { echo "bazel_check: $*"; }

command -v "$BAZEL" >/dev/null || { say "FAIL: no '$BAZEL' on PATH (.ci/bazel_check.sh installs it)"; exit 1; }
PYTHON_BIN_PATH="$(command -v "$PYTHON")" || { say "FAIL: no '$PYTHON' on PATH"; exit 1; }
export PYTHON_BIN_PATH
if [[ -z "${XLA_FFI_INCLUDE_DIR:-}" ]]; then
  XLA_FFI_INCLUDE_DIR="$("$PYTHON" -c 'import jax; print(jax.ffi.include_dir())')" ||
    { say "FAIL: cannot import jax with $PYTHON_BIN_PATH (pip install jax jaxlib)"; exit 1; }
fi
export XLA_FFI_INCLUDE_DIR
[[ -f "$XLA_FFI_INCLUDE_DIR/xla/ffi/api/ffi.h" ]] ||
  { say "FAIL: no xla/ffi/api/ffi.h under $XLA_FFI_INCLUDE_DIR"; exit 1; }

out_root="${MUSE_BAZEL_OUTPUT_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/jax_muse_attn/bazel}"
startup=(--batch "--output_user_root=$out_root")  # no server left behind; own output tree
flags=(-c opt --symlink_prefix=/ --experimental_repository_disable_download --color=no
       --curses=no --noshow_progress)

offline=()
if unshare -n true 2>/dev/null; then
  offline=(unshare -n)
  network="none (unshare -n: a network namespace with no interface up)"
else
  network="not isolated (unshare -n not permitted); repository downloads disabled"
fi

say "bazel: $("$BAZEL" "${startup[@]}" --version 2>/dev/null | head -1) ($(command -v "$BAZEL"))"
say "XLA FFI headers: $XLA_FFI_INCLUDE_DIR"
say "network during the build: $network"

t0=$SECONDS
"${offline[@]}" "$BAZEL" "${startup[@]}" build "${flags[@]}" //:cpu_targets
bin="$("$BAZEL" "${startup[@]}" info "${flags[@]}" bazel-bin 2>/dev/null)"
so="$bin/_muse_attn_cpu_handlers.so"
[[ -f "$so" ]] || { say "FAIL: $so was not built"; exit 1; }
t1=$SECONDS
say "OK   built //:cpu_targets -> $so ($((t1 - t0)) s)"

"${offline[@]}" "$BAZEL" "${startup[@]}" build --nobuild "${flags[@]}" //:cuda_targets //:rocm_targets
gpu_srcs=$(ls ffi/gpu/*.cu.cc ffi/gpu/verify_attention_gpu.cc 2>/dev/null | wc -l)
t2=$SECONDS
say "OK   analysed (not built) //:cuda_targets //:rocm_targets: $gpu_srcs GPU source file(s) in their globs ($((t2 - t1)) s)"

JAX_PLATFORMS=cpu "$PYTHON" bazel/check_so.py "$so"
say "OK   all checks passed ($((SECONDS - t0)) s in all)"
