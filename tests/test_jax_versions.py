"""The supported JAX range: the package refuses at import, naming the installed versions and
the range, any jax or jaxlib outside it (before registering anything with XLA); the bounds in
pyproject.toml and the oldest JAX that .ci/run tests are the package's own."""

import os
import re
import subprocess
import sys
import tomllib

import jax
import jaxlib.version
import pytest

import jax_muse_attn
from jax_muse_attn import ALLOW_UNTESTED_JAX_ENV, JAX_BELOW, JAX_MIN, SUPPORTED_JAX

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))


def _dotted(t):
    return ".".join(map(str, t))


def test_range_constants_agree():
    assert SUPPORTED_JAX == f">={_dotted(JAX_MIN)},<{_dotted(JAX_BELOW)}"


def test_installed_jax_is_in_range():
    assert jax_muse_attn._unsupported_jax(jax.__version__, jaxlib.version.__version__) is None


@pytest.mark.parametrize("version", ["0.8.0", "0.8.3", "0.9.0.1", "0.10.2", "0.11.2", "0.12.0",
                                     "0.12.0.1", "0.12.1rc1", "0.12.5.dev20260101"])
def test_in_range(version):
    assert jax_muse_attn._unsupported_jax(version, version) is None


@pytest.mark.parametrize("jax_v, jaxlib_v", [
    ("0.7.2", "0.7.2"), ("0.4.38", "0.4.38"), ("0.13.0", "0.13.0"), ("0.13.0.dev20260101", "0.12.0"),
    ("1.0.0", "1.0.0"), ("0.10.2", "0.7.2"), ("0.12.0.1", "0.13.1"), ("unknown", "0.10.2"),
    ("0.8.0rc1", "0.7.2"), ("0.7", "0.8.0")])
def test_out_of_range_message(jax_v, jaxlib_v):
    msg = jax_muse_attn._unsupported_jax(jax_v, jaxlib_v)
    assert msg is not None
    assert f"jax {jax_v}" in msg and f"jaxlib {jaxlib_v}" in msg and SUPPORTED_JAX in msg
    assert ALLOW_UNTESTED_JAX_ENV in msg


def _import_with(jax_version=None, jaxlib_version=None, allow=None):
    """Imports the package in a fresh interpreter that sees the given versions (the installed
    ones where None); returns the process."""
    code = "import sys, jax, jaxlib.version\n"
    if jax_version is not None:
        code += f"jax.__version__ = {jax_version!r}\n"
    if jaxlib_version is not None:
        code += f"jaxlib.version.__version__ = {jaxlib_version!r}\n"
    code += ("try:\n"
             "    import jax_muse_attn\n"
             "except ImportError as e:\n"
             "    print('IMPORT_ERROR', e)\n"
             "    print('FFI_IMPORTED', 'jax_muse_attn._ffi' in sys.modules)\n"
             "    sys.exit(3)\n"
             "print('PLATFORMS', jax_muse_attn.registered_platforms())\n")
    env = dict(os.environ)
    env.pop(ALLOW_UNTESTED_JAX_ENV, None)
    if allow is not None:
        env[ALLOW_UNTESTED_JAX_ENV] = allow
    # from the tests folder, so that the installed package (not the source tree) is imported
    return subprocess.run([sys.executable, "-W", "always::RuntimeWarning", "-c", code], cwd=HERE,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("jax_v, jaxlib_v", [("0.7.2", None), ("0.13.0", None), (None, "0.7.2"),
                                             ("0.13.0.dev20260101", "0.13.0.dev20260101")])
def test_import_refuses_unsupported_jax(jax_v, jaxlib_v):
    p = _import_with(jax_v, jaxlib_v)
    assert p.returncode == 3, p.stdout + p.stderr
    shown_jax = jax_v or jax.__version__
    shown_jaxlib = jaxlib_v or jaxlib.version.__version__
    assert "IMPORT_ERROR jax_muse_attn supports jax and jaxlib " + SUPPORTED_JAX in p.stdout
    assert f"this Python has jax {shown_jax} and jaxlib {shown_jaxlib}." in p.stdout
    assert "FFI_IMPORTED False" in p.stdout  # refused before any handler was registered


def test_import_untested_jax_when_allowed():
    p = _import_with("0.13.0", None, allow="1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "PLATFORMS" in p.stdout
    assert "RuntimeWarning" in p.stderr and "jax 0.13.0" in p.stderr and SUPPORTED_JAX in p.stderr
    p = _import_with("0.13.0", None, allow="0")
    assert p.returncode == 3, p.stdout + p.stderr


def test_import_supported_jax_is_silent():
    p = _import_with()
    assert p.returncode == 0 and "PLATFORMS" in p.stdout, p.stdout + p.stderr
    assert "jax_muse_attn supports" not in p.stderr


def _requirement(reqs, name):
    found = [r for r in reqs if re.match(rf"{name}\s*[<>=!~;\[]", r) or r == name]
    assert len(found) == 1, (name, reqs)
    return re.sub(r"\s+", "", found[0][len(name):])


def test_pyproject_states_the_range():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        meta = tomllib.load(f)
    deps = meta["project"]["dependencies"]
    build = meta["build-system"]["requires"]
    assert _requirement(deps, "jax") == SUPPORTED_JAX
    assert _requirement(deps, "jaxlib") == SUPPORTED_JAX
    # the build compiles the handlers against the oldest supported jaxlib's XLA FFI headers,
    # which every jaxlib in the range accepts
    assert _requirement(build, "jaxlib") == "==" + _dotted(JAX_MIN)
    assert meta["project"]["requires-python"] == ">=3.11"  # what jax 0.8.0 requires


def test_ci_tests_the_oldest_supported_jax():
    with open(os.path.join(ROOT, ".ci", "jax_oldest.txt")) as f:
        pins = dict(line.strip().split("==") for line in f
                    if line.strip() and not line.lstrip().startswith("#"))
    assert pins == {"jax": _dotted(JAX_MIN), "jaxlib": _dotted(JAX_MIN)}
