"""tools/rocm_first_run.py up to the GPU run itself (which needs an AMD GPU): the GPU detection on
described devices, the JUnit counts, the report from a fake benchmark JSON, pytest outcome and
model, and the command's arguments and exit codes with its steps replaced."""

import json
import os
import sys
from types import SimpleNamespace

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import rocm_first_run as fr  # noqa: E402


def dev(platform, kind):
    return SimpleNamespace(platform=platform, device_kind=kind)


@pytest.mark.parametrize("kind,name,spec", [("AMD Instinct MI300X", "MI300X", 5.3),
                                            ("AMD Instinct MI355X", "MI355X", 8.0),
                                            ("AMD Instinct MI250X", None, None)])
def test_detect_known_and_other_gpus(kind, name, spec):
    g = fr.detect_gpu([dev("rocm", kind), dev("rocm", kind)], registered=["ROCM", "cpu"])
    assert (g.name, g.spec_tbps, g.count, g.device_kind) == (name, spec, 2, kind)


def test_detect_gpu_platform_alias():
    g = fr.detect_gpu([dev("gpu", "AMD Instinct MI300X")], registered=["ROCM"])
    assert g.name == "MI300X"


@pytest.mark.parametrize("devices", [[dev("cpu", "cpu")], [dev("gpu", "NVIDIA H100 80GB HBM3")], []])
def test_detect_refuses_without_a_rocm_gpu(devices):
    with pytest.raises(fr.FirstRunError, match="JAX sees no ROCm GPU.*jax-rocm7-plugin"):
        fr.detect_gpu(devices, registered=["ROCM", "cpu"])


def test_detect_refuses_a_build_without_the_rocm_handler():
    with pytest.raises(fr.FirstRunError, match=r"no ROCm handler \(handlers: \['cpu'\]\).*MUSE_ATTN_HIP=ON"):
        fr.detect_gpu([dev("rocm", "AMD Instinct MI300X")], registered=["cpu"])


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.test_gpu" name="test_a" time="0.1"/>
<testcase classname="tests.test_gpu" name="test_b" time="0.1"><failure message="x">boom</failure></testcase>
<testcase classname="tests.test_gpu" name="test_c" time="0.1"><skipped message="no nvcc"/></testcase>
<testcase classname="tests.test_fp8" name="test_d" time="0.1"><error message="setup">e</error></testcase>
<testcase classname="tests.test_fp8" name="test_e" time="0.1"/>
</testsuite></testsuites>"""


def test_parse_junit(tmp_path):
    p = tmp_path / "j.xml"
    p.write_text(JUNIT)
    r = fr.parse_junit(str(p))
    assert (r["passed"], r["failed"], r["errors"], r["skipped"], r["total"]) == (2, 1, 1, 1, 5)
    assert r["failures"] == ["tests.test_gpu::test_b", "tests.test_fp8::test_d"]


def fake_bench(ok=True):
    """The parts of benchmarks/bench.py's NAME.json the report reads."""
    return dict(
        meta=dict(modes={"on": "...", "off": "..."}),
        copy_floor=dict(GBps=4000.0, source="jax_copy[on]"),
        floors={"noop_call[on]": dict(per_call_us=9.0), "two_dependent_kernels_device[on]": dict(per_call_us=6.0)},
        all_checks_passed=ok, errors=[] if ok else ["[on] full2k-r1: check failed"],
        summary=[
            dict(config="full2k-r1", kv_bytes=1_048_576, status="ok" if ok else "FAIL", ours_on_us=12.0,
                 ours_dev_on_us=10.0, ours_off_us=30.0, launch_plan=dict(split_kernel="per_tile", num_splits=32)),
            dict(config="full128k-r16", kv_bytes=1_073_741_824, status="ok", ours_on_us=400.0,
                 ours_dev_on_us=None, ours_off_us=420.0, launch_plan=dict(split_kernel="per_tile", num_splits=28)),
        ])


def fake_model():
    return dict(note="MODEL, not a measurement: ...", roofline=dict(MI300X=dict(
        launch_us=3.9, hbm_fraction=0.8, rows=[dict(config="full2k-r1", model_us=12.5, bound="compute"),
                                               dict(config="full128k-r16", model_us=320.0, bound="memory")])))


TESTS_OK = dict(passed=100, failed=0, errors=0, skipped=3, total=103, failures=[])


def test_report_on_a_known_gpu():
    gpu = fr.GpuInfo("rocm", "AMD Instinct MI300X", 1, "MI300X", 5.3)
    rep = fr.build_report(gpu, TESTS_OK, fake_bench(), fake_model())
    assert rep["ok"] and rep["rate_source"].startswith("MI300X HBM spec 5.3")
    a, b = rep["rows"]
    assert a["us_device"] == 10.0 and a["us_off"] == 30.0
    assert a["pct_hbm"] == pytest.approx(100 * 1_048_576 / 10e-6 / 5.3e12)
    assert a["measured_over_model"] == pytest.approx(10.0 / 12.5)
    # No device-clock figure: the host's is used.
    assert b["pct_hbm"] == pytest.approx(100 * 1_073_741_824 / 400e-6 / 5.3e12)
    assert b["measured_over_model"] == pytest.approx(400 / 320)
    md = fr.render_markdown(rep)
    assert "Overall: **PASS**" in md and "100 passed, 0 failed, 0 errors, 3 skipped of 103" in md
    assert "a MODEL from the ISA, not a measurement" in md
    assert "| full2k-r1 | 1.0 | ok | per_tile (32) | 10.0 (12.0 / 30.0) | 2 | 12.5 (compute) | 0.80 |" in md
    assert "| full128k-r16 | 1073.7 | ok | per_tile (28) | – (400.0 / 420.0) | 51 | 320.0 (memory) | 1.25 |" in md
    # The kernel boundary: half the pair, against the fastest call (full2k-r1, 10 us on the device).
    assert rep["launches"] == dict(pair_us=6.0, boundary_us=3.0, fastest_us=10.0, fastest_config="full2k-r1",
                                   boundary_share=0.3)
    assert "6.00 µs a pair, about 3.00 µs a kernel boundary" in md
    assert "30 % of the fastest call here (full2k-r1, 10.0 µs)" in md


def test_report_without_the_kernel_pair_has_no_launch_section():
    bench = fake_bench()
    del bench["floors"]["two_dependent_kernels_device[on]"]
    rep = fr.build_report(fr.GpuInfo("rocm", "AMD Instinct MI300X", 1, "MI300X", 5.3), TESTS_OK, bench, None)
    assert rep["launches"]["boundary_us"] is None
    assert "One launch or two" not in fr.render_markdown(rep)


def test_report_on_another_gpu_uses_the_copy_rate_and_has_no_model():
    gpu = fr.GpuInfo("rocm", "AMD Instinct MI250X", 1, None, None)
    rep = fr.build_report(gpu, TESTS_OK, fake_bench(), fake_model())
    assert rep["rate_source"].startswith("measured copy 4000 GB/s")
    assert rep["rows"][0]["pct_hbm"] == pytest.approx(100 * 1_048_576 / 10e-6 / 4e12)
    assert rep["rows"][0]["model_us"] is None and not rep["model"]["available"]
    assert "roofline is not available for this GPU" in fr.render_markdown(rep)


def test_report_fails_on_a_failed_test_or_check():
    gpu = fr.GpuInfo("rocm", "AMD Instinct MI355X", 1, "MI355X", 8.0)
    bad_tests = dict(TESTS_OK, failed=1, failures=["tests.test_gpu::test_b"])
    rep = fr.build_report(gpu, bad_tests, fake_bench(), None)
    md = fr.render_markdown(rep)
    assert not rep["ok"] and "Overall: **FAIL**" in md and "- FAILED tests.test_gpu::test_b" in md
    rep = fr.build_report(gpu, TESTS_OK, fake_bench(ok=False), None)
    assert not rep["ok"] and "SOME FAILED" in fr.render_markdown(rep)
    assert fr.build_report(gpu, TESTS_OK, None, None)["ok"]  # --skip-bench
    assert not fr.build_report(gpu, None, None, None)["ok"]   # nothing ran


def _swa_bench():
    bench = fake_bench()
    bench["summary"].append(dict(config="swa32k-r16", kv_bytes=16_777_216, status="ok", ours_on_us=20.0,
                                 ours_dev_on_us=18.0, ours_off_us=40.0,
                                 launch_plan=dict(split_kernel="per_tile_cached", num_splits=4)))
    nontemporal = dict(all_checks_passed=True, meta=dict(modes={"on": "..."}), errors=[], summary=[
        dict(config="swa32k-r16", kv_bytes=16_777_216, status="ok", ours_on_us=22.0, ours_dev_on_us=20.0,
             launch_plan=dict(split_kernel="per_tile", num_splits=4))])
    return bench, nontemporal


def test_report_sets_a_windows_cached_calls_beside_nontemporal_ones():
    gpu = fr.GpuInfo("rocm", "AMD Instinct MI355X", 1, "MI355X", 8.0)
    bench, nontemporal = _swa_bench()
    assert fr.cached_configs(bench) == ["swa32k-r16"] and fr.cached_configs(fake_bench()) == []
    rep = fr.build_report(gpu, TESTS_OK, bench, None, nontemporal)
    assert rep["ok"] and rep["cache_policy"] == [dict(
        config="swa32k-r16", cached_us=18.0, nontemporal_us=20.0, nontemporal_kernel="per_tile", status="ok",
        cached_over_nontemporal=pytest.approx(0.9))]
    md = fr.render_markdown(rep)
    assert "## A window's K/V through the caches" in md and "| swa32k-r16 | 18.0 | 20.0 | 0.900 |" in md
    assert not fr.build_report(gpu, TESTS_OK, bench, None, dict(nontemporal, all_checks_passed=False))["ok"]
    assert "through the caches" not in fr.render_markdown(fr.build_report(gpu, TESTS_OK, fake_bench(), None))


def test_the_nontemporal_run_forces_per_tile_on_the_cached_configs(tmp_path, monkeypatch):
    seen = []

    def fake_run(cmd, cwd, env):
        seen.append((cmd, env))
        (tmp_path / (fr.POLICY_BENCH_NAME + ".json")).write_text("{}")

    monkeypatch.setattr(fr.subprocess, "run", fake_run)
    assert fr.run_policy_bench(str(tmp_path), []) is None and not seen
    path = fr.run_policy_bench(str(tmp_path), ["swa32k-r16", "swa32k-r1-fp8"])
    assert path == str(tmp_path / (fr.POLICY_BENCH_NAME + ".json"))
    (cmd, env), = seen
    assert env["MUSE_ATTN_LAUNCH"] == "split_kernel=per_tile"
    assert cmd[cmd.index("--configs") + 1] == "swa32k-r16,swa32k-r1-fp8" and "--no-flashinfer" in cmd


def test_arguments():
    a = fr.build_parser().parse_args(["--out", "x", "--configs", "full2k-*", "--quick", "--pytest-args", "-k gpu"])
    assert (a.out, a.configs, a.quick, a.pytest_args) == ("x", "full2k-*", True, "-k gpu")
    with pytest.raises(SystemExit):
        fr.main(["--skip-tests", "--skip-bench"])
    with pytest.raises(SystemExit):
        fr.main(["--no-such-option"])


def test_main_without_a_gpu_exits_2(tmp_path, monkeypatch, capsys):
    def no_gpu():
        raise fr.FirstRunError("JAX sees no ROCm GPU (its devices: cpu:cpu)")

    monkeypatch.setattr(fr, "detect_gpu", no_gpu)
    assert fr.main(["--out", str(tmp_path)]) == 2
    assert "JAX sees no ROCm GPU" in capsys.readouterr().err


def test_main_end_to_end_with_the_gpu_steps_replaced(tmp_path, monkeypatch):
    gpu = fr.GpuInfo("rocm", "AMD Instinct MI300X", 8, "MI300X", 5.3)
    bench_path = tmp_path / "bench.json"
    bench_path.write_text(json.dumps(fake_bench()))
    model_path = tmp_path / "model.json"
    model_path.write_text(json.dumps(fake_model()))
    calls = []
    monkeypatch.setattr(fr, "detect_gpu", lambda: gpu)
    monkeypatch.setattr(fr, "run_tests", lambda out, extra: calls.append(("tests", list(extra))) or TESTS_OK)
    monkeypatch.setattr(fr, "run_bench", lambda out, configs, quick, kv: calls.append(("bench", configs, quick, kv))
                        or str(bench_path))
    rc = fr.main(["--out", str(tmp_path), "--configs", "full2k-r1", "--model-json", str(model_path),
                  "--kv-dtypes", "bf16,fp8",
                  "--pytest-args", "-k 'gpu and not slow'"])
    assert rc == 0
    assert calls == [("tests", ["-k", "gpu and not slow"]), ("bench", "full2k-r1", False, "bf16,fp8")]
    rep = json.loads((tmp_path / "rocm_first_run.json").read_text())
    assert rep["ok"] and rep["rows"][0]["measured_over_model"] == pytest.approx(0.8)
    assert "Overall: **PASS**" in (tmp_path / "rocm_first_run.md").read_text()
