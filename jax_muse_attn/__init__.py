"""jax_muse_attn: speculative-decoding verify attention over a paged KV cache, for JAX.

``verify_attention`` runs the custom call of the current platform (CPU, CUDA or ROCm) or the
pure-jnp ``reference``. Importing the package checks the JAX version, then registers the FFI
handlers with XLA.
"""

import os as _os
import re as _re
import warnings as _warnings

# The JAX releases the tests cover; pyproject.toml states the same bounds for jax and jaxlib,
# and .ci/run runs the suite on the oldest and on the newest. Checked before anything is
# registered with XLA, so that another JAX fails here, naming the versions, rather than inside
# a trace or XLA. Below 0.8.0: the Shardy rule's factor sizes (custom_partitioning) need 0.7.2,
# jax.shard_map 0.6.1, the tests' jax.enable_x64 0.8.0.
JAX_MIN = (0, 8, 0)  # inclusive
JAX_BELOW = (0, 13)  # exclusive: 0.12.x is the newest tested
SUPPORTED_JAX = ">=0.8.0,<0.13"
ALLOW_UNTESTED_JAX_ENV = "MUSE_ATTN_ALLOW_UNTESTED_JAX"


def _release(version: str) -> tuple:
    """The numeric release of a version string: "0.12.0.1" -> (0, 12, 0, 1), "0.13.0.dev2" ->
    (0, 13, 0); () when it does not start with a number (outside every range)."""
    m = _re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(x) for x in m.group().split(".")) if m else ()


def _unsupported_jax(jax_version: str, jaxlib_version: str):
    """None when jax and jaxlib both lie in the supported range, else the message saying so."""
    if all(JAX_MIN <= _release(v) < JAX_BELOW for v in (jax_version, jaxlib_version)):
        return None
    return (f"jax_muse_attn supports jax and jaxlib {SUPPORTED_JAX} (CI tests the oldest and the "
            f"newest of that range); "
            f"this Python has jax {jax_version} and jaxlib {jaxlib_version}. Install a supported "
            f"JAX (pip install \"jax{SUPPORTED_JAX}\"; on AMD GPUs with the jax-rocm7-plugin and "
            f"jax-rocm7-pjrt of the same version, see the README). To import it anyway, untested, "
            f"set {ALLOW_UNTESTED_JAX_ENV}=1.")


def _check_jax() -> None:
    import jax
    import jaxlib.version

    why = _unsupported_jax(jax.__version__, jaxlib.version.__version__)
    if why is None:
        return
    if _os.environ.get(ALLOW_UNTESTED_JAX_ENV, "") not in ("", "0"):
        _warnings.warn(why, RuntimeWarning, stacklevel=3)
        return
    raise ImportError(why)


_check_jax()

from jax_muse_attn import reference  # noqa: E402
from jax_muse_attn._ffi import REGISTERED as _REGISTERED  # noqa: E402
from jax_muse_attn._ffi import TARGET_NAME  # noqa: E402
from jax_muse_attn.attention import (  # noqa: E402
    BACKENDS, default_num_splits, launch_plan, merge_attention_states, verify_attention,
    verify_attention_packed)

__version__ = "0.1.0"


def registered_platforms() -> tuple[str, ...]:
    """The XLA platforms this build has a handler for (e.g. ("cpu", "CUDA"))."""
    return tuple(sorted(_REGISTERED))


__all__ = ["verify_attention", "verify_attention_packed", "merge_attention_states", "reference", "registered_platforms", "BACKENDS", "TARGET_NAME",
           "default_num_splits", "launch_plan", "SUPPORTED_JAX"]
