"""jax_muse_attn: speculative-decoding verify attention over a paged KV cache, for JAX.

``verify_attention`` runs the custom call of the current platform (CPU, CUDA or ROCm) or the
pure-jnp ``reference``. Importing the package registers the FFI handlers with XLA.
"""

from jax_muse_attn import reference
from jax_muse_attn._ffi import REGISTERED as _REGISTERED
from jax_muse_attn._ffi import TARGET_NAME
from jax_muse_attn.attention import BACKENDS, default_num_splits, launch_plan, verify_attention

__version__ = "0.1.0"


def registered_platforms() -> tuple[str, ...]:
    """The XLA platforms this build has a handler for (e.g. ("cpu", "CUDA"))."""
    return tuple(sorted(_REGISTERED))


__all__ = ["verify_attention", "reference", "registered_platforms", "BACKENDS", "TARGET_NAME",
           "default_num_splits", "launch_plan"]
