"""The split count and split kernel of benchmark configs, swept on the device clock.

Each config of ``benchmarks/bench.py`` (its names: ``full2k-r128``, ``ragged1k-128k-r64``) runs at
the launch plan's split count and at each count of ``--splits``, and under each
``MUSE_ATTN_LAUNCH`` override of ``--launch`` (``""``: the plan's kernels). Every output is checked
against the plan's own output first (the split count moves only the rounding of the merge), then
timed as the benchmark times a call (``benchmarks/device_clock.py`` chain_per_call: chains of 1
and n calls in one jit, the device clock around each, (t_n - t_1) / (n - 1)). One line a
measurement; ``--json`` keeps them all. The launch plan's split-count rules in
``ffi/gpu/tuning.h`` cite runs of this tool.

    python tools/split_sweep.py --configs full2k-r128,ragged1k-128k-r64 --splits 1,2,4,8,16
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", required=True, help="comma-separated bench config names")
    ap.add_argument("--splits", default="", help="comma-separated split counts besides the plan's")
    ap.add_argument("--launch", default="", help="';'-separated MUSE_ATTN_LAUNCH overrides ('' the plan's)")
    ap.add_argument("--chain", type=int, default=20, help="calls in the long chain")
    ap.add_argument("--repeats", type=int, default=7, help="timed repeats (median)")
    ap.add_argument("--json", default="", help="write every measurement here")
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import numpy as np

    import bench
    import device_clock as dc
    import jax_muse_attn

    if not dc.available():
        print("split_sweep: no device clock on this platform", file=sys.stderr)
        return 2
    splits = [int(s) for s in args.splits.split(",") if s.strip()]
    launches = args.launch.split(";")
    rows = []
    for name in args.configs.split(","):
        cfg = bench.parse_config(name.strip())
        q, kv, bt, sl = bench.jax_inputs(cfg)
        copy_us = None

        # The operands beside the chain's that the bench passes: an FP8 cache's scales, a drafts
        # call's counts or tree.
        extra = dict(k_scale=jnp.float32(bench.KV_SCALE), v_scale=jnp.float32(bench.KV_SCALE)) if cfg.fp8 else {}
        extra.update({k: v if isinstance(v, bool) else jnp.asarray(v) for k, v in cfg.draft_kwargs().items()})
        first = (lambda r: r[0]) if cfg.call == "lse" else (lambda r: r)

        def call(num_splits):
            def f(x, kv, bt, sl):
                return first(jax_muse_attn.verify_attention(x, kv, bt, sl, scale=bench.SCALE, window=cfg.window,
                                                            backend="ffi", num_splits=num_splits or None, **extra))
            return f

        base = np.asarray(jax.jit(call(None))(q, kv, bt, sl)).astype(np.float32)
        for launch in launches:
            os.environ["MUSE_ATTN_LAUNCH"] = launch  # read when a call is traced
            for n_splits in [None] + splits:
                plan = jax_muse_attn.launch_plan(q, kv, bt, window=cfg.window, tokens_per_request=bench.NQ,
                                                 num_splits=n_splits, drafts=cfg.call in ("drafts", "tree"))
                step = call(n_splits)
                out = np.asarray(jax.jit(step)(q, kv, bt, sl)).astype(np.float32)
                err = float(np.max(np.abs(out - base)))
                ok = bool(np.isfinite(err) and err <= 2 ** -6)
                us = dc.chain_per_call(step, args.chain, (q, kv, bt, sl), args.repeats)["per_call_us"]
                row = dict(config=cfg.name, launch=launch, num_splits=plan["num_splits"],
                           split_kernel=plan["split_kernel"], merge_pdl=plan.get("merge_pdl"),
                           us=us, kv_mb=cfg.kv_bytes / 1e6, gbps=cfg.kv_bytes / us / 1e3, ok=ok,
                           max_diff_vs_plan=err)
                rows.append(row)
                print(f"{cfg.name:24s} {launch or '-':28s} splits {plan['num_splits']:3d} "
                      f"{plan['split_kernel'] + ('+pdl' if plan.get('merge_pdl') else ''):20s} {us:9.1f} us {row['gbps']:7.0f} GB/s"
                      f"{'' if ok else '  DIFFERS ' + repr(err)}", flush=True)
        del q, kv, bt, sl
        jnp.zeros(()).block_until_ready()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
