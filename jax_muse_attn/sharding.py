"""Tensor parallelism over heads: PartitionSpecs, NamedShardings and a shard_map form.

verify_attention carries partitioning rules (jax_muse_attn._partitioning): put q and kv_cache
on a Mesh with their head axis sharded on the same mesh axis, block_table / seq_lens (and a
traced num_reqs) replicated, and call it inside jit; each device runs the kernel on its local
heads (q head ``h`` belongs to KV head ``h // QPK``, so a shard holds whole KV heads with their
query heads), with no all-gather / all-to-all / collective-permute / reduction, and the output
is sharded like q::

    mesh = jax.make_mesh((8,), ("tp",))
    sh = tp_shardings(mesh)              # q, kv_cache, block_table, seq_lens, out
    q, kv = jax.device_put(q, sh.q), jax.device_put(kv, sh.kv_cache)
    bt, sl = jax.device_put(bt, sh.block_table), jax.device_put(sl, sh.seq_lens)
    out = jax.jit(functools.partial(verify_attention, scale=0.125))(q, kv, bt, sl)

Supported: heads sharded on one mesh axis (or a tuple of axes) whose size divides the KV
heads, q either ``[NQ*R, Hq, D]`` or ``[NQ*R, Hq*D]`` (dim 1 sharded on the same axes). With an
FP8 cache, per-token scales ``[num_blocks, Hkv, 16]`` shard like the cache's heads (dim 1) and
per-tensor scales (scalars) are replicated: ``tp_specs(scale_kind=...)``. Refused
with a ValueError naming the arguments' PartitionSpecs (raised while jit partitions the call, so
it surfaces from ``.compile()`` / the first call, wrapped in a JaxRuntimeError): q sharded on
heads but kv_cache not (or on other axes), or the reverse; any sharding of q's token axis, of
head_dim, of the cache's block/slot/feature axes, of block_table / seq_lens / num_reqs,
per-token scales not sharded like the cache's heads. The cache and its scales are never gathered
or sliced behind your back.

Data parallelism over requests is NOT supported by the partitioning rules (q's token axis must
be replicated): its per-shard num_reqs and block-table rows would need more than the rules
carry. Run data-parallel groups explicitly instead: ``jax.shard_map`` over the 'dp' axis only
(``axis_names={'dp'}``, q / block_table / seq_lens rows ``P('dp')``, kv_cache ``P()``), with
verify_attention inside still TP-partitioned over 'tp' by the rules (tested: bitwise equal, no
collectives). A traced num_reqs must then be per group.
"""

from __future__ import annotations

import functools
import numbers
import re
import typing

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from jax_muse_attn._ffi import TARGET_NAME


class TPSpecs(typing.NamedTuple):
    q: P
    kv_cache: P
    block_table: P
    seq_lens: P
    num_reqs: P
    out: P
    k_scale: P  # an FP8 cache's scales (tp_specs' scale_kind)
    v_scale: P
    draft_lens: P  # per-request draft operands: replicated
    tree_mask: P
    draft_depths: P
    lse: P  # return_lse's [NQ*R, Hq]: heads sharded like out


class TPShardings(typing.NamedTuple):
    q: NamedSharding
    kv_cache: NamedSharding
    block_table: NamedSharding
    seq_lens: NamedSharding
    num_reqs: NamedSharding
    out: NamedSharding
    k_scale: NamedSharding
    v_scale: NamedSharding
    draft_lens: NamedSharding
    tree_mask: NamedSharding
    draft_depths: NamedSharding
    lse: NamedSharding


SCALE_KINDS = ("tensor", "token")


def _scale_spec(axis, scale_kind) -> P:
    if scale_kind not in SCALE_KINDS:
        raise ValueError(f"tp_specs: scale_kind must be one of {SCALE_KINDS}, got {scale_kind!r}")
    return P() if scale_kind == "tensor" else P(None, axis, None)


def tp_specs(axis="tp", *, q_rank: int = 3, scale_kind: str = "tensor") -> TPSpecs:
    """PartitionSpecs of a head-sharded call on mesh axis (or tuple of axes) ``axis``.

    q_rank: 3 for q ``[NQ*R, Hq, D]``, 2 for ``[NQ*R, Hq*D]`` (out has q's spec either way).
    scale_kind: the FP8 scales ``k_scale`` / ``v_scale`` (unused with a bf16 cache): "tensor"
    (scalars, replicated: ``P()``) or "token" (``[num_blocks, Hkv, 16]``, heads sharded like the
    cache's: ``P(None, axis, None)``).
    draft_lens / tree_mask / draft_depths are per request: replicated. lse ``[NQ*R, Hq]`` is
    head-sharded like out.
    """
    if q_rank not in (2, 3):
        raise ValueError(f"tp_specs: q_rank must be 2 or 3, got {q_rank!r}")
    q = P(None, axis, None) if q_rank == 3 else P(None, axis)
    scale = _scale_spec(axis, scale_kind)
    return TPSpecs(q=q, kv_cache=P(None, axis, None, None), block_table=P(None, None),
                   seq_lens=P(None), num_reqs=P(), out=q, k_scale=scale, v_scale=scale,
                   draft_lens=P(None), tree_mask=P(None, None), draft_depths=P(None, None),
                   lse=P(None, axis))


def tp_shardings(mesh, axis="tp", *, q_rank: int = 3, scale_kind: str = "tensor") -> TPShardings:
    """NamedShardings on ``mesh`` of :func:`tp_specs`."""
    _check_axis(mesh, axis)
    specs = tp_specs(axis, q_rank=q_rank, scale_kind=scale_kind)
    return TPShardings(*(NamedSharding(mesh, s) for s in specs))


def _axis_size(mesh, axis) -> int:
    n = 1
    for a in (axis if isinstance(axis, tuple) else (axis,)):
        n *= mesh.shape[a]
    return n


def _check_axis(mesh, axis) -> None:
    for a in (axis if isinstance(axis, tuple) else (axis,)):
        if a not in mesh.shape:
            raise ValueError(f"verify_attention: mesh axis {a!r} is not in the mesh's axes "
                             f"{tuple(mesh.axis_names)}")


def verify_attention_shard_map(mesh, axis="tp", *, q_rank: int = 3, **static_kwargs):
    """A function ``f(q, kv_cache, block_table, seq_lens, num_reqs=None, k_scale=None,
    v_scale=None, draft_lens=None, tree_mask=None, draft_depths=None)`` running verify_attention
    per device under ``jax.shard_map`` over the head axis ``axis``.

    Each device sees its local heads (``Hq / n`` and ``Hkv / n``) and runs the kernel on them;
    block_table, seq_lens and num_reqs are replicated, the output is head-sharded like q. FP8
    scales: per token (``[num_blocks, Hkv, 16]``) head-sharded like the cache, per tensor
    (scalars) replicated.
    Draft operands are replicated; with ``return_lse=True`` (a static keyword) f returns
    ``(out, lse)``, lse head-sharded too.
    static_kwargs: verify_attention's keyword arguments (scale, window, backend,
    tokens_per_request, num_splits, return_lse). Heads that do not divide the axis size are refused with a
    ValueError at trace time. The other mesh axes (if any) see replicated data.
    """
    from jax_muse_attn.attention import verify_attention

    for name in ("num_reqs", "k_scale", "v_scale", "draft_lens", "tree_mask", "draft_depths"):
        if name in static_kwargs:
            raise TypeError(f"verify_attention_shard_map: pass {name} to the returned function")
    _check_axis(mesh, axis)
    n = _axis_size(mesh, axis)
    specs = tp_specs(axis, q_rank=q_rank)
    per_device = functools.partial(verify_attention, **static_kwargs)

    def f(q, kv_cache, block_table, seq_lens, num_reqs=None, k_scale=None, v_scale=None,
          draft_lens=None, tree_mask=None, draft_depths=None):
        if getattr(q, "ndim", None) != q_rank:
            raise ValueError(f"verify_attention_shard_map: q must be rank {q_rank} (q_rank), "
                             f"got shape {getattr(q, 'shape', None)}")
        hkv = kv_cache.shape[1]
        if hkv % n:
            raise ValueError(f"verify_attention: the {hkv} KV heads of kv_cache do not divide "
                             f"into {n} shards of mesh axis {axis!r}")
        args = [q, kv_cache, block_table, seq_lens]
        in_specs = [specs.q, specs.kv_cache, specs.block_table, specs.seq_lens]
        static_nr = num_reqs is None or isinstance(num_reqs, numbers.Integral)  # checked per shard
        if not static_nr:  # a traced scalar: replicated
            args.append(num_reqs)
            in_specs.append(specs.num_reqs)
        keyword_args = {}  # name -> position in args
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            if s is not None:  # verify_attention checks them (with the cache) per shard
                rank = getattr(s, "ndim", None)
                keyword_args[name] = len(args)
                args.append(s)
                in_specs.append(_scale_spec(axis, "token" if rank == 3 else "tensor"))
        for name, x in (("draft_lens", draft_lens), ("tree_mask", tree_mask),
                        ("draft_depths", draft_depths)):
            if x is not None:  # per request: replicated
                keyword_args[name] = len(args)
                args.append(x)
                in_specs.append(P())

        def body(q, kv, bt, sl, *rest):
            nr = num_reqs if static_nr else rest[0]
            kw = {name: rest[i - 4] for name, i in keyword_args.items()}
            return per_device(q, kv, bt, sl, num_reqs=nr, **kw)

        out_specs = (specs.out, P(None, axis)) if static_kwargs.get("return_lse") else specs.out
        return jax.shard_map(body, mesh=mesh, in_specs=tuple(in_specs), out_specs=out_specs,
                             check_vma=False)(*args)

    return f


# ----------------------------------------------------------------------------- checking a program
# The collectives a TP program must not contain (any of them would move the KV cache or outputs).
COLLECTIVES = ("all-gather", "all-to-all", "collective-permute", "all-reduce", "reduce-scatter")


def hlo_collectives(hlo_text: str) -> list[str]:
    """The COLLECTIVES found in compiled HLO text (``jax.jit(f).lower(...).compile().as_text()``),
    sync or async (``-start``) forms; empty when the program moves nothing between devices."""
    return [c for c in COLLECTIVES
            if re.search(rf"\b{c}(-start)?\(", hlo_text) or f" {c}(" in hlo_text]


def custom_call_q_shapes(hlo_text: str) -> list[str]:
    """Shapes of operand 0 (q) of every verify_attention custom call in compiled HLO text, e.g.
    ``["bf16[16,16,64]"]``: what each device's kernel sees after partitioning."""
    types = dict(re.findall(r"(%[\w.\-]+) = (\w+\[[0-9,]*\])", hlo_text))
    shapes = []
    for line in hlo_text.splitlines():
        if TARGET_NAME in line and "custom-call(" in line:
            first = line.split("custom-call(", 1)[1].split(",")[0].strip()
            m = re.match(r"(\w+\[[0-9,]*\])", first)  # typed operand, or a name to resolve
            shapes.append(m.group(1) if m else types.get(first.split(" ")[-1], first))
    return shapes
