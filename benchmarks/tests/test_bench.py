"""Smoke test of the benchmark (python -m jax_muse_attn.bench) on a one-config tiny grid."""

import importlib.util
import json
import os
import re

import pytest

from jax_muse_attn import bench


def test_bench_smoke(tmp_path):
    rc = bench.main(["--quick", "--configs", "full1k-r1", "--out", str(tmp_path), "--name", "smoke",
                     "--repeats", "2", "--chain", "4", "--ref-chain", "3", "--cold-chain", "2",
                     "--no-flashinfer"])
    out = json.loads((tmp_path / "smoke.json").read_text())
    assert rc == 0
    assert out["all_checks_passed"] is True
    assert {"meta", "configs", "summary", "floors", "copy_floor", "workers", "errors"} <= set(out)
    assert [c["name"] for c in out["configs"]] == ["full1k-r1"]
    assert set(out["workers"]) == {"on", "off", "torch"}
    (row,) = out["summary"]
    assert row["status"] == "ok"
    for mode in ("on", "off"):
        assert row[f"check_{mode}"]["ok"] and row[f"check_{mode}"]["outputs_checked"] >= 3
        assert row[f"check_{mode}"]["timed_equals_checked"] is True
        assert row[f"ours_{mode}_us"] is not None
        assert out["workers"][mode]["configs"]["full1k-r1"]["ours"]["n"] >= 2
        # The device-clock column (the CPU handler of the clock here, the GPU's on a GPU).
        assert out["workers"][mode]["device_clock"] is True
        dev = out["workers"][mode]["configs"]["full1k-r1"]["ours_device"]
        assert dev["n"] >= 2 and len(dev["dN_s"]) == 2 and min(dev["dN_s"]) > 0
        assert row[f"ours_dev_{mode}_us"] is not None
    # Cold on the device clock, by the first mode's worker only: every (flush, call) bracket of
    # every repeat, the call's brackets longer than the empty ones (a CPU call of 1k keys takes
    # far longer than a clock read).
    cold = out["workers"]["on"]["configs"]["full1k-r1"]["ours_cold_device"]
    assert len(cold["call_bracket_us"]) == len(cold["empty_bracket_us"]) == 2 * 2 == cold["n"]
    assert min(cold["call_bracket_us"]) > max(cold["empty_bracket_us"])
    assert row["ours_cold_dev_on_us"] == cold["per_call_us"] > 0
    assert "ours_cold_device" not in out["workers"]["off"]["configs"]["full1k-r1"]
    assert row["reference_us"] is not None
    # The split count the call ran with (as verify_attention picks it), in the summary and table.
    from jax_muse_attn import _ffi, _validate, attention
    cfg = bench.parse_config("full1k-r1")
    shapes = _validate.Shapes(num_requests=cfg.R, tokens=8, num_q_heads=16, num_kv_heads=2,
                              head_dim=64, num_blocks=1, pages=cfg.L // 16, window=0, q_rank=3)
    assert row["num_splits"] == attention._default_num_splits(shapes, _ffi.current_platform())
    header, _, first = (tmp_path / "smoke.md").read_text().split("\n")[2:5]
    cells = dict(zip([h.strip() for h in header.strip("|").split("|")],
                     [c.strip() for c in first.strip("|").split("|")]))
    assert cells["splits"] == str(row["num_splits"])
    # The run names the sources it measured (whatever --name says), in the JSON and the table.
    # The kernels' digest where the package is imported from a checkout (ffi/ beside it); None
    # from an installed wheel or a --target install (session 45's sm_90-only build), which has no
    # ffi/ to hash (the extension's own digest still names what ran).
    src = out["meta"]["source"]
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(bench.__file__)))
    if os.path.isdir(os.path.join(checkout, "ffi")):
        assert re.fullmatch(r"[0-9a-f]{12}", src["ffi_sha256"])
    else:
        assert src["ffi_sha256"] is None and re.fullmatch(r"[0-9a-f]{12}", src["extension_sha256"])
    assert re.fullmatch(r"[0-9a-f]{12}", src["python_sha256"])
    assert f"sources ffi {src['ffi_sha256']} python {src['python_sha256']}" in (tmp_path / "smoke.md").read_text()
    # --render: the same summary and table from the saved raw figures, nothing measured.
    again = tmp_path / "again"
    again.mkdir()
    assert bench.main(["--render", str(tmp_path / "smoke.json"), "--out", str(again)]) == 0
    redone = json.loads((again / "smoke.json").read_text())
    assert redone["summary"] == out["summary"] and redone["workers"] == out["workers"]
    assert (again / "smoke.md").read_text().split("\n")[2:] == (tmp_path / "smoke.md").read_text().split("\n")[2:]
    # An archived copy renders under its own file name, never over the run it was copied from.
    archived = again / "smoke_v1.json"
    archived.write_text((tmp_path / "smoke.json").read_text())
    before = (again / "smoke.json").read_text()
    assert bench.main(["--render", str(archived)]) == 0
    assert (again / "smoke_v1.md").exists() and (again / "smoke.json").read_text() == before
    meta = json.loads(archived.read_text())["meta"]
    assert meta["name"] == "smoke_v1" and meta["run_name"] == "smoke"
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "smoke.png").stat().st_size > 0


def test_config_names_round_trip():
    grid = bench.full_grid()
    assert len(grid) == 25
    for c in grid + [bench.parse_config(n) for n in bench.QUICK_CPU]:
        assert bench.parse_config(c.name).name == c.name
    swa = bench.parse_config("swa32k-r1")
    assert swa.window == 2048 and swa.keys_read == 2055
    assert [c.name for c in bench.select_configs("full128k-*", False, "gpu")] == [
        f"full128k-r{r}" for r in (1, 2, 4, 8, 16)]


def test_hash_same_in_jax_and_int64():
    import jax.numpy as jnp
    import numpy as np

    shape = (3, 2, 16, 8)
    got = np.asarray(bench.jax_hash_array(shape, 1)).astype(np.float32)
    i = np.arange(np.prod(shape), dtype=np.int64)  # the torch worker runs the same int64 code
    v = bench.hash_values_int64(i, 1).astype(np.float32) * np.float32(2.0 ** -22) - np.float32(2.0)
    want = np.asarray(jnp.asarray(v).astype(jnp.bfloat16)).astype(np.float32).reshape(shape)
    np.testing.assert_array_equal(got, want)


def test_torch_side_matches_jax_side():
    """The FlashInfer worker's data, layout conversion and check reference agree with ours."""
    import numpy as np
    import pytest

    torch = pytest.importorskip("torch")
    import jax.numpy as jnp

    from jax_muse_attn import reference

    for cfg in (bench.parse_config("full256-r2"), bench.parse_config("swa512-w64-r2")):
        shape = (cfg.blocks, bench.H_KV, bench.PAGE, 2 * bench.D)
        kv_j = bench.jax_hash_array(shape, bench.SEED_KV)
        q_j = bench.jax_hash_array((bench.NQ * cfg.R, bench.H_Q, bench.D), bench.SEED_Q)
        kv_t = bench.torch_hash_array(shape, bench.SEED_KV, "cpu")
        q_t = bench.torch_hash_array((bench.NQ * cfg.R, bench.H_Q, bench.D), bench.SEED_Q, "cpu")
        np.testing.assert_array_equal(np.asarray(kv_j.astype(jnp.float32)), kv_t.float().numpy())
        np.testing.assert_array_equal(np.asarray(q_j.astype(jnp.float32)), q_t.float().numpy())
        bt = bench.block_table_np(cfg)
        want = reference.verify_attention(q_j, kv_j, jnp.asarray(bt), jnp.full((cfg.R,), cfg.L, jnp.int32),
                                          scale=bench.SCALE, window=cfg.window)
        k, v = bench.nhd_caches(kv_t)
        got = bench.torch_reference(q_t, k, v, torch.from_numpy(bt), cfg).numpy()
        np.testing.assert_allclose(got, np.asarray(want.astype(jnp.float32)), atol=1e-2, rtol=2e-2)


def test_bench_without_device_clock(tmp_path):
    rc = bench.main(["--quick", "--configs", "full1k-r1", "--out", str(tmp_path), "--name", "nodev",
                     "--repeats", "2", "--chain", "3", "--ref-chain", "2", "--cold-chain", "2",
                     "--no-flashinfer", "--modes", "on", "--no-device-clock"])
    out = json.loads((tmp_path / "nodev.json").read_text())
    assert rc == 0 and out["workers"]["on"]["device_clock"] is False
    assert "ours_device" not in out["workers"]["on"]["configs"]["full1k-r1"]
    assert "ours_cold_device" not in out["workers"]["on"]["configs"]["full1k-r1"]


def test_budget_left_unused_goes_to_later_workers():
    # The parts as the bench gives them: command buffers on (also times the reference), off, torch.
    parts = [1.3, 1.0, bench.TORCH_BUDGET_PART]
    end = 550.0
    first = bench.worker_deadline(0.0, end, parts)
    assert first == pytest.approx(550.0 * 1.3 / (2.3 + bench.TORCH_BUDGET_PART))
    # The first worker ends early (version 16's H200 run: 269 s): the second gets its part of
    # the 281 s left, more than the fixed 80 % split gave it (0.8 x 550 - 269 = 171 s).
    second = bench.worker_deadline(269.0, end, parts[1:])
    assert second - 269.0 == pytest.approx(281.0 / (1.0 + bench.TORCH_BUDGET_PART))
    assert second - 269.0 > 0.8 * end - 269.0
    # The last worker gets everything left; a worker starting past the end gets no time.
    assert bench.worker_deadline(500.0, end, parts[2:]) == pytest.approx(end)
    assert bench.worker_deadline(600.0, end, parts[1:]) == 600.0


def test_source_fingerprint_follows_the_sources(tmp_path):
    (tmp_path / "ffi" / "gpu").mkdir(parents=True)
    (tmp_path / "jax_muse_attn" / "__pycache__").mkdir(parents=True)
    (tmp_path / "ffi" / "gpu" / "split_kernel.cu.cc").write_text("kernel v1\n")
    (tmp_path / "ffi" / "CMakeLists.txt").write_text("cmake\n")
    (tmp_path / "jax_muse_attn" / "attention.py").write_text("x = 1\n")
    first = bench.source_fingerprint(str(tmp_path))
    assert first["git_commit"] is None and first["git_dirty"] is None  # no .git here
    # Build outputs and caches do not count (a .py under __pycache__ neither); a byte of a kernel
    # source or a module does.
    (tmp_path / "jax_muse_attn" / "__pycache__" / "attention.cpython-312.pyc").write_bytes(b"\0")
    (tmp_path / "jax_muse_attn" / "__pycache__" / "stray.py").write_text("y = 1\n")
    (tmp_path / "jax_muse_attn" / "_muse_attn.so").write_bytes(b"\0")
    assert bench.source_fingerprint(str(tmp_path)) == first
    (tmp_path / "ffi" / "gpu" / "split_kernel.cu.cc").write_text("kernel v2\n")
    second = bench.source_fingerprint(str(tmp_path))
    assert second["ffi_sha256"] != first["ffi_sha256"] and second["python_sha256"] == first["python_sha256"]
    (tmp_path / "jax_muse_attn" / "attention.py").write_text("x = 2\n")
    assert bench.source_fingerprint(str(tmp_path))["python_sha256"] != first["python_sha256"]
    # A file moved between directories changes the digest even with the same bytes.
    (tmp_path / "ffi" / "gpu" / "split_kernel.cu.cc").rename(tmp_path / "ffi" / "split_kernel.cu.cc")
    assert bench.source_fingerprint(str(tmp_path))["ffi_sha256"] != second["ffi_sha256"]
    # An installed wheel has no ffi/: None, not a digest of nothing.
    assert bench.source_fingerprint(str(tmp_path / "jax_muse_attn"))["ffi_sha256"] is None


def test_source_fingerprint_names_the_built_extension(tmp_path):
    import os
    (tmp_path / "ffi").mkdir()
    (tmp_path / "jax_muse_attn").mkdir()
    kernel = tmp_path / "ffi" / "split_kernel.cu.cc"
    kernel.write_text("kernel v1\n")
    ext = tmp_path / "jax_muse_attn" / "_muse_attn.so"
    ext.write_bytes(b"build one")
    os.utime(kernel, (1000, 1000))
    os.utime(ext, (2000, 2000))
    fp = bench.source_fingerprint(str(tmp_path), extension=str(ext))
    assert fp["extension_sha256"] and fp["extension_stale"] is False
    assert ", extension " + fp["extension_sha256"] in bench._sources_text(fp)
    assert "OLDER" not in bench._sources_text(fp)
    ext.write_bytes(b"build two")  # another build: another digest
    os.utime(ext, (2000, 2000))
    assert bench.source_fingerprint(str(tmp_path), extension=str(ext))["extension_sha256"] != fp["extension_sha256"]
    os.utime(kernel, (2000, 2000))  # edited in the same second as the build: not stale
    assert bench.source_fingerprint(str(tmp_path), extension=str(ext))["extension_stale"] is False
    os.utime(kernel, (3000, 3000))  # a kernel edited after the build
    stale = bench.source_fingerprint(str(tmp_path), extension=str(ext))
    assert stale["extension_stale"] is True and "OLDER THAN THE SOURCES" in bench._sources_text(stale)
    os.utime(kernel, (1000, 1000))
    cmake = tmp_path / "ffi" / "CMakeLists.txt"  # build flags count as sources too
    cmake.write_text("flags\n")
    os.utime(cmake, (3000, 3000))
    assert bench.source_fingerprint(str(tmp_path), extension=str(ext))["extension_stale"] is True
    # Another tree's sources are not compared with this process's build by default.
    assert bench.source_fingerprint(str(tmp_path))["extension_sha256"] is None
    # Not built (or not found): neither is known.
    missing = bench.source_fingerprint(str(tmp_path), extension=str(tmp_path / "nothing.so"))
    assert missing["extension_sha256"] is None and missing["extension_stale"] is None
    assert bench.source_fingerprint(str(tmp_path), extension=None)["extension_sha256"] is None


def test_source_fingerprint_finds_the_loaded_extension():
    from jax_muse_attn import _ffi
    if _ffi._MODULE is None:
        pytest.skip("the extension is not built here")
    fp = bench.source_fingerprint()
    assert fp["extension_sha256"] and len(fp["extension_sha256"]) == 12


def test_source_fingerprint_names_the_git_commit(tmp_path):
    import shutil
    import subprocess
    git = shutil.which("git")
    if git is None:
        pytest.skip("no git on this machine")
    (tmp_path / "ffi").mkdir()
    (tmp_path / "jax_muse_attn").mkdir()
    (tmp_path / "ffi" / "kernels.h").write_text("v1\n")
    (tmp_path / "jax_muse_attn" / "attention.py").write_text("x = 1\n")
    (tmp_path / "notes.md").write_text("not a source\n")

    def run(*args):
        return subprocess.run([git, "-C", str(tmp_path), *args], capture_output=True, text=True,
                              check=True).stdout.strip()

    run("init", "-q")
    run("-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    fp = bench.source_fingerprint(str(tmp_path))
    assert fp["git_commit"] == run("rev-parse", "HEAD") and fp["git_dirty"] is False
    (tmp_path / "notes.md").write_text("edited, outside ffi/ and the package\n")
    assert bench.source_fingerprint(str(tmp_path))["git_dirty"] is False
    (tmp_path / "ffi" / "kernels.h").write_text("v2\n")
    assert bench.source_fingerprint(str(tmp_path))["git_dirty"] is True


def test_cold_flush_check_script(tmp_path, monkeypatch):
    """scripts/cold_flush_check.py (a device check of the L2 flush) runs on the CPU: one line a
    flush size and one hot line, each with a call and an empty bracket above zero."""
    import pathlib
    import sys

    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).parents[1] / "scripts"))
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["cold_flush_check.py"])
    import cold_flush_check as c

    monkeypatch.setattr(c, "FLUSHES_MIB", (1, 4))
    monkeypatch.setattr(c, "BRACKETS", 2)
    monkeypatch.setattr(c, "REPEATS", 2)
    c.main(["full256-r1"])
    lines = (tmp_path / "cold_flush_check.txt").read_text().splitlines()[1:]
    assert [ln.split(":")[0] for ln in lines] == [
        "full256-r1 flush     1 MiB", "full256-r1 flush     4 MiB", "full256-r1 flush     0 MiB"]
    assert lines[-1].endswith("<- no flush: hot")
    for ln in lines:
        call = float(re.search(r"call (\S+) ", ln).group(1))
        empty = float(re.search(r"empty bracket (\S+),", ln).group(1))
        assert call > 0 and empty > 0


def test_cold_flush_check_thunk_summary(tmp_path, monkeypatch):
    """cold_flush_check.thunk_summary reads the kinds at column 0 of each bracketed jit's dump
    after XLA's thunk passes (nested thunks, indented, are not counted; other modules are not read)."""
    import pathlib

    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).parents[1] / "scripts"))
    import cold_flush_check as c

    one = ("000: kCommandBuffer [source | sink] \n"
           "    001: kCustomKernel [source       | next=002 (1)] input_reduce_fusion\n"
           "    002: kCustomCall   [prev=001 (1) | next=003 (1)] kCustomCall\n")
    split = "000: kCustomKernel [source | next=001 (1)] f\n001: kCustomCall [prev=000 (1) | sink] c\n"
    (tmp_path / "module_1.jit_f.thunk_sequence_after_thunk_passes.txt").write_text(one)
    (tmp_path / "module_2.jit_f.thunk_sequence_after_thunk_passes.txt").write_text(split)
    (tmp_path / "module_3.jit_g.thunk_sequence_after_thunk_passes.txt").write_text(split)
    (tmp_path / "module_1.jit_f.thunk_sequence.txt").write_text(split)
    assert c.thunk_summary(str(tmp_path)) == [
        ("module_1.jit_f.thunk_sequence_after_thunk_passes.txt", ["kCommandBuffer"]),
        ("module_2.jit_f.thunk_sequence_after_thunk_passes.txt", ["kCustomKernel", "kCustomCall"])]
