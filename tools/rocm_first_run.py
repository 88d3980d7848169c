"""The first run on an AMD GPU (MI300X / MI355X), in one command, after
`pip install -e ".[test]" -C cmake.define.MUSE_ATTN_HIP=ON`:

    python tools/rocm_first_run.py [--out DIR] [--configs PAT,...] [--quick] [--kv-dtypes bf16,fp8] [--skip-tests]
                                   [--skip-bench] [--model-json PATH] [--pytest-args "..."]

1. checks that JAX sees a ROCm GPU and that this build has the ROCm handler (a clear error and
   exit 2 if not);
2. runs the test suite on it (pytest tests/, JAX's default backend the GPU), counting passed,
   failed, errors and skipped from its JUnit XML;
3. runs the benchmark (benchmarks/bench.py --modes on,off; no FlashInfer on AMD, the bench says
   so and goes on);
4. computes the AMD speed model (tools/amd_model.py: a MODEL from the compiled kernels' ISA) or
   reads --model-json;
5. writes DIR/rocm_first_run.md and .json: correctness, µs a config, % of the GPU's HBM spec
   rate (MI300X 5.3 TB/s, MI355X 8 TB/s; another GPU: the bench's measured copy rate), the
   model's µs beside each measured figure with measured / model, and what a kernel boundary
   costs against the fastest call (the bench's pair of dependent kernels: the figure the
   design's two-launch decision waits for), and for the calls whose plan read a window's K/V
   through the caches (split kernel per_tile_cached), the same calls with nontemporal loads
   (MUSE_ATTN_LAUNCH=split_kernel=per_tile): the figure the AMD table's cache_window_kv waits for.

Exit 0 when every test passed and every benchmarked output was checked correct, else 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
BENCH_NAME = "bench"
POLICY_BENCH_NAME = "bench_nontemporal"
REPORT_NAME = "rocm_first_run"


class FirstRunError(RuntimeError):
    """Something the run needs is missing; the message says what and how to get it."""


# GPUs the report knows: (pattern on JAX's device_kind, name, HBM spec TB/s) from AMD's spec
# sheets; the model (tools/amd_model.py GPUS) knows the same two.
KNOWN_GPUS = ((re.compile(r"MI300X", re.I), "MI300X", 5.3),
              (re.compile(r"MI355X", re.I), "MI355X", 8.0))


@dataclasses.dataclass
class GpuInfo:
    platform: str
    device_kind: str
    count: int
    name: Optional[str]  # MI300X / MI355X, or None for another GPU
    spec_tbps: Optional[float]


def _is_rocm_gpu(device) -> bool:
    """A JAX device of the ROCm backend: platform "rocm", or "gpu" with an AMD device kind."""
    platform = str(getattr(device, "platform", "")).lower()
    kind = str(getattr(device, "device_kind", "")).lower()
    return platform == "rocm" or (platform == "gpu" and any(w in kind for w in ("amd", "instinct", "gfx")))


def detect_gpu(devices=None, registered=None) -> GpuInfo:
    """The ROCm GPU JAX sees (devices: jax.devices(), registered: the handlers this build has);
    FirstRunError naming what is missing otherwise."""
    if devices is None:
        try:
            import jax
        except ImportError as e:
            raise FirstRunError(f"JAX is not importable ({e}); install it with its ROCm plugin: "
                                "pip install jax==X jaxlib==X jax-rocm7-plugin==X jax-rocm7-pjrt==X "
                                "(README, Backends and building)") from e
        try:
            devices = jax.devices()
        except RuntimeError as e:
            raise FirstRunError(f"JAX finds no device ({e})") from e
    gpus = [d for d in devices if _is_rocm_gpu(d)]
    if not gpus:
        kinds = sorted({f"{getattr(d, 'platform', '?')}:{getattr(d, 'device_kind', '?')}" for d in devices})
        raise FirstRunError(
            f"JAX sees no ROCm GPU (its devices: {', '.join(kinds) or 'none'}). Install JAX's ROCm plugin "
            "pair of your jaxlib's version (pip install jax-rocm7-plugin==X jax-rocm7-pjrt==X), check "
            "that rocminfo lists the GPU and that HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES do not hide it")
    if registered is None:
        try:
            import jax_muse_attn
        except ImportError as e:
            raise FirstRunError(f"jax_muse_attn is not importable ({e}): pip install -e \".[test]\" "
                                "-C cmake.define.MUSE_ATTN_HIP=ON") from e
        registered = jax_muse_attn.registered_platforms()
    if "ROCM" not in registered:
        raise FirstRunError(f"this build of jax_muse_attn has no ROCm handler (handlers: {sorted(registered)}): "
                            "rm -rf _skbuild, then pip install -e \".[test]\" -C cmake.define.MUSE_ATTN_HIP=ON "
                            "(add -C cmake.define.MUSE_ATTN_CUDA=OFF where nvcc is installed too)")
    kind = str(getattr(gpus[0], "device_kind", "unknown"))
    name, spec = next(((n, t) for pat, n, t in KNOWN_GPUS if pat.search(kind)), (None, None))
    return GpuInfo(str(gpus[0].platform), kind, len(gpus), name, spec)


# --------------------------------------------------------------------------- steps


def parse_junit(path: str) -> dict:
    """{passed, failed, errors, skipped, total, failures: [test ids]} from pytest's JUnit XML."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    out = dict(passed=0, failed=0, errors=0, skipped=0, total=0, failures=[])
    for s in suites:
        for case in s.iter("testcase"):
            out["total"] += 1
            tid = f"{case.get('classname', '')}::{case.get('name', '')}"
            if case.find("failure") is not None:
                out["failed"] += 1
                out["failures"].append(tid)
            elif case.find("error") is not None:
                out["errors"] += 1
                out["failures"].append(tid)
            elif case.find("skipped") is not None:
                out["skipped"] += 1
            else:
                out["passed"] += 1
    return out


def run_tests(out_dir: str, extra: Sequence[str] = ()) -> dict:
    xml = os.path.join(out_dir, "pytest.xml")
    log = os.path.join(out_dir, "pytest.log")
    cmd = [sys.executable, "-m", "pytest", "tests", "-q", "-rfE", "-p", "no:cacheprovider",
           f"--junitxml={xml}", *extra]
    print(f"rocm_first_run: {' '.join(cmd)} (log: {log})", flush=True)
    with open(log, "w") as f:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    if not os.path.exists(xml):
        return dict(passed=0, failed=0, errors=1, skipped=0, total=0, returncode=rc,
                    failures=[f"pytest wrote no report (exit {rc}); see {log}"], log=log)
    return dict(parse_junit(xml), returncode=rc, log=log)


def run_bench(out_dir: str, configs: Optional[str], quick: bool, kv_dtypes: str = "bf16") -> str:
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "bench.py"), "--modes", "on,off", "--out", out_dir,
           "--name", BENCH_NAME, "--kv-dtypes", kv_dtypes]
    if configs:
        cmd += ["--configs", configs]
    if quick:
        cmd += ["--quick"]
    print(f"rocm_first_run: {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, cwd=ROOT)  # its exit code is its checks', read from its JSON
    path = os.path.join(out_dir, BENCH_NAME + ".json")
    if not os.path.exists(path):
        raise FirstRunError(f"the benchmark wrote no {path}; see its output above")
    return path


def cached_summaries(bench: Optional[dict]) -> List[dict]:
    """The bench's calls whose plan read a window's K/V through the caches (per_tile_cached)."""
    return [s for s in (bench or {}).get("summary", [])
            if (s.get("launch_plan") or {}).get("split_kernel") == "per_tile_cached"]


def cached_configs(bench: Optional[dict]) -> List[str]:
    return [s["config"] for s in cached_summaries(bench)]


def run_policy_bench(out_dir: str, configs: Sequence[str]) -> Optional[str]:
    """The configs again with nontemporal K/V loads (split kernel per_tile), command buffers on."""
    if not configs:
        return None
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "bench.py"), "--modes", "on", "--out", out_dir,
           "--name", POLICY_BENCH_NAME, "--configs", ",".join(configs), "--no-flashinfer"]
    env = dict(os.environ, MUSE_ATTN_LAUNCH="split_kernel=per_tile")
    print(f"rocm_first_run: MUSE_ATTN_LAUNCH=split_kernel=per_tile {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, cwd=ROOT, env=env)
    path = os.path.join(out_dir, POLICY_BENCH_NAME + ".json")
    return path if os.path.exists(path) else None


def cache_policy_rows(bench: Optional[dict], nontemporal: Optional[dict], first: str) -> List[dict]:
    """Each per_tile_cached call of the bench (its first mode's time) beside the same call with
    nontemporal loads."""
    other = {s["config"]: s for s in (nontemporal or {}).get("summary", [])}
    rows = []
    for s in cached_summaries(bench):
        n = other.get(s["config"], {})
        cached = s.get(f"ours_dev_{first}_us") or s.get(f"ours_{first}_us")
        nt = n.get("ours_dev_on_us") or n.get("ours_on_us")
        rows.append(dict(config=s["config"], cached_us=cached, nontemporal_us=nt,
                         nontemporal_kernel=(n.get("launch_plan") or {}).get("split_kernel"),
                         status=n.get("status"), cached_over_nontemporal=cached / nt if cached and nt else None))
    return rows


def run_model(out_dir: str) -> Optional[dict]:
    """tools/amd_model.py's result (also written to DIR/amd_model.json), or None where it cannot
    run here (no HIP clang: ROCm's /opt/rocm/llvm/bin/clang++ is one)."""
    import amd_model

    try:
        result = amd_model.run()
    except Exception as e:  # the report says why the model is missing; the run goes on
        print(f"rocm_first_run: the model did not run: {e}", flush=True)
        return None
    if not result["archs"]:
        print(f"rocm_first_run: the model did not run: {result['skipped']}", flush=True)
        return None
    with open(os.path.join(out_dir, "amd_model.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


# --------------------------------------------------------------------------- report


def _fmt(x, nd=1):
    return "–" if x is None else f"{x:.{nd}f}"


def build_report(gpu: GpuInfo, tests: Optional[dict], bench: Optional[dict], model: Optional[dict],
                 nontemporal: Optional[dict] = None) -> dict:
    """The report's figures (what the JSON holds; render_markdown draws them)."""
    rows, rate, rate_source = [], None, None
    if gpu.spec_tbps:
        rate, rate_source = gpu.spec_tbps * 1e12, f"{gpu.name} HBM spec {gpu.spec_tbps} TB/s"
    elif bench and (bench.get("copy_floor") or {}).get("GBps"):
        cf = bench["copy_floor"]
        rate, rate_source = cf["GBps"] * 1e9, f"measured copy {cf['GBps']:.0f} GB/s ({cf.get('source')})"
    modelled = {}
    if model and model.get("roofline") and gpu.name in model["roofline"]:
        modelled = {r["config"]: r for r in model["roofline"][gpu.name]["rows"]}
    modes = list((bench or {}).get("meta", {}).get("modes", {})) or ["on"]
    first = modes[0]
    for s in (bench or {}).get("summary", []):
        dev, host = s.get(f"ours_dev_{first}_us"), s.get(f"ours_{first}_us")
        us = dev if dev else host
        m = modelled.get(s["config"])
        plan = s.get("launch_plan") or {}
        rows.append(dict(
            config=s["config"], kv_bytes=s.get("kv_bytes"), status=s.get("status"),
            us_device=dev, us_host=host, us_off=s.get(f"ours_{modes[1]}_us") if len(modes) > 1 else None,
            pct_hbm=(100 * s["kv_bytes"] / (us * 1e-6) / rate if us and rate and s.get("kv_bytes") else None),
            split_kernel=plan.get("split_kernel"), num_splits=plan.get("num_splits"),
            model_us=m["model_us"] if m else None, model_bound=m["bound"] if m else None,
            measured_over_model=(us / m["model_us"] if us and m and m.get("model_us") else None)))
    ok_tests = tests is not None and tests["failed"] == 0 and tests["errors"] == 0
    ok_bench = (bench is not None and bool(bench.get("all_checks_passed"))
                and (nontemporal is None or bool(nontemporal.get("all_checks_passed"))))
    floors = (bench or {}).get("floors", {})
    # The figure the one-launch-or-two decision waits for: a kernel boundary, from the bench's pair
    # of dependent kernels, against the fastest call measured.
    pair = (floors.get(f"two_dependent_kernels_device[{first}]") or {}).get("per_call_us")
    timed = [(r["us_device"] or r["us_host"], r["config"]) for r in rows if r["us_device"] or r["us_host"]]
    fastest = min(timed) if timed else None
    launches = dict(pair_us=pair, boundary_us=pair / 2 if pair else None,
                    fastest_us=fastest[0] if fastest else None, fastest_config=fastest[1] if fastest else None,
                    boundary_share=(pair / 2 / fastest[0]) if pair and fastest else None)
    return dict(
        when=datetime.datetime.now().isoformat(timespec="seconds"), gpu=dataclasses.asdict(gpu),
        tests=tests, bench_checks_passed=ok_bench if bench is not None else None,
        bench_errors=(bench or {}).get("errors", []), rate_source=rate_source, rows=rows,
        copy_floor=(bench or {}).get("copy_floor"), floors=floors, launches=launches,
        cache_policy=cache_policy_rows(bench, nontemporal, first),
        model=dict(available=bool(modelled), note=(model or {}).get("note"),
                   gpu=gpu.name if modelled else None,
                   launch_us=model["roofline"][gpu.name]["launch_us"] if modelled else None,
                   hbm_fraction=model["roofline"][gpu.name]["hbm_fraction"] if modelled else None),
        ok=bool(ok_tests and (ok_bench or bench is None) and (tests is not None or bench is not None)))


def render_markdown(rep: dict) -> str:
    g, t = rep["gpu"], rep["tests"]
    lines = [f"# jax_muse_attn on {g['device_kind']} ({g['count']} visible, JAX platform {g['platform']})", "",
             f"Run {rep['when']}. Overall: **{'PASS' if rep['ok'] else 'FAIL'}**.", "", "## Correctness", ""]
    if t is None:
        lines.append("Test suite not run (--skip-tests).")
    else:
        lines.append(f"Test suite (pytest tests/ on the GPU): {t['passed']} passed, {t['failed']} failed, "
                     f"{t['errors']} errors, {t['skipped']} skipped of {t['total']}"
                     + (f" (log: {t.get('log')})" if t.get("log") else "") + ".")
        lines += [f"- FAILED {x}" for x in t["failures"][:50]]
    if rep["bench_checks_passed"] is None:
        lines.append("Benchmark not run (--skip-bench).")
    else:
        lines.append(f"Benchmark outputs checked against the reference before timing: "
                     f"{'all passed' if rep['bench_checks_passed'] else 'SOME FAILED (status column)'}.")
        lines += [f"- {e}" for e in rep["bench_errors"][:20]]
    if rep["rows"]:
        m = rep["model"]
        lines += ["", "## Speed", "",
                  f"µs a call (the device's clock where the bench has it, else the host's; command buffers "
                  f"on), % of {rep['rate_source'] or 'no reference rate'}; model: tools/amd_model.py's "
                  + (f"roofline for {m['gpu']} (a MODEL from the ISA, not a measurement: "
                     f"{m['hbm_fraction']} of the HBM rate, {m['launch_us']} µs a launch)" if m["available"]
                     else "roofline is not available for this GPU") + ".", "",
                  "| config | KV MB | status | split kernel (splits) | µs dev (host / off) | % HBM | model µs (bound) "
                  "| measured / model |", "|---|---|---|---|---|---|---|---|"]
        for r in rep["rows"]:
            lines.append(
                f"| {r['config']} | {_fmt((r['kv_bytes'] or 0) / 1e6)} | {r['status']} | "
                f"{r['split_kernel'] or '–'} ({r['num_splits'] or '–'}) | {_fmt(r['us_device'])} "
                f"({_fmt(r['us_host'])} / {_fmt(r['us_off'])}) | {_fmt(r['pct_hbm'], 0)} | "
                f"{_fmt(r['model_us'])}{' (' + r['model_bound'] + ')' if r['model_bound'] else ''} | "
                f"{_fmt(r['measured_over_model'], 2)} |")
        cf = rep.get("copy_floor") or {}
        if cf.get("GBps"):
            lines += ["", f"Measured copy rate: {cf['GBps']:.0f} GB/s ({cf.get('source')})."]
    la = rep.get("launches") or {}
    if la.get("pair_us"):
        lines += ["", "## One launch or two", "",
                  f"Two dependent kernels back to back, each as short as a kernel gets (the bench's "
                  f"two_dependent_kernels_device floor, command buffers on): {_fmt(la['pair_us'], 2)} µs a pair, "
                  f"about {_fmt(la['boundary_us'], 2)} µs a kernel boundary. A call is two launches (split, then "
                  f"merge; docs/DESIGN.md, \"One launch or two on AMD\"): one launch would save about one "
                  f"boundary"
                  + (f", {_fmt(100 * la['boundary_share'], 0)} % of the fastest call here ({la['fastest_config']}, "
                     f"{_fmt(la['fastest_us'])} µs)" if la.get("boundary_share") else "")
                  + ", less what its fences and counters would cost: the figure that decision waits for."]
    cp = rep.get("cache_policy") or []
    if cp:
        lines += ["", "## A window's K/V through the caches", "",
                  "The calls whose plan read a window's K/V with cached loads (split kernel per_tile_cached, "
                  "the AMD table's cache_window_kv) beside the same calls with nontemporal loads "
                  "(MUSE_ATTN_LAUNCH=split_kernel=per_tile), µs, command buffers on. Below 1 in the last column: "
                  "cached pays; above: set cache_window_kv false for this target (ffi/gpu/amd_targets.h).", "",
                  "| config | cached µs | nontemporal µs | cached / nontemporal |", "|---|---|---|---|"]
        for r in cp:
            lines.append(f"| {r['config']} | {_fmt(r['cached_us'])} | {_fmt(r['nontemporal_us'])} | "
                         f"{_fmt(r['cached_over_nontemporal'], 3)} |")
    return "\n".join(lines) + "\n"


def write_report(out_dir: str, rep: dict) -> str:
    md = os.path.join(out_dir, REPORT_NAME + ".md")
    with open(md, "w") as f:
        f.write(render_markdown(rep))
    with open(os.path.join(out_dir, REPORT_NAME + ".json"), "w") as f:
        json.dump(rep, f, indent=1)
    return md


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python tools/rocm_first_run.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "rocm_first_run"), help="output folder")
    ap.add_argument("--configs", default=None, help="the bench's --configs (default: its whole grid)")
    ap.add_argument("--quick", action="store_true", help="the bench's --quick grid")
    ap.add_argument("--kv-dtypes", default="bf16", help="the bench's --kv-dtypes: bf16, or bf16,fp8")
    ap.add_argument("--skip-tests", action="store_true", help="no test suite")
    ap.add_argument("--skip-bench", action="store_true", help="no benchmark")
    ap.add_argument("--model-json", default=None, help="tools/amd_model.py --json output to use")
    ap.add_argument("--pytest-args", default="", help="extra pytest arguments, one string")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    if a.skip_tests and a.skip_bench:
        build_parser().error("--skip-tests and --skip-bench leave nothing to run")
    os.makedirs(a.out, exist_ok=True)
    try:
        gpu = detect_gpu()
        print(f"rocm_first_run: {gpu.count} x {gpu.device_kind} ({gpu.name or 'not a GPU the model knows'})",
              flush=True)
        tests = None if a.skip_tests else run_tests(a.out, shlex.split(a.pytest_args))
        bench = nontemporal = None
        if not a.skip_bench:
            with open(run_bench(a.out, a.configs, a.quick, a.kv_dtypes)) as f:
                bench = json.load(f)
            policy = run_policy_bench(a.out, cached_configs(bench))
            if policy:
                with open(policy) as f:
                    nontemporal = json.load(f)
    except FirstRunError as e:
        print(f"rocm_first_run: {e}", file=sys.stderr)
        return 2
    if a.model_json:
        with open(a.model_json) as f:
            model = json.load(f)
    else:
        model = run_model(a.out)
    rep = build_report(gpu, tests, bench, model, nontemporal)
    path = write_report(a.out, rep)
    print(render_markdown(rep))
    print(f"rocm_first_run: wrote {path} and {REPORT_NAME}.json")
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
