"""Partitioning rules of verify_attention: tensor parallelism over heads, no collectives.

Both backends ("ffi" and "reference") go through :func:`partitioned`, a
``jax.experimental.custom_partitioning`` wrapper. Under a mesh whose axis shards the head axis
of q and of the kv_cache consistently (q head ``h`` belongs to KV head ``h // QPK``; a shard
holds whole KV heads and their QPK query heads), every device runs the kernel on its local
heads, with the static shapes (head counts, default split count) recomputed from the local
shapes. The output is sharded like q. Nothing is gathered, permuted or reduced.

Shardy (JAX's default partitioner) reads the ``sharding_rule``: q's head axis is the compound
factor ``(k g)`` (KV head, group; ``(k g d)`` for a 2-D q), kv_cache's head axis is ``k``;
the other axes are plain factors, so Shardy keeps the user's shardings of them and
``partition`` sees (and refuses) them instead of a silent gather. GSPMD (``jax_use_shardy_partitioner=False``, while
JAX offers it) uses ``infer_sharding_from_operands`` / ``propagate_user_sharding``. Both end in
``partition``, which checks the operand shardings and refuses, with a ValueError naming the
arguments and their PartitionSpecs, anything else:

- heads sharded on q but not on kv_cache (or the reverse, or on different mesh axes),
- KV heads not divisible by the product of the mesh axes sharding them,
- any sharding of q's token axis or D, of the cache's blocks/slots/features, or of
  block_table / seq_lens / num_reqs (data parallelism over requests is not supported by the
  rules: shard_map over the 'dp' axis, see jax_muse_attn.sharding),
- FP8 per-token scales ([num_blocks, Hkv, 16]) whose heads (dim 1) are not sharded as the
  cache's, or whose blocks or slots are sharded (per-tensor scales are scalars: replicated),
- any sharding of the per-request draft operands (draft_lens, tree_mask, draft_depths): every
  device needs them whole.

With ``return_lse`` the call has a second result, lse ``[NQ*R, Hq]``, sharded over heads like
the output.

A fully replicated call (or a single device) runs the kernel unpartitioned.
"""

from __future__ import annotations

import dataclasses
import functools

from jax.experimental.custom_partitioning import custom_partitioning
from jax.interpreters.mlir import ir
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from jax_muse_attn import _validate

ARG_NAMES = ("q", "kv_cache", "block_table", "seq_lens", "num_reqs", "k_scale", "v_scale",
             "draft_lens", "tree_mask", "draft_depths")
SCALE_NAMES = ("k_scale", "v_scale")
REPLICATED_NAMES = ("block_table", "seq_lens", "num_reqs", "draft_lens", "tree_mask",
                    "draft_depths")


def local_shapes(shapes: _validate.Shapes, q_shape, kv_shape) -> _validate.Shapes:
    """The Shapes of one shard, from its local q and kv_cache shapes."""
    hkv = kv_shape[1]
    hq = q_shape[1] if len(q_shape) == 3 else q_shape[1] // shapes.head_dim
    return dataclasses.replace(shapes, num_q_heads=hq, num_kv_heads=hkv)


def _axes(entry) -> tuple[str, ...]:
    if entry is None:
        return ()
    if isinstance(entry, (tuple, list)):
        return tuple(entry)
    return (entry,)


def _spec(sharding, ndim) -> tuple[tuple[str, ...], ...]:
    spec = tuple(sharding.spec) if isinstance(sharding, NamedSharding) else ()
    spec = spec + (None,) * (ndim - len(spec))
    return tuple(_axes(e) for e in spec)


def _fmt(spec) -> str:
    return "P(" + ", ".join("None" if not a else repr(a[0]) if len(a) == 1 else repr(a)
                           for a in spec) + ")"


def _present(arg_shapes):
    """(name, operand) of the operands the call has (a bf16 call has no scales, a chain no
    draft operands)."""
    return [(n, a) for n, a in zip(ARG_NAMES, arg_shapes) if a is not None]


def check_shardings(shapes: _validate.Shapes, mesh, arg_shapes) -> tuple[str, ...]:
    """Mesh axes that shard the heads (possibly ()), after checking every operand's sharding.
    arg_shapes: q, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale, draft_lens,
    tree_mask, draft_depths (None where the call has no such operand)."""
    present = _present(arg_shapes)
    arg_shapes = [a for _, a in present]
    if not all(isinstance(a.sharding, NamedSharding) or a.sharding.is_fully_replicated
               for a in arg_shapes):
        # No mesh axes to name (e.g. inside a partially manual shard_map): check by the shards.
        _check_by_indices(shapes, present)
        return ()
    specs = []
    for a in arg_shapes:
        sh = a.sharding
        specs.append(_spec(sh, len(a.shape)) if isinstance(sh, NamedSharding)
                     else ((),) * len(a.shape))
    by_name = {n: spec for (n, _), spec in zip(present, specs)}
    q_spec, kv_spec = specs[:2]
    all_specs = "; ".join(f"{n} {_fmt(s)}" for (n, _), s in zip(present, specs))

    def refuse(what):
        raise ValueError(
            f"verify_attention: unsupported sharding: {what}. Supported: heads sharded on the "
            f"same mesh axes for q (dim 1), kv_cache (dim 1) and FP8 per-token scales (dim 1), "
            f"everything else replicated (see jax_muse_attn.sharding.tp_specs). Got: {all_specs}")

    if q_spec[0]:
        refuse(f"q's token axis (dim 0) is sharded on {q_spec[0]}; data parallelism over "
               "requests is not supported (use jax.shard_map per data-parallel group)")
    if len(q_spec) == 3 and q_spec[2]:
        refuse(f"q's head_dim axis (dim 2) is sharded on {q_spec[2]}")
    for d, what in ((0, "blocks"), (2, "slots"), (3, "key/value features")):
        if kv_spec[d]:
            refuse(f"kv_cache's {what} axis (dim {d}) is sharded on {kv_spec[d]}")
    for name in REPLICATED_NAMES:
        spec = by_name.get(name)
        if spec is not None and any(spec):
            refuse(f"{name} is sharded ({_fmt(spec)}); it must be replicated")
    heads = q_spec[1]
    if heads != kv_spec[1]:
        refuse(f"q's heads (dim 1) are sharded on {heads or 'nothing'} but kv_cache's heads "
               f"(dim 1) on {kv_spec[1] or 'nothing'}; they must be sharded on the same mesh "
               "axes (a replicated cache would be sliced or gathered, never silently)")
    for name in SCALE_NAMES:
        spec = by_name.get(name)
        if not spec:  # absent, or a per-tensor scale: a scalar, replicated
            continue
        for d, what in ((0, "blocks"), (2, "slots")):
            if spec[d]:
                refuse(f"{name}'s {what} axis (dim {d}) is sharded on {spec[d]}")
        if spec[1] != heads:
            refuse(f"{name}'s heads (dim 1) are sharded on {spec[1] or 'nothing'} but kv_cache's "
                   f"on {heads or 'nothing'}; per-token scales must be sharded like the cache")
    n = 1
    for ax in heads:
        n *= mesh.shape[ax]
    if shapes.num_kv_heads % n:
        refuse(f"the {shapes.num_kv_heads} KV heads ({shapes.num_q_heads} q heads) do not "
               f"divide into {n} shards (mesh axes {heads})")
    return heads


def _check_by_indices(shapes: _validate.Shapes, present) -> None:
    """The same rules as check_shardings, from the HLO shardings' tilings (shardings with no
    mesh axis names, e.g. inside a partially manual shard_map). present: (name, operand)."""
    names = [n for n, _ in present]
    arg_shapes = [a for _, a in present]

    def refuse(what):
        raise ValueError(
            f"verify_attention: unsupported sharding: {what}. Supported: heads sharded alike for "
            f"q (dim 1), kv_cache (dim 1) and FP8 per-token scales (dim 1), everything else "
            f"replicated. Got: " + "; ".join(f"{n} {a.sharding}" for n, a in present))

    hlo = [a.sharding._to_xla_hlo_sharding(len(a.shape)) for a in arg_shapes]
    tiles = []
    for h, a in zip(hlo, arg_shapes):
        if h.is_replicated():
            tiles.append([1] * len(a.shape))
        else:
            tiles.append(list(h.tile_assignment_dimensions())[: len(a.shape)])
    q_t, kv_t = tiles[0], tiles[1]
    if any(t != 1 for d, t in enumerate(q_t) if d != 1):
        refuse("q is sharded on an axis other than its heads (dim 1)")
    if any(t != 1 for d, t in enumerate(kv_t) if d != 1):
        refuse("kv_cache is sharded on an axis other than its heads (dim 1)")
    if q_t[1] != kv_t[1] or (q_t[1] > 1 and list(hlo[0].tile_assignment_devices())
                             != list(hlo[1].tile_assignment_devices())):
        refuse("q's and kv_cache's heads are not sharded alike")
    if shapes.num_kv_heads % kv_t[1]:
        refuse(f"the {shapes.num_kv_heads} KV heads do not divide into {kv_t[1]} shards")
    for name, t in zip(names, tiles):
        if name in REPLICATED_NAMES and any(x != 1 for x in t):
            refuse(f"{name} is sharded; it must be replicated")
    for name, h, t in zip(names, hlo, tiles):
        if name in SCALE_NAMES and t and (t[0] != 1 or t[2] != 1 or t[1] != kv_t[1] or (t[1] > 1 and list(
                h.tile_assignment_devices()) != list(hlo[1].tile_assignment_devices()))):
            refuse(f"{name} is not sharded like kv_cache's heads")


def _rule(shapes: _validate.Shapes, static, mesh, value_types, result_types):
    """Shardy rule: q head = compound (KV head k, group g); only heads may be sharded. FP8
    scales: per token [blocks, KV head, slot] like the cache, per tensor scalars. Draft
    operands (those present: a tree's may be absent) are per request, [R] or [R, NQ]."""
    del static, mesh, result_types
    g = shapes.qpk
    q = "n (k g) d" if shapes.q_rank == 3 else "n (k g d)"
    scales = {"none": "", "tensor": ", , ", "token": ", b k s, b k s"}[shapes.scale_kind]
    first_draft = 5 + (0 if shapes.scale_kind == "none" else 2)
    drafts = "".join(", x" if ir.RankedTensorType(t).rank == 1 else ", x t"
                     for t in value_types[first_draft:])
    lse = ", n (k g)" if shapes.lse else ""
    rule = f"{q}, b k s e, r p, l, {scales}{drafts} -> {q}{lse}"
    sizes = {"g": g} if shapes.q_rank == 3 else {"g": g, "d": shapes.head_dim}
    return rule, sizes


def _lse_sharding(q_sharding, q_rank: int):
    """The sharding of lse [NQ*R, Hq]: q's over heads (for a 2-D q, q's own: Hq*D is split
    where Hq is)."""
    if q_rank == 2:
        return q_sharding
    if isinstance(q_sharding, NamedSharding):
        spec = tuple(q_sharding.spec) + (None,) * (3 - len(tuple(q_sharding.spec)))
        return NamedSharding(q_sharding.mesh, PartitionSpec(*spec[:2]))
    # No mesh axis names (inside a partially manual shard_map): the same tiling, D dropped.
    try:
        from jax._src.sharding_impls import GSPMDSharding  # noqa: PLC0415
    except ImportError as e:  # a JAX without it: say what is missing rather than fail later
        raise NotImplementedError(
            "verify_attention: return_lse under a sharding without mesh axis names (a partially "
            f"manual shard_map) needs jax's GSPMDSharding, which this JAX lacks ({e})") from e
    hlo = q_sharding._to_xla_hlo_sharding(3)
    if hlo.is_replicated():
        return GSPMDSharding.get_replicated(q_sharding._device_assignment)
    dims = list(hlo.tile_assignment_dimensions())
    devices = np.asarray(hlo.tile_assignment_devices()).reshape(dims)
    from jax._src.lib import xla_client as xc  # noqa: PLC0415
    op = xc.OpSharding()
    op.type = xc.OpSharding.Type.OTHER
    op.tile_assignment_dimensions = dims[:2] + dims[3:]
    op.tile_assignment_devices = devices.reshape(-1).tolist()
    if hlo.replicate_on_last_tile_dim():
        op.replicate_on_last_tile_dim = True
    return GSPMDSharding(q_sharding._device_assignment, op)


def _result_shardings(shapes, q_sharding):
    if shapes.lse:
        return (q_sharding, _lse_sharding(q_sharding, shapes.q_rank))
    return q_sharding


@functools.lru_cache(maxsize=None)
def _wrapper(kernel):
    """The custom_partitioning wrapper of kernel(q, kv, bt, sl, nr, shapes, *static, k_scale=ks,
    v_scale=vs, draft_lens=dl, tree_mask=tm, draft_depths=dd) -> out (or (out, lse)); ks, vs:
    None (a bf16 call: no operands) or the FP8 scales; dl, tm, dd: None or the draft operands."""

    def fn(q, kv, bt, sl, nr, ks, vs, dl, tm, dd, shapes, static):
        return kernel(q, kv, bt, sl, nr, shapes, *static, k_scale=ks, v_scale=vs, draft_lens=dl,
                      tree_mask=tm, draft_depths=dd)

    cp = custom_partitioning(fn, static_argnums=(10, 11))

    def infer(shapes, static, mesh, arg_shapes, result_shape):
        del static, mesh, result_shape
        return _result_shardings(shapes, arg_shapes[0].sharding)  # sharded like q

    def propagate(shapes, static, mesh, user_shape):
        del static, mesh
        if shapes.lse:  # (out, lse): each as its users want it; partition checks the operands
            return tuple(u.sharding for u in user_shape)
        return user_shape.sharding

    def partition(shapes, static, mesh, arg_shapes, result_shape):
        del result_shape
        check_shardings(shapes, mesh, arg_shapes)
        arg_shardings = tuple(None if a is None else a.sharding for a in arg_shapes)
        local_q = arg_shardings[0].shard_shape(arg_shapes[0].shape)
        local_kv = arg_shardings[1].shard_shape(arg_shapes[1].shape)
        local = local_shapes(shapes, local_q, local_kv)

        def lower_fn(q, kv, bt, sl, nr, ks, vs, dl, tm, dd):
            return kernel(q, kv, bt, sl, nr, local, *static, k_scale=ks, v_scale=vs,
                          draft_lens=dl, tree_mask=tm, draft_depths=dd)

        return mesh, lower_fn, _result_shardings(shapes, arg_shardings[0]), arg_shardings

    cp.def_partition(partition=partition, infer_sharding_from_operands=infer,
                     propagate_user_sharding=propagate, sharding_rule=_rule)
    return cp


def partitioned(kernel, q, kv_cache, block_table, seq_lens, num_reqs, k_scale=None, v_scale=None,
                draft_lens=None, tree_mask=None, draft_depths=None, *, shapes, static=()):
    """kernel(q, kv, bt, sl, nr, shapes, *static, k_scale=, v_scale=) under the TP partitioning
    rules.

    kernel must be a module-level function (it keys a cache) that computes the output of q's
    shape from operands of the given (global or per-shard) shapes; static: hashable extras.
    k_scale, v_scale: None (bf16: the call has five operands, as before FP8) or FP8 scales.
    draft_lens, tree_mask, draft_depths: None or per-request operands (replicated).
    """
    return _wrapper(kernel)(q, kv_cache, block_table, seq_lens, num_reqs, k_scale, v_scale,
                            draft_lens, tree_mask, draft_depths, shapes, tuple(static))
