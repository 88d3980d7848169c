"""Shows that XLA captures verify_attention in a command buffer (CUDA graph) and that results
stay right there: runs a chain of calls inside one jit with command buffers on (custom calls
included) and off, over a bf16 cache and FP8 caches with per-tensor and per-token scales (traced),
every fourth call a drafts call (traced ragged counts and token tree, lse returned), checks every
output against the jnp reference, times the chain, and greps XLA's thunk-sequence
dump for the command buffer around the custom calls.

    python tools/command_buffer_check.py [--dump DIR]
"""

import argparse
import glob
import os
import subprocess
import sys

FLAGS = {
    "on": "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUDNN,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1",
    "off": "--xla_gpu_enable_command_buffer=",
}


def worker(mode, dump):
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    import jax_muse_attn as jma

    rng = np.random.default_rng(0)
    R, pages, d = 4, 512, 64
    blocks = R * pages
    kvf = rng.standard_normal((blocks, 2, 16, 2 * d))
    kv = jnp.asarray(kvf, jnp.bfloat16)
    kv8 = jnp.asarray(kvf * 16, jnp.float8_e4m3fn)
    tok = jnp.asarray(rng.uniform(0.03, 0.1, (2, blocks, 2, 16)), jnp.float32)
    # Call i reads caches[i % 3]: (cache, k_scale, v_scale), the scales traced arguments.
    caches = [(kv, None, None), (kv8, jnp.float32(1 / 16), jnp.float32(1 / 32)), (kv8, tok[0], tok[1])]
    table = jnp.asarray(rng.permutation(blocks).reshape(R, pages), jnp.int32)
    lens = jnp.asarray([8192, 5000, 300, 8], jnp.int32)
    q = jnp.asarray(rng.standard_normal((8 * R, 16, d)), jnp.bfloat16)
    n = 16
    # A tree per request (draft t under draft t // 2, depth its bit length - 1) and ragged counts.
    t = np.arange(8)
    tree = np.zeros(8, np.uint32)
    for i in t:
        tree[i] = (tree[(i - 1) // 2] if i else 0) | (1 << i)
    drafts = dict(draft_lens=jnp.asarray([8, 3, 0, 6], jnp.int32), tree_mask=jnp.asarray(np.tile(tree, (R, 1))),
                  draft_depths=jnp.asarray(np.tile(np.floor(np.log2(t + 1)).astype(np.int32), (R, 1))))

    def call(impl, i, q, caches, table, lens, nr, drafts):
        c, ks, vs = caches[i % 3]
        kw = dict(drafts, return_lse=True) if i % 4 == 3 else {}
        return impl(q, c, table, lens, scale=0.125, window=None if i % 2 else 2048, num_reqs=nr, k_scale=ks,
                    v_scale=vs, **kw)

    def chain(q, caches, table, lens, nr, drafts):
        outs = []
        for i in range(n):  # each call feeds the next: one dependent chain, like the layers
            o = call(lambda *a, **k: jma.verify_attention(*a, backend="ffi", **k), i, q, caches, table, lens, nr,
                     drafts)
            outs.append(o)
            q = ((o[0] if isinstance(o, tuple) else o).astype(jnp.float32) * 4.0).astype(jnp.bfloat16)
        return outs

    f = jax.jit(chain)
    args = (q, caches, table, lens, jnp.int32(3), drafts)
    outs = f(*args)
    jax.block_until_ready(outs)
    # Check each link (out, and lse where returned) against the reference fed with the same input.
    qi, bad = q, 0
    for i, o in enumerate(outs):
        want = call(jma.reference.verify_attention, i, qi, caches, table, lens, 3, drafts)
        for g, w in zip(*((x if isinstance(x, tuple) else (x,)) for x in (o, want))):
            g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
            with np.errstate(invalid="ignore"):
                bad += int(np.sum(~((g == w) | (np.abs(g - w) <= 1e-2 + 2e-2 * np.abs(w)))))
        qi = ((o[0] if isinstance(o, tuple) else o).astype(jnp.float32) * 4.0).astype(jnp.bfloat16)
    ts = []
    for _ in range(20):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t0)
    print(f"command buffers {mode:3s}: {n} chained calls, {bad} elements out of tolerance, "
          f"median {np.median(ts) * 1e6 / n:.1f} us per call (wall of the chain / {n})")
    if dump:
        for path in sorted(glob.glob(os.path.join(dump, "*thunk_sequence*"))):
            text = open(path).read()
            if "custom" not in text.lower() and "CustomCall" not in text:
                continue
            lines = [l for l in text.splitlines() if "CommandBuffer" in l or "CustomCall" in l or "custom-call" in l]
            print(f"  {os.path.basename(path)}: {sum('CommandBuffer' in l for l in lines)} command-buffer "
                  f"lines, {sum('CustomCall' in l or 'custom-call' in l for l in lines)} custom-call lines")
            for l in lines[:6]:
                print("   ", l.strip()[:160])
    return bad == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", default="/tmp/muse_cb_dump")
    ap.add_argument("--worker", choices=tuple(FLAGS))
    args = ap.parse_args()
    if args.worker:
        return 0 if worker(args.worker, args.dump if args.worker == "on" else None) else 1
    rc = 0
    for mode, flags in FLAGS.items():
        env = dict(os.environ)
        # Dump only the chain's module (the reference's many small modules would swamp it).
        extra = f" --xla_dump_to={args.dump} --xla_dump_hlo_module_re=.*chain.*" if mode == "on" else ""
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flags + extra).strip()
        rc |= subprocess.run([sys.executable, __file__, "--worker", mode, "--dump", args.dump], env=env).returncode
    print("command_buffer_check:", "OK" if rc == 0 else "FAIL")
    return rc


if __name__ == "__main__":
    sys.exit(main())
