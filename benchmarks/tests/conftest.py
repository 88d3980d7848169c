"""Fixtures of the benchmark's tests. benchmarks/ and tools/ are put on sys.path (bench,
device_clock, gpu_compile_check), and the product tests' case builder (tests/conftest.py) is
loaded by path under a name of its own. This folder is a package (its __init__.py), so that this
conftest is imported as tests.conftest and never shadows the `conftest` the product tests import."""

import importlib.util
import os
import sys
import zlib

import numpy as np
import pytest

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(BENCHMARKS)
for _d in (BENCHMARKS, os.path.join(ROOT, "tools")):
    if _d not in sys.path:
        sys.path.insert(0, _d)


def _product_helpers():
    name = "jax_muse_attn_tests_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "tests", "conftest.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def rng(request):
    """A numpy Generator seeded from the test's id (reproducible, distinct per test)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(scope="session")
def make_case():
    """tests/conftest.py's make_case: one poisoned, padded verify-attention problem."""
    return _product_helpers().make_case


@pytest.fixture(scope="session")
def build_host_harness():
    """tests/conftest.py's build_host_harness: a small C++ program built with the host compiler
    (benchmarks/ and ffi/ on its include path); skips, naming it, without a compiler."""
    return _product_helpers().build_host_harness


@pytest.fixture(scope="session")
def nvcc():
    """nvcc's path; skips, naming it, where there is none."""
    import gpu_compile_check

    path = gpu_compile_check.find_nvcc()
    if not path:
        pytest.skip("nvcc not found (PATH, /usr/local/cuda/bin): install the CUDA toolkit")
    return path
