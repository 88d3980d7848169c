"""The knobs of //:BUILD in one place: the only file to edit when vendoring jax_muse_attn.

Standalone (this repository's WORKSPACE, the offline check .ci/bazel_check.sh): the defaults
below. In a jaxlib / XLA workspace (beside @xla, @local_config_cuda, @local_config_rocm):

  XLA_FFI_DEFAULT = "@xla//xla/ffi/api:ffi"
      (or keep the default and pass --@jax_muse_attn//:xla_ffi=@xla//xla/ffi/api:ffi)

  load("@local_config_cuda//cuda:build_defs.bzl", "cuda_library")
  load("@local_config_rocm//rocm:build_defs.bzl", "rocm_library")
  def muse_attn_cuda_library(**kwargs):
      cuda_library(**kwargs)
  def muse_attn_rocm_library(**kwargs):
      rocm_library(**kwargs)
  CUDA_DEPS = ["@local_config_cuda//cuda:cuda_headers"]
  CUDA_SO_DEPS = ["@xla//xla/tsl/cuda:cudart"]
  ROCM_DEPS = ["@local_config_rocm//rocm:rocm_headers"]
  ROCM_SO_DEPS = ["@local_config_rocm//rocm:hip"]

  (the macros and labels jaxlib's own GPU kernels use: jaxlib/jax.bzl, jaxlib/cuda/BUILD),
  then e.g. `bazel build --config=cuda @jax_muse_attn//:cuda_targets`.
"""

# The cc_library that provides "xla/ffi/api/ffi.h" (and api.h, c_api.h): default of //:xla_ffi.
# @xla_ffi is the installed jaxlib's copy of the headers (bazel/repositories.bzl).
XLA_FFI_DEFAULT = "@xla_ffi//:ffi"

# Warnings as CMake's build has them (ffi/CMakeLists.txt); optimization comes from -c opt.
MUSE_ATTN_COPTS = select({
    "@bazel_tools//src/conditions:windows": [],
    "//conditions:default": [
        "-Wall",
        "-Wextra",
    ],
})

# Extra deps of the GPU libraries (headers) and of their shared objects (runtime).
CUDA_DEPS = []
CUDA_SO_DEPS = []
ROCM_DEPS = []
ROCM_SO_DEPS = []

def muse_attn_cuda_library(copts = [], **kwargs):
    """Standalone default: a plain cc_library compiled with `-x cuda` (a sketch).

    It needs a C++ toolchain whose compiler is a clang that supports the installed CUDA (CC=clang,
    --copt=--cuda-path=..., --copt=--cuda-gpu-arch=sm_90, --linkopt flags for cudart). Not
    exercised by any check: bazel/check.sh only analyses it (clang 19 does not know CUDA 13's
    headers). The supported way is XLA's cuda_library (module docstring); CMake gives nvcc
    -O3 --use_fast_math -Xptxas=-warn-spills.
    """
    native.cc_library(copts = ["-x", "cuda"] + copts, **kwargs)

def muse_attn_rocm_library(copts = [], **kwargs):
    """Standalone default: a plain cc_library compiled with `-x hip` (a sketch).

    It needs a HIP-capable clang toolchain (--copt=--offload-arch=gfx942). Not exercised by any
    check: bazel/check.sh only analyses it. The supported way is XLA's rocm_library.
    """
    native.cc_library(copts = ["-x", "hip"] + copts, **kwargs)
