"""The benchmark (benchmarks/bench.py) on this machine's backend: tiny runs end to end, its data,
its budget and the record of what it measured."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import bench

SMALL = ["--repeats", "2", "--chain", "4", "--no-flashinfer"]


def test_bench_smoke(tmp_path, monkeypatch):
    """One config in both command-buffer modes, with the launch override and a pinned split count
    that a design note would re-measure with: checked, timed on both clocks, cold, recorded, and
    rendered again from its JSON."""
    import jax
    import jax.numpy as jnp

    import jax_muse_attn

    monkeypatch.setenv("MUSE_ATTN_LAUNCH", "merge_pdl=0")
    # Three repeats: the median of two is their mean, which one stall of a loaded CPU turns negative.
    rc = bench.main(["--configs", "full1k-r1", "--num-splits", "3", "--out", str(tmp_path), "--name", "smoke",
                     *SMALL, "--repeats", "3"])
    out = json.loads((tmp_path / "smoke.json").read_text())
    assert rc == 0 and out["all_checks_passed"] is True
    assert [c["name"] for c in out["configs"]] == ["full1k-r1"]
    assert set(out["workers"]) == {"on", "off", "torch"}
    (row,) = out["summary"]
    assert row["status"] == "ok"
    for mode in ("on", "off"):
        rec = out["workers"][mode]["configs"]["full1k-r1"]
        assert row[f"check_{mode}"]["ok"] and row[f"check_{mode}"]["timed_equals_checked"] is True
        assert row[f"check_{mode}"]["outputs_checked"] >= 1 + rec["ours"]["n"]
        assert rec["ours"]["n"] >= 4 and row[f"ours_{mode}_us"] > 0
        assert out["workers"][mode]["device_clock"] is True  # the CPU handler of the clock here
        assert len(rec["ours_device"]["dN_s"]) == 3 and min(rec["ours_device"]["dN_s"]) > 0
        assert out["workers"][mode]["launch_override"] == "merge_pdl=0"
    # Cold, by the first mode's worker only: every bracket of every repeat (4 a jit, 3 repeats),
    # those with the call longer than those without (a CPU call of 1k keys outlasts a clock read).
    cold = out["workers"]["on"]["configs"]["full1k-r1"]["ours_cold_device"]
    assert len(cold["call_bracket_us"]) == len(cold["empty_bracket_us"]) == 4 * 3 == cold["n"]
    assert min(cold["call_bracket_us"]) > max(cold["empty_bracket_us"])
    assert row["ours_cold_dev_us"] == cold["per_call_us"] > 0
    assert "ours_cold_device" not in out["workers"]["off"]["configs"]["full1k-r1"]
    assert row["reference_us"] > 0
    # The plan recorded is the library's for these shapes, the pinned count and the override.
    cfg = bench.parse_config("full1k-r1")
    sds = jax.ShapeDtypeStruct
    want = jax_muse_attn.launch_plan(sds((8, 16, 64), jnp.bfloat16), sds((cfg.blocks, 2, 16, 128), jnp.bfloat16),
                                     sds((1, cfg.pages), jnp.int32), num_splits=3)
    assert row["launch_plan"] == want and row["num_splits"] == 3
    md = (tmp_path / "smoke.md").read_text()
    assert "MUSE_ATTN_LAUNCH=merge_pdl=0, --num-splits 3" in md.split("\n")[0]
    header, _, first = md.split("\n")[2:5]
    cells = dict(zip([h.strip() for h in header.strip("|").split("|")],
                     [c.strip() for c in first.strip("|").split("|")]))
    assert cells["splits"] == "3" and cells["split kernel"] == want["split_kernel"]
    # The sources it measured, whatever --name says.
    src = out["meta"]["source"]
    assert re.fullmatch(r"[0-9a-f]{12}", src["ffi_sha256"]) and re.fullmatch(r"[0-9a-f]{12}", src["python_sha256"])
    assert f"sources ffi {src['ffi_sha256']} python {src['python_sha256']}" in md
    # --render: the same summary and table from the saved raw figures, nothing measured; a
    # renamed copy renders under its own name, never over the run it came from.
    again = tmp_path / "again"
    again.mkdir()
    assert bench.main(["--render", str(tmp_path / "smoke.json"), "--out", str(again)]) == 0
    redone = json.loads((again / "smoke.json").read_text())
    assert redone["summary"] == out["summary"] and redone["workers"] == out["workers"]
    assert (again / "smoke.md").read_text().split("\n")[2:] == md.split("\n")[2:]
    copy = again / "smoke_copy.json"
    shutil.copy(tmp_path / "smoke.json", copy)
    before = (again / "smoke.json").read_text()
    assert bench.main(["--render", str(copy)]) == 0
    assert (again / "smoke_copy.md").exists() and (again / "smoke.json").read_text() == before
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "smoke.png").stat().st_size > 0


def _script(*args, env=None, cwd):
    return subprocess.run([sys.executable, bench.__file__, *args], capture_output=True, text=True,
                          cwd=cwd, env=dict(os.environ, **(env or {})), timeout=600)


def test_bench_runs_as_a_script_without_the_device_clock(tmp_path):
    """`python benchmarks/bench.py` from anywhere: its workers find the package and the clock module."""
    r = _script("--configs", "swa2k-w256-r1", "--modes", "on", "--no-device-clock", "--out", str(tmp_path),
                "--name", "nodev", *SMALL, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = json.loads((tmp_path / "nodev.json").read_text())
    rec = out["workers"]["on"]["configs"]["swa2k-w256-r1"]
    assert out["workers"]["on"]["device_clock"] is False and rec["status"] == "ok"
    assert "ours_device" not in rec and "ours_cold_device" not in rec


def test_a_bad_launch_override_stops_the_run(tmp_path):
    r = _script("--configs", "full1k-r1", "--out", str(tmp_path), *SMALL,
                env={"MUSE_ATTN_LAUNCH": "split_kernel=nope"}, cwd=tmp_path)
    assert r.returncode == 2 and "split_kernel must be" in r.stderr, r.stderr[-3000:]
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize("argv, what", [(["--num-splits", "0"], "--num-splits"),
                                        (["--configs", "full1k"], "--configs"),
                                        (["--modes", "sometimes"], "--modes"),
                                        (["--kv-dtypes", "fp16"], "--kv-dtypes"),
                                        (["--configs", "full1k-r1-fp4"], "--configs")])
def test_bad_options_are_argparse_errors(argv, what, capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert e.value.code == 2 and what in capsys.readouterr().err


def test_config_names_round_trip():
    grid = bench.full_grid()
    assert len(grid) == 25
    for c in grid + [bench.parse_config(n) for n in bench.QUICK_CPU + bench.QUICK_GPU]:
        assert bench.parse_config(c.name).name == c.name
    swa = bench.parse_config("swa32k-r1")
    assert swa.window == 2048 and swa.keys_read == 2055
    assert [c.name for c in bench.select_configs("full128k-*", False, "gpu")] == [
        f"full128k-r{r}" for r in (1, 2, 4, 8, 16)]
    assert [c.name for c in bench.select_configs("full3k-r5", False, "gpu")] == ["full3k-r5"]


def test_fp8_configs_are_named_selected_and_counted():
    c = bench.parse_config("full32k-r4-fp8")
    assert (c.L, c.R, c.window, c.kv) == (32768, 4, None, "fp8") and c.name == "full32k-r4-fp8"
    assert c.kv_bytes * 2 == c.with_kv("bf16").kv_bytes
    assert bench.parse_config("swa2k-w256-r2-fp8").name == "swa2k-w256-r2-fp8"
    names = [c.name for c in bench.select_configs("full128k-r1,full2k-r2-fp8", False, "gpu", ("bf16", "fp8"))]
    assert names == ["full128k-r1", "full128k-r1-fp8", "full2k-r2-fp8"]
    assert [c.name for c in bench.select_configs("", True, "cpu", ("fp8",))] == [
        n + "-fp8" for n in bench.QUICK_CPU]
    assert len(bench.select_configs("", False, "gpu", ("bf16", "fp8"))) == 50


def test_bench_fp8_config_is_checked_and_compared_with_bf16(tmp_path):
    """An FP8 config beside its bf16 twin: ours checked against the reference on the FP8 cache,
    its bytes counted at one a value, its time over the twin's in the table."""
    rc = bench.main(["--configs", "full1k-r1", "--kv-dtypes", "bf16,fp8", "--modes", "on", "--out",
                     str(tmp_path), "--name", "fp8", *SMALL])
    out = json.loads((tmp_path / "fp8.json").read_text())
    assert rc == 0 and out["all_checks_passed"] is True
    rows = {r["config"]: r for r in out["summary"]}
    assert set(rows) == {"full1k-r1", "full1k-r1-fp8"}
    fp8, bf16 = rows["full1k-r1-fp8"], rows["full1k-r1"]
    assert fp8["check_on"]["ok"] and fp8["check_on"]["outputs_checked"] >= 2
    assert fp8["kv_bytes"] * 2 == bf16["kv_bytes"]
    assert fp8["ratio_to_bf16"] == pytest.approx(fp8["ours_on_us"] / bf16["ours_on_us"])
    assert bf16["ratio_to_bf16"] is None
    md = (tmp_path / "fp8.md").read_text()
    assert "× bf16 (host / dev)" in md and f"{fp8['ratio_to_bf16']:.2f} /" in md


def test_serving_grid_and_ragged_configs():
    names = [c.name for c in bench.full_grid("serving")]
    assert names == list(bench.SERVING_NAMES) and max(c.R for c in bench.full_grid("serving")) == 256
    c = bench.parse_config("ragged1k-128k-r64")
    assert c.name == "ragged1k-128k-r64" and c.ragged and len(c.lens) == 64
    assert all(1024 <= n <= 131072 for n in c.lens) and len(set(c.lens)) > 32 and c.L == max(c.lens)
    assert c.lens == bench.parse_config("ragged1k-128k-r64").lens  # from the name alone
    assert c.kv_bytes == sum(c.lens) * bench.H_KV * bench.D * 2 * 2
    w = bench.parse_config("ragged1k-128k-w2048-r64")
    assert w.lens == c.lens and w.keys_total == sum(min(n, 2048 + bench.NQ - 1) for n in c.lens)
    bt = bench.block_table_np(c)
    assert bt.shape == (64, c.pages)
    used = np.concatenate([bt[r, :n] for r, n in enumerate(c.request_pages)])
    assert sorted(used) == list(range(c.blocks))  # every block once, each request its own pages
    with pytest.raises(ValueError, match="lo <= hi"):
        bench.parse_config("ragged8k-1k-r4")


def test_bench_ragged_batch_is_checked(tmp_path):
    rc = bench.main(["--configs", "ragged64-700-w128-r3", "--modes", "on", "--out", str(tmp_path), "--name", "rg",
                     *SMALL])
    out = json.loads((tmp_path / "rg.json").read_text())
    (row,) = out["summary"]
    assert rc == 0 and out["all_checks_passed"] and row["check_on"]["ok"]
    cfg = bench.parse_config("ragged64-700-w128-r3")
    assert out["configs"][0]["lens"] == list(cfg.lens) and row["kv_bytes"] == cfg.kv_bytes


def test_drafts_calls_beside_the_chain(tmp_path):
    """-drafts / -tree / -lse: the drafts target's calls, checked against the reference with the
    same arguments, each over its chain call in the table; the peers run only the chain."""
    names = ["full1k-r3", "full1k-r3-drafts", "full1k-r3-tree", "full1k-r3-lse"]
    for n in names:
        assert bench.parse_config(n).name == n
    kw = bench.parse_config("full1k-r3-drafts").draft_kwargs()
    assert list(kw["draft_lens"]) == [6, 4, 2]
    tree = bench.parse_config("full1k-r3-tree").draft_kwargs()
    assert tree["tree_mask"].shape == (3, bench.NQ) and list(tree["draft_depths"][0]) == [0, 1, 1, 2, 2, 2, 3, 3]
    assert tree["tree_mask"][0, 7] == 0b10100101  # draft 7 under 5 under 2 under 0
    rc = bench.main(["--configs", ",".join(names), "--modes", "on", "--out", str(tmp_path), "--name", "dr", *SMALL])
    out = json.loads((tmp_path / "dr.json").read_text())
    assert rc == 0 and out["all_checks_passed"]
    rows = {r["config"]: r for r in out["summary"]}
    for n in names[1:]:
        assert rows[n]["check_on"]["ok"] and rows[n]["check_on"]["outputs_checked"] >= 2
        assert rows[n]["ratio_to_chain"] == pytest.approx(rows[n]["ours_on_us"] / rows["full1k-r3"]["ours_on_us"])
    assert "× chain (host / dev)" in (tmp_path / "dr.md").read_text()


def test_peer_cells_say_what_happened():
    row = dict(fi_hot_us=10.0, fi_check=dict(ok=True), xqa_hot_us=20.0,
               xqa_check=dict(ok=False, approx=True, relerr=0.038))
    assert bench._peer_cell(row, "fi") == "10.0"
    assert bench._peer_cell(row, "xqa") == "20.0 ≈ (err 0.038)"
    row["xqa_check"] = dict(ok=False, approx=False, relerr=0.5)
    assert bench._peer_cell(row, "xqa") == "FAIL (err 0.5)"
    assert bench._peer_cell(dict(xqa_status="ERROR"), "xqa") == "ERROR"
    assert bench._peer_cell(dict(), "xqa") == "–"


def test_hash_same_in_jax_and_int64():
    import jax.numpy as jnp

    shape = (3, 2, 16, 8)
    got = np.asarray(bench.jax_hash_array(shape, 1)).astype(np.float32)
    i = np.arange(np.prod(shape), dtype=np.int64)  # the torch worker runs the same int64 code
    v = bench.hash_values_int64(i, 1).astype(np.float32) * np.float32(2.0 ** -22) - np.float32(2.0)
    want = np.asarray(jnp.asarray(v).astype(jnp.bfloat16)).astype(np.float32).reshape(shape)
    np.testing.assert_array_equal(got, want)


def test_fp8_hash_is_the_bf16_hash_rounded():
    import jax.numpy as jnp
    import ml_dtypes

    shape = (3, 2, 16, 8)
    got = np.asarray(bench.jax_hash_array(shape, 1, "float8_e4m3fn"))
    i = np.arange(np.prod(shape), dtype=np.int64)
    v = bench.hash_values_int64(i, 1).astype(np.float32) * np.float32(2.0 ** -22) - np.float32(2.0)
    assert got.dtype == jnp.float8_e4m3fn
    np.testing.assert_array_equal(got.view(np.uint8), v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).reshape(shape))
    assert np.isfinite(got.astype(np.float32)).all() and len(np.unique(got.view(np.uint8))) > 64


def test_torch_side_matches_jax_side():
    """The FlashInfer worker's data, layout conversion and check reference agree with ours."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (pip install torch): the FlashInfer worker's side not checked")
    import jax.numpy as jnp
    import torch

    from jax_muse_attn import reference

    for cfg in (bench.parse_config("full256-r2"), bench.parse_config("swa512-w64-r2"),
                bench.parse_config("full256-r2-fp8"), bench.parse_config("ragged40-300-w64-r3"),
                bench.parse_config("full256-r2-tree")):
        shape = (cfg.blocks, bench.H_KV, bench.PAGE, 2 * bench.D)
        kv_j = bench.jax_hash_array(shape, bench.SEED_KV, "float8_e4m3fn" if cfg.fp8 else "bfloat16")
        q_j = bench.jax_hash_array((bench.NQ * cfg.R, bench.H_Q, bench.D), bench.SEED_Q)
        kv_t = bench.torch_hash_array(shape, bench.SEED_KV, "cpu", torch.float8_e4m3fn if cfg.fp8 else None)
        q_t = bench.torch_hash_array((bench.NQ * cfg.R, bench.H_Q, bench.D), bench.SEED_Q, "cpu")
        np.testing.assert_array_equal(np.asarray(kv_j.astype(jnp.float32)), kv_t.float().numpy())
        np.testing.assert_array_equal(np.asarray(q_j.astype(jnp.float32)), q_t.float().numpy())
        bt = bench.block_table_np(cfg)
        scales = dict(k_scale=jnp.float32(bench.KV_SCALE), v_scale=jnp.float32(bench.KV_SCALE)) if cfg.fp8 else {}
        tree = {k: jnp.asarray(a) for k, a in cfg.draft_kwargs().items()}  # XQA's tree check
        want = reference.verify_attention(q_j, kv_j, jnp.asarray(bt), jnp.asarray(cfg.lens, jnp.int32),
                                          scale=bench.SCALE, window=cfg.window, **scales, **tree)
        k, v = bench.nhd_caches(kv_t)
        got = bench.torch_reference(q_t, k, v, torch.from_numpy(bt), cfg,
                                    cfg.draft_kwargs().get("tree_mask")).numpy()
        np.testing.assert_allclose(got, np.asarray(want.astype(jnp.float32)), atol=1e-2, rtol=2e-2)


def test_budget_left_unused_goes_to_later_workers():
    parts = [1.3, 1.0, bench.TORCH_BUDGET_PART]  # command buffers on (+ reference, cold), off, torch
    end = 550.0
    assert bench.worker_deadline(0.0, end, parts) == pytest.approx(550.0 * 1.3 / (2.3 + bench.TORCH_BUDGET_PART))
    # The first worker ends early: the second gets its part of all the time left.
    second = bench.worker_deadline(269.0, end, parts[1:])
    assert second - 269.0 == pytest.approx(281.0 / (1.0 + bench.TORCH_BUDGET_PART))
    # The last worker gets everything left; a worker starting past the end gets no time.
    assert bench.worker_deadline(500.0, end, parts[2:]) == pytest.approx(end)
    assert bench.worker_deadline(600.0, end, parts[1:]) == 600.0


def test_source_fingerprint_follows_the_sources_and_the_build(tmp_path):
    (tmp_path / "ffi" / "gpu").mkdir(parents=True)
    (tmp_path / "jax_muse_attn" / "__pycache__").mkdir(parents=True)
    kernel = tmp_path / "ffi" / "gpu" / "split_kernel.cu.cc"
    kernel.write_text("kernel v1\n")
    (tmp_path / "jax_muse_attn" / "attention.py").write_text("x = 1\n")
    first = bench.source_fingerprint(str(tmp_path))
    assert first["git_commit"] is None and first["extension_sha256"] is None  # no .git, no build
    (tmp_path / "jax_muse_attn" / "__pycache__" / "stray.py").write_text("y = 1\n")  # caches do not count
    assert bench.source_fingerprint(str(tmp_path)) == first
    kernel.write_text("kernel v2\n")
    second = bench.source_fingerprint(str(tmp_path))
    assert second["ffi_sha256"] != first["ffi_sha256"] and second["python_sha256"] == first["python_sha256"]
    assert bench.source_fingerprint(str(tmp_path / "jax_muse_attn"))["ffi_sha256"] is None  # a wheel: no ffi/
    ext = tmp_path / "_muse_attn.so"
    ext.write_bytes(b"build")
    os.utime(kernel, (1000, 1000))
    os.utime(ext, (2000, 2000))
    fp = bench.source_fingerprint(str(tmp_path), extension=str(ext))
    assert re.fullmatch(r"[0-9a-f]{12}", fp["extension_sha256"]) and fp["extension_stale"] is False
    os.utime(kernel, (3000, 3000))  # a kernel edited after the build
    stale = bench.source_fingerprint(str(tmp_path), extension=str(ext))
    assert stale["extension_stale"] is True and "OLDER THAN THE SOURCES" in bench._sources_text(stale)


def test_source_fingerprint_names_the_git_commit(tmp_path):
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed: the commit is not recorded")
    (tmp_path / "ffi").mkdir()
    (tmp_path / "ffi" / "kernels.h").write_text("v1\n")
    (tmp_path / "notes.md").write_text("not a source\n")

    def run(*args):
        return subprocess.run([git, "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              capture_output=True, text=True, check=True).stdout.strip()

    run("init", "-q")
    run("add", "-A")
    run("commit", "-q", "-m", "one")
    fp = bench.source_fingerprint(str(tmp_path))
    assert fp["git_commit"] == run("rev-parse", "HEAD") and fp["git_dirty"] is False
    (tmp_path / "notes.md").write_text("edited, outside ffi/ and the package\n")
    assert bench.source_fingerprint(str(tmp_path))["git_dirty"] is False
    (tmp_path / "ffi" / "kernels.h").write_text("v2\n")
    assert bench.source_fingerprint(str(tmp_path))["git_dirty"] is True
