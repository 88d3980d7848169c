"""Does the bench's L2 flush leave the call cold? One call on the device clock (bench's
cold_bracketed / cold_device_time) after flushes of several sizes, and with no flush (hot):
if the flush evicts the KV, the figure is the same for every flush size and above the hot one.

    python scripts/cold_flush_check.py [config ...]      (default: full2k-r1 full8k-r4)

Prints one line a (config, flush) and writes them to $OUT/cold_flush_check.txt when OUT is set.
Run as a script, it sets the bench's command-buffer flags ("on" mode) when XLA_FLAGS is unset,
dumps the bracketed jit's thunk sequence and prints its top level after XLA's thunk passes: one
kCommandBuffer holding the flushes, the clock reads and the calls means the brackets time the
call inside one CUDA graph, as the bench assumes.
"""
import glob
import os
import re
import sys
import tempfile

import jax
import jax.numpy as jnp

import jax_muse_attn
from jax_muse_attn import bench

FLUSHES_MIB = (64, 256, 1024)  # the bench's JAX flush is 256 MiB; the H200's L2 is 50 MiB
BRACKETS, REPEATS = 10, 10


def main(names):
    out_path = os.path.join(os.environ["OUT"], "cold_flush_check.txt") if os.environ.get("OUT") else None
    lines = []

    def emit(line):
        print(line, flush=True)
        lines.append(line)
        if out_path:
            with open(out_path, "w") as f:
                f.write("\n".join(lines) + "\n")

    emit(f"device {jax.devices()[0].device_kind}; {BRACKETS} brackets x {REPEATS} repeats; us")
    for name in names:
        cfg = bench.parse_config(name)
        q, kv, bt, sl = bench.jax_inputs(cfg)

        def ours(x, kv, bt, sl, w=cfg.window):
            return jax_muse_attn.verify_attention(x, kv, bt, sl, scale=bench.SCALE, window=w, backend="ffi")

        for mib in FLUSHES_MIB + (0,):
            buf = jnp.ones(((mib or 1) << 20) // 4, jnp.float32)
            flush = mib > 0
            r = bench.cold_device_time(bench.cold_bracketed(ours, BRACKETS, True, flush=flush),
                                       bench.cold_bracketed(ours, BRACKETS, False, flush=flush),
                                       (q, buf, kv, bt, sl), REPEATS, mib << 20)
            s = sorted(r["call_bracket_us"])
            emit(f"{name} flush {mib:5d} MiB: call {r['per_call_us']:.2f} (empty bracket "
                 f"{r['bracket_us']:.2f}, call bracket p10 {s[len(s) // 10]:.2f} p90 {s[9 * len(s) // 10]:.2f})"
                 + ("" if flush else "  <- no flush: hot"))
            del buf


def thunk_summary(dump_dir):
    """The thunks at column 0 of each dumped bracketed jit (module jit_f) after XLA's thunk
    passes: [(file name, [kinds]), ...]."""
    found = []
    for path in sorted(glob.glob(os.path.join(dump_dir, "*.jit_f.thunk_sequence_after_thunk_passes.txt"))):
        # Entries are "NNN: kKind ..."; those at column 0 are counted (the raw file is printed
        # too: how XLA marks the command buffer's nested thunks is read from it, not assumed).
        kinds = [m.group(1) for m in re.finditer(r"^\d+: (k\w+)", open(path).read(), re.M)]
        found.append((os.path.basename(path), kinds))
    return found


if __name__ == "__main__":
    dump = None
    if "XLA_FLAGS" not in os.environ:
        dump = tempfile.mkdtemp(prefix="cold_flush_dump_")  # this run's modules only
        os.environ["XLA_FLAGS"] = (bench.MODES["on"] + f" --xla_dump_to={dump}"
                                   " --xla_dump_hlo_module_re=jit_f")
    main(sys.argv[1:] or ["full2k-r1", "full8k-r4"])
    if dump:
        for i, (name, kinds) in enumerate(thunk_summary(dump)):
            print(f"{name}: {len(kinds)} thunks at column 0: "
                  + ", ".join(f"{k} x{kinds.count(k)}" for k in dict.fromkeys(kinds)))
            if i == 0:  # the first module's dump as it is
                print("".join(open(os.path.join(dump, name)).readlines()[:40]))
