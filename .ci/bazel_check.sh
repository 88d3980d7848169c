#!/usr/bin/env bash
# CI: the Bazel build of the CPU handler, offline. Run as root after jax / jaxlib are installed
# (pip), from the repository root or anywhere. Installs Debian's bazel-bootstrap (Bazel 4.2.3)
# when no bazel is on PATH (apt, non-interactive, quiet; waits for a held dpkg lock), then runs
# bazel/check.sh: builds //:cpu_targets with no network, analyses the GPU targets (no GPU
# toolchain: not compiled), loads the .so with ctypes and runs it through jax.ffi.ffi_call.
set -euo pipefail

if ! command -v "${BAZEL:-bazel}" >/dev/null; then
  if [[ $(id -u) != 0 ]]; then
    echo "bazel_check: FAIL: no bazel and not root (apt-get install bazel-bootstrap)"; exit 1
  fi
  echo "bazel_check: apt-get install bazel-bootstrap"
  t0=$SECONDS
  export DEBIAN_FRONTEND=noninteractive
  apt=(apt-get -o DPkg::Lock::Timeout=600 -qq)
  if ! apt-cache show bazel-bootstrap >/dev/null 2>&1; then
    "${apt[@]}" update >/dev/null
  fi
  "${apt[@]}" install -y --no-install-recommends bazel-bootstrap >/dev/null ||
    { "${apt[@]}" update >/dev/null && "${apt[@]}" install -y --no-install-recommends bazel-bootstrap >/dev/null; }
  echo "bazel_check: installed bazel-bootstrap $(dpkg-query -W -f='${Version}' bazel-bootstrap) ($((SECONDS - t0)) s)"
fi

exec "$(dirname "$0")/../bazel/check.sh"
