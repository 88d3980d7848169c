"""Trace-time checks of verify_attention's arguments.

Everything that static shapes and Python values reveal is refused here, before anything is
traced or launched, with an error that names the argument, what was expected and what came.
Run-time data (seq_lens, block ids, a traced num_reqs) is never trusted either: the kernels
clamp and mask it (see the README's "Semantics").
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

PAGE_SIZE = 16  # keys a KV-cache block
TILE_KEYS = 64  # keys a tile of the split scheme
SUPPORTED_HEAD_DIMS = (64, 128)
# The cache dtypes. Every backend reads both FP8 formats on every target (the kernels decode
# them in software), so none is refused by platform.
KV_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz")
MAX_TOKENS_PER_REQUEST = 16
INT32_MAX = 2**31 - 1
LOG2E = np.float32(1.4426950408889634)  # the kernels' kLog2e (ffi/muse_attn/softmax_state.h)
# The kernels take scale * log2(e) as a float32: it must be a finite normal number.
SCALE_MIN = float(np.finfo(np.float32).tiny)


def _largest_scale() -> float:
    with np.errstate(over="ignore"):
        s = np.finfo(np.float32).max / LOG2E
        while not np.isfinite(s * LOG2E):
            s = np.nextafter(s, np.float32(0))
        while np.isfinite(np.nextafter(s, np.float32(np.inf)) * LOG2E):
            s = np.nextafter(s, np.float32(np.inf))
    return float(s)


SCALE_MAX = _largest_scale()
# "chain": NQ tokens a request, causal (no draft operand); "ragged": a chain of draft_lens[r]
# tokens; "tree": draft_lens, tree_mask and draft_depths (defaults filled in).
DRAFT_KINDS = ("chain", "ragged", "tree")
# Key positions (16 * pages, plus a window and a tile of slack) are int32 in the kernels.
MAX_PAGES = 2**26


@dataclasses.dataclass(frozen=True)
class Shapes:
    """Static sizes of one call, derived and checked from the arguments."""

    num_requests: int  # R: requests of the compiled bucket
    tokens: int  # NQ: new tokens a request
    num_q_heads: int  # Hq
    num_kv_heads: int  # Hkv
    head_dim: int  # D
    num_blocks: int
    pages: int  # block-table width P
    window: int  # 0: full attention
    q_rank: int  # 2 ([NQ*R, Hq*D]) or 3 ([NQ*R, Hq, D])
    kv_dtype: str = "bfloat16"  # a name of KV_DTYPES
    scale_kind: str = "none"  # FP8 scales: "tensor" ([]) or "token" ([num_blocks, Hkv, 16])
    drafts: str = "chain"  # DRAFT_KINDS: which draft operands the call has
    lse: bool = False  # the call also returns lse [NQ*R, Hq]

    @property
    def qpk(self) -> int:
        return self.num_q_heads // self.num_kv_heads

    @property
    def rows(self) -> int:
        """Output rows of one (request, KV head) group: NQ tokens x qpk heads."""
        return self.tokens * self.qpk

    @property
    def groups(self) -> int:
        return self.num_requests * self.num_kv_heads

    @property
    def capacity(self) -> int:
        """Most keys a block-table row addresses."""
        return self.pages * PAGE_SIZE

    @property
    def max_tiles(self) -> int:
        """Most 64-key tiles a request's key range can touch (static)."""
        full = -(-self.capacity // TILE_KEYS)
        if not self.window:
            return full
        span = self.window + self.tokens - 1  # keys of [key_lo, seq_len) at most
        return min(full, -(-span // TILE_KEYS) + 1)


def _fail(cls, arg: str, expected: str, actual) -> None:
    raise cls(f"verify_attention: {arg} must be {expected}, got {actual}")


def _dtype_name(x) -> str:
    return str(getattr(x, "dtype", type(x).__name__))


def _describe(x) -> str:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"a {_dtype_name(x)} array of shape {tuple(x.shape)}"
    return f"{type(x).__name__} {x!r}"


def _check_array(name: str, x, dtype, ranks: tuple[int, ...]) -> None:
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        _fail(TypeError, name, "an array", type(x).__name__)
    if x.dtype != dtype:
        _fail(TypeError, name, f"of dtype {np.dtype(dtype).name}", _dtype_name(x))
    if x.ndim not in ranks:
        want = " or ".join(f"rank {r}" for r in ranks)
        _fail(ValueError, name, want, f"shape {tuple(x.shape)} (rank {x.ndim})")


def check_static(scale, window, tokens_per_request) -> tuple[float, int]:
    """Checks the static (hashable) arguments; returns (scale, window as int, 0 = full)."""
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        _fail(TypeError, "scale", "a Python float", f"{type(scale).__name__} {scale!r}")
    with np.errstate(over="ignore", under="ignore"):
        scale32 = np.float32(scale)
        normal = np.isfinite(scale32 * LOG2E) and scale32 >= SCALE_MIN
    if not (math.isfinite(float(scale)) and normal):
        _fail(ValueError, "scale", f"a float in [{SCALE_MIN:.4g}, {SCALE_MAX:.4g}] (the kernels "
              "take scale * log2(e) as a finite normal float32)",
              f"{scale!r} (as float32: {float(scale32)!r})")
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, numbers.Integral):
            _fail(TypeError, "window", "None or a Python int", f"{type(window).__name__} {window!r}")
        if not 1 <= window <= INT32_MAX:
            _fail(ValueError, "window", f"None (full attention) or an int in [1, {INT32_MAX}]", window)
    if isinstance(tokens_per_request, bool) or not isinstance(tokens_per_request, numbers.Integral):
        _fail(TypeError, "tokens_per_request", "a Python int", repr(tokens_per_request))
    if not 1 <= tokens_per_request <= MAX_TOKENS_PER_REQUEST:
        _fail(ValueError, "tokens_per_request", f"in [1, {MAX_TOKENS_PER_REQUEST}]",
              tokens_per_request)
    return float(scale), int(window or 0)


def _kv_dtype(kv_cache) -> str:
    if not hasattr(kv_cache, "shape") or not hasattr(kv_cache, "dtype"):
        _fail(TypeError, "kv_cache", "an array", type(kv_cache).__name__)
    name = _dtype_name(kv_cache)
    if name not in KV_DTYPES:
        _fail(TypeError, "kv_cache", f"of dtype {' / '.join(KV_DTYPES)}", _dtype_name(kv_cache))
    return name


def _check_scales(kv_dtype: str, k_scale, v_scale, blocks: int, hkv: int) -> str:
    """The FP8 scales against the cache: both None with bf16; with FP8 both float32, both of
    shape () (per tensor) or both [num_blocks, Hkv, 16] (per token). Returns the scale kind."""
    if kv_dtype == "bfloat16":
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            if s is not None:
                _fail(TypeError, name, "None with a bfloat16 kv_cache (scales belong to an FP8 "
                      "cache)", _describe(s))
        return "none"
    per_token = (blocks, hkv, PAGE_SIZE)
    kinds = []
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if s is None:
            _fail(TypeError, name, f"a float32 array with a {kv_dtype} kv_cache: shape () per "
                  f"tensor or {per_token} per (block, KV head, slot)", "None")
        _check_array(name, s, jnp.float32, (0, 3))
        if s.ndim == 3 and tuple(s.shape) != per_token:
            _fail(ValueError, name, f"shape () per tensor or {per_token} per (block, KV head, "
                  "slot) of kv_cache [num_blocks, Hkv, 16, 2*D]", f"shape {tuple(s.shape)}")
        kinds.append("tensor" if s.ndim == 0 else "token")
    if kinds[0] != kinds[1]:
        _fail(ValueError, "k_scale and v_scale", "of one kind (both shape () or both "
              f"{per_token})", f"shapes {tuple(k_scale.shape)} and {tuple(v_scale.shape)}")
    return kinds[0]


def check_inputs(q, kv_cache, block_table, seq_lens, *, scale, window, tokens_per_request,
                 k_scale=None, v_scale=None) -> Shapes:
    """Checks shapes and dtypes; returns the static sizes of the call."""
    _, win = check_static(scale, window, tokens_per_request)
    _check_array("q", q, jnp.bfloat16, (2, 3))
    kv_dtype = _kv_dtype(kv_cache)
    _check_array("kv_cache", kv_cache, kv_cache.dtype, (4,))
    _check_array("block_table", block_table, jnp.int32, (2,))
    _check_array("seq_lens", seq_lens, jnp.int32, (1,))

    blocks, hkv, page, two_d = kv_cache.shape
    if page != PAGE_SIZE:
        _fail(ValueError, "kv_cache", f"[num_blocks, Hkv, {PAGE_SIZE}, 2*D] (pages of {PAGE_SIZE} keys)",
              f"shape {tuple(kv_cache.shape)}")
    if two_d % 2 or two_d // 2 not in SUPPORTED_HEAD_DIMS:
        _fail(ValueError, "kv_cache.shape[3]", f"2*D with D in {SUPPORTED_HEAD_DIMS}",
              f"{two_d} (shape {tuple(kv_cache.shape)})")
    d = two_d // 2
    if hkv < 1:
        _fail(ValueError, "kv_cache.shape[1] (KV heads)", ">= 1", hkv)
    if blocks < 1:
        _fail(ValueError, "kv_cache.shape[0] (blocks)", ">= 1", blocks)

    if q.ndim == 3:
        if q.shape[2] != d:
            _fail(ValueError, "q.shape[2] (head dim)", f"{d}, the kv_cache's D", f"shape {tuple(q.shape)}")
        hq = q.shape[1]
    else:
        if q.shape[1] % d:
            _fail(ValueError, "q.shape[1]", f"Hq*D, a multiple of D = {d}", f"shape {tuple(q.shape)}")
        hq = q.shape[1] // d
    if hq < 1 or hq % hkv:
        _fail(ValueError, "q heads", f"a positive multiple of the kv_cache's {hkv} KV heads", hq)

    nq = tokens_per_request
    if q.shape[0] == 0 or q.shape[0] % nq:
        _fail(ValueError, "q.shape[0]", f"tokens_per_request ({nq}) x requests, a positive multiple of {nq}",
              f"shape {tuple(q.shape)}")
    r = q.shape[0] // nq
    if block_table.shape[0] < r:
        _fail(ValueError, "block_table.shape[0]", f">= {r} (one row per request of q)",
              f"shape {tuple(block_table.shape)}")
    pages = block_table.shape[1]
    if not 1 <= pages <= MAX_PAGES:
        _fail(ValueError, "block_table.shape[1] (pages)", f"in [1, {MAX_PAGES}]",
              f"shape {tuple(block_table.shape)}")
    if seq_lens.shape[0] < r:
        _fail(ValueError, "seq_lens.shape[0]", f">= {r} (one per request of q)", f"shape {tuple(seq_lens.shape)}")
    scale_kind = _check_scales(kv_dtype, k_scale, v_scale, blocks, hkv)
    # A window of at least 16 * pages keys hides no key from any token: pass the smallest such
    # window on, so that no backend computes qpos - window near the int32 limit.
    win = min(win, pages * PAGE_SIZE)
    return Shapes(num_requests=r, tokens=nq, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
                  num_blocks=blocks, pages=pages, window=win, q_rank=q.ndim, kv_dtype=kv_dtype,
                  scale_kind=scale_kind)


def static_num_reqs(num_reqs, num_requests: int) -> int:
    """num_reqs when it is known at trace time (None -> R, a Python int), else -1 (traced: the
    kernels read it from device memory). Call after normalize_num_reqs has checked it."""
    if num_reqs is None:
        return int(num_requests)
    if isinstance(num_reqs, numbers.Integral) and not isinstance(num_reqs, bool):
        return int(num_reqs)
    return -1


def normalize_num_reqs(num_reqs, num_requests: int) -> jax.Array:
    """num_reqs as the int32 scalar the kernels take. None -> R; a Python int is checked against
    [0, R]; an integer array scalar of any dtype (traced or not) is clamped to [0, R] in its own
    dtype before the cast, so that a value past int32 (uint32 2**32 - 1, int64 under x64) can
    not wrap into another count. bool is refused, as a Python bool is."""
    expected = "None, a Python int in [0, R] or an integer scalar array"
    if num_reqs is None:
        return jnp.asarray(num_requests, jnp.int32)
    if isinstance(num_reqs, (bool, np.bool_)):
        _fail(TypeError, "num_reqs", expected, type(num_reqs).__name__)
    if isinstance(num_reqs, numbers.Integral):
        if not 0 <= num_reqs <= num_requests:
            _fail(ValueError, "num_reqs", f"in [0, {num_requests}] (R = requests of q)", num_reqs)
        return jnp.asarray(int(num_reqs), jnp.int32)
    if not hasattr(num_reqs, "dtype") or not hasattr(num_reqs, "shape"):
        _fail(TypeError, "num_reqs", expected, type(num_reqs).__name__)
    dtype = np.dtype(num_reqs.dtype)
    if not np.issubdtype(dtype, np.integer):
        _fail(TypeError, "num_reqs", "an integer scalar (bool and floats are refused)", _dtype_name(num_reqs))
    if tuple(num_reqs.shape) != ():
        _fail(ValueError, "num_reqs", "a scalar (shape ())", f"shape {tuple(num_reqs.shape)}")
    if isinstance(num_reqs, np.ndarray):  # host data: clamp before jnp could narrow it
        return jnp.asarray(min(max(int(num_reqs), 0), num_requests), jnp.int32)
    info = np.iinfo(dtype)
    if info.min >= -(2**31) and info.max <= INT32_MAX:  # every value fits: the kernels clamp
        return num_reqs.astype(jnp.int32)
    lo, hi = jnp.asarray(0, dtype), jnp.asarray(num_requests, dtype)  # both fit any such dtype
    return jnp.clip(num_reqs, lo, hi).astype(jnp.int32)


def check_drafts(shapes: Shapes, draft_lens, tree_mask, draft_depths, return_lse,
                 fn: str = "verify_attention") -> Shapes:
    """Checks the draft arguments against the call's shapes; returns the Shapes with drafts and
    lse set. draft_lens int32 [R]; tree_mask uint32 [R, NQ]; draft_depths int32 [R, NQ]; each
    None or an array (traced or not); return_lse a Python bool."""
    def fail(cls, arg, expected, actual):
        raise cls(f"{fn}: {arg} must be {expected}, got {actual}")

    if not isinstance(return_lse, (bool, np.bool_)):
        fail(TypeError, "return_lse", "a Python bool", f"{type(return_lse).__name__} {return_lse!r}")
    r, nq = shapes.num_requests, shapes.tokens
    for name, x, dtype, shape in (("draft_lens", draft_lens, np.int32, (r,)),
                                  ("tree_mask", tree_mask, np.uint32, (r, nq)),
                                  ("draft_depths", draft_depths, np.int32, (r, nq))):
        if x is None:
            continue
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            fail(TypeError, name, f"None or an array (dtype {np.dtype(dtype).name}, shape "
                 f"{shape})", type(x).__name__)
        if x.dtype != dtype:
            fail(TypeError, name, f"of dtype {np.dtype(dtype).name}", _dtype_name(x))
        if tuple(x.shape) != shape:
            what = "[R]" if len(shape) == 1 else "[R, tokens_per_request]"
            fail(ValueError, name, f"of shape {shape} ({what}, R = {r} requests of q)",
                 f"shape {tuple(x.shape)}")
    kind = ("tree" if tree_mask is not None or draft_depths is not None
            else "ragged" if draft_lens is not None else "chain")
    return dataclasses.replace(shapes, drafts=kind, lse=bool(return_lse))
