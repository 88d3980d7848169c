"""Probe of XLA's FFI record stage (see probe.cu): builds the probe, registers an execute-only
target and an execute + record target, runs a jitted chain fusion -> probe -> fusion -> ... with
command buffers on (or off), checks every result, and prints the per-step time of each variant and
how often its handlers ran (execute calls far below the steps run: the call was captured into a
command buffer):
  exec        execute only (traced into a child graph, as the product's handler is now)
  rec_pdl0    the record stage, create_launch(uses_pdl=0)
  rec_pdl1    the record stage, create_launch(uses_pdl=1)
Run: python probe.py [--mode on|off] (run as a subprocess per mode: XLA_FLAGS is read at start)."""
import argparse, ctypes, os, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--mode", default=None)
ap.add_argument("--steps", type=int, default=100)
ap.add_argument("--n", type=int, default=1 << 16)
ap.add_argument("--extra-flags", default="")
args = ap.parse_args()
HERE = os.path.dirname(os.path.abspath(__file__))
MODES = {"on": "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1",
         "off": "--xla_gpu_enable_command_buffer="}
if args.mode is None:
    for m in ("on", "off"):
        print(f"=== mode {m} {args.extra_flags}", flush=True)
        cmd = [sys.executable, __file__, "--mode", m, "--steps", str(args.steps), "--n", str(args.n),
               "--extra-flags", args.extra_flags]
        subprocess.run(cmd, check=False)
    sys.exit(0)
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + MODES[args.mode] + " " + args.extra_flags).strip()
import numpy as np
import jax, jax.numpy as jnp

build = tempfile.mkdtemp()
inc = jax.ffi.include_dir()
src = os.path.join(HERE, "probe.cu")
so, cubin = os.path.join(build, "probe.so"), os.path.join(build, "probe.cubin")
for cmd in (["nvcc", "-std=c++17", "-arch=sm_90a", "-w", "-I", inc, "-shared", "-Xcompiler", "-fPIC", "-o", so, src],
            ["nvcc", "-std=c++17", "-arch=sm_90a", "-w", "-I", inc, "-cubin", "-DPROBE_KERNEL_ONLY", "-o", cubin, src]):
    subprocess.run(cmd, check=True)
lib = ctypes.cdll.LoadLibrary(so)
data = open(cubin, "rb").read()
lib.probe_set_cubin(ctypes.c_char_p(data), ctypes.c_int64(len(data)))
lib.probe_record_calls.restype = ctypes.c_int64
cap = lambda f: jax.ffi.pycapsule(f)
jax.ffi.register_ffi_target("probe_exec", cap(lib.ProbeExecute), platform="CUDA")
targets = {"exec": ("probe_exec", 0)}
try:
    jax.ffi.register_ffi_target("probe_rec", {"execute": cap(lib.ProbeExecute), "record": cap(lib.ProbeRecord)},
                                platform="CUDA")
    targets["rec_pdl0"] = ("probe_rec", 0)
    targets["rec_pdl1"] = ("probe_rec", 1)
except Exception as e:  # noqa: BLE001
    print(f"registering a record handler failed: {type(e).__name__}: {e}")
print("jax", jax.__version__, "XLA_FLAGS", os.environ["XLA_FLAGS"], flush=True)

def make(target, pdl, steps):
    def call(x):
        return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(x.shape, x.dtype))(x, uses_pdl=np.int32(pdl))
    @jax.jit
    def chain(x, s):
        for _ in range(steps):
            x = call(x * s)  # a fusion before every call
        return x
    return chain

x0 = jnp.asarray(np.random.default_rng(0).standard_normal(args.n).astype(np.float32))
s = jnp.float32(0.5)
want = np.asarray(x0)
for _ in range(args.steps):
    want = want * np.float32(0.5) + np.float32(1.0)
def per_step_us(f):
    """Host wall time a step: the median of 35 timed runs of the chain (after 5), / steps."""
    ts = []
    for _ in range(40):
        t = time.perf_counter(); f(x0, s).block_until_ready(); ts.append(time.perf_counter() - t)
    return float(np.median(ts[5:])) / args.steps * 1e6

res = {}
for name, (target, pdl) in targets.items():
    try:
        f = make(target, pdl, args.steps)
        c0, u0, e0 = lib.probe_record_calls(0), lib.probe_record_calls(1), lib.probe_record_calls(2)
        got = np.asarray(f(x0, s))
        ok = np.allclose(got, want, rtol=1e-5, atol=1e-5)
        per = per_step_us(f)
        got2 = np.asarray(f(x0 + 0, s))
        ok2 = np.allclose(got2, want, rtol=1e-5, atol=1e-5)
        res[name] = per
        print(f"{name:9s} check {'ok' if ok and ok2 else 'WRONG'}  per step {per:7.3f} us (median of 35, {args.steps} steps)"
              f"  record creates {lib.probe_record_calls(0) - c0} updates {lib.probe_record_calls(1) - u0}"
              f"  execute calls {lib.probe_record_calls(2) - e0} (of {42 * args.steps} steps run)", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"{name:9s} FAILED {type(e).__name__}: {str(e)[:600]}", flush=True)
# again, interleaved, for the spread
for rnd in range(2):
    line = []
    for name, (target, pdl) in targets.items():
        if name not in res: continue
        f = make(target, pdl, args.steps); f(x0, s).block_until_ready()
        line.append(f"{name} {per_step_us(f):.3f}")
    print(f"round {rnd + 2}: " + "  ".join(line), flush=True)
