"""Builds and drives the wave64 emulator of the HIP kernels (ffi/gpu/emu) on the CPU.

The unmodified split and merge kernels are compiled for the host with clang (the stand-in HIP
header of ffi/gpu/emu first on the include path, __gfx942__ or __gfx950__ defined) into a shared
library per target, loaded with ctypes. `run` makes one verify-attention call through the real
launchers with the launch plan the AMD device would get, and returns the output or raises
EmulatorError with the emulator's message.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import os
import shutil
import subprocess
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FFI = os.path.join(ROOT, "ffi")
TARGETS = ("gfx942", "gfx950")
# MI300X (gfx942: 304 CUs) and MI355X (gfx950: 256 CUs), as the launch plan describes them
# (amd_gfx picks the row of the AMD plan's table, ffi/gpu/amd_targets.h).
DEVICES = {
    "gfx942": dict(vendor="amd", multiprocessors=304, compute_major=0, warp_size=64,
                   merge_can_wait=False, has_two_pairs=False, amd_gfx=942),
    "gfx950": dict(vendor="amd", multiprocessors=256, compute_major=0, warp_size=64,
                   merge_can_wait=False, has_two_pairs=False, amd_gfx=950),
}
SCHEDULES = {"lockstep": 0, "wave_serial": 1}
SOURCES = [os.path.join(FFI, "gpu", f) for f in (
    "split_kernel.cu.cc", "split_kernel_fp8.cu.cc", "split_kernel_drafts.cu.cc",
    "split_kernel_balanced.cu.cc", "merge_kernel.cu.cc")] + [
    os.path.join(FFI, "gpu", "emu", f) for f in ("emulator.cc", "entry.cc")]
PROBES = os.path.join(ROOT, "tests", "emu_probes.cc")  # kernels with planted bugs
OPS_PROBES = os.path.join(ROOT, "tests", "emu_ops_probes.cc")  # gpu/amd_ops.h's helpers
RUN_CASE = os.path.join(FFI, "gpu", "emu", "run_case.cc")


class EmulatorError(RuntimeError):
    """An error the emulator found in a launch (divergence, an LDS read before any write, ...)."""


def find_clang() -> str | None:
    """A clang++ that compiles the kernels for the host (ext_vector_type, __bf16): clang 17+."""
    for name in ("clang++-19", "clang++-20", "clang++-21", "clang++-18", "clang++-17", "clang++"):
        path = shutil.which(name)
        if path is None:
            continue
        out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
        major = next((int(w.split(".")[0]) for w in out.split() if w[:1].isdigit()), 0)
        if major >= 17:
            return path
    return None


def _digest(extra: list[str]) -> str:
    h = hashlib.sha256(" ".join(extra).encode())
    files = SOURCES + [PROBES, OPS_PROBES, RUN_CASE] + sorted(glob.glob(os.path.join(FFI, "**", "*.h"),
                                                            recursive=True))
    for f in files:
        with open(f, "rb") as fh:
            h.update(f.encode() + fh.read())
    return h.hexdigest()[:16]


def build(target: str, out_dir: str, sanitize: bool = False, executable: bool = False,
          fp8_staged: bool = False) -> str:
    """The emulator for target as a shared library with the probe kernels (or, with executable,
    the run_case program), compiled into out_dir; reused while the sources are unchanged.
    fp8_staged: an FP8 cache takes NVIDIA's staged form (copied as FP8, then converted; kernels.h)
    instead of AMD's direct one."""
    clang = find_clang()
    if clang is None:
        raise FileNotFoundError("no clang++ 17 or newer (Debian: apt-get install clang-19)")
    flags = ["-std=c++17", "-fno-strict-aliasing", "-g", f"-D__{target}__", "-D__HIP_DEVICE_COMPILE__",
             "-DMUSE_ATTN_WITH_HIP", "-I", os.path.join(FFI, "gpu", "emu"), "-I", FFI]
    if fp8_staged:
        flags += ["-DMUSE_ATTN_FP8_STAGED"]
    if sanitize:
        flags += ["-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                  "-fno-omit-frame-pointer"]
    else:
        flags += ["-O2"]
    sources = SOURCES + ([RUN_CASE] if executable else [PROBES, OPS_PROBES])
    name = f"emu_{target}_{'san_' if sanitize else ''}{_digest(flags + sources)}"
    path = os.path.join(out_dir, name + ("" if executable else ".so"))
    if not os.path.exists(path):
        tmp = tempfile.mktemp(dir=out_dir)
        kind = [] if executable else ["-fPIC", "-shared"]
        cmd = [clang, *flags, *kind, "-x", "c++", *sources, "-o", tmp]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"emulator build failed ({' '.join(cmd)}):\n{r.stderr[-4000:]}")
        os.replace(tmp, path)
    return path


class _Call(ctypes.Structure):
    _fields_ = [("q", ctypes.c_void_p), ("kv", ctypes.c_void_p), ("table", ctypes.c_void_p),
                ("seq_lens", ctypes.c_void_p), ("num_reqs", ctypes.c_void_p),
                ("out", ctypes.c_void_p), ("part_o", ctypes.c_void_p), ("part_ml", ctypes.c_void_p),
                ("num_blocks", ctypes.c_int64), ("table_stride", ctypes.c_int64),
                ("num_requests", ctypes.c_int), ("tokens", ctypes.c_int),
                ("num_q_heads", ctypes.c_int), ("num_kv_heads", ctypes.c_int),
                ("head_dim", ctypes.c_int), ("pages", ctypes.c_int), ("window", ctypes.c_int),
                ("num_splits", ctypes.c_int), ("num_reqs_static", ctypes.c_int),
                ("scale", ctypes.c_float), ("split_kernel", ctypes.c_int),
                ("merge_warps", ctypes.c_int), ("merge_by_lane", ctypes.c_int),
                ("schedule", ctypes.c_int), ("seed", ctypes.c_uint64),
                ("k_scale", ctypes.c_void_p), ("v_scale", ctypes.c_void_p),
                ("kv_format", ctypes.c_int), ("scale_kind", ctypes.c_int),
                ("draft_lens", ctypes.c_void_p), ("tree_mask", ctypes.c_void_p),
                ("draft_depths", ctypes.c_void_p), ("lse", ctypes.c_void_p),
                ("draft_kind", ctypes.c_int), ("balance_segments", ctypes.c_int)]


KV_FORMATS = {"bfloat16": 0, "float8_e4m3fn": 1, "float8_e4m3fnuz": 2}


def _kv_operands(kv, k_scale, v_scale):
    """The cache's bytes, format and scales as the call passes them: bf16 -> uint16 bits; FP8 ->
    uint8 bytes with float32 scales ([] per tensor or [blocks, Hkv, 16] per token)."""
    kv = np.ascontiguousarray(np.asarray(kv))
    fmt = KV_FORMATS[str(kv.dtype)] if str(kv.dtype) in KV_FORMATS else 0
    if fmt == 0:
        if kv.dtype.itemsize != 2:
            raise TypeError(f"kv: bf16 (2-byte items) or an FP8 dtype, got {kv.dtype}")
        one = np.zeros((1,), np.float32)
        return kv.view(np.uint16), 0, 0, one, one
    ks = np.ascontiguousarray(np.asarray(k_scale, np.float32)).reshape(-1)
    vs = np.ascontiguousarray(np.asarray(v_scale, np.float32)).reshape(-1)
    kind = 1 if ks.size == 1 else 2
    return kv.view(np.uint8), fmt, kind, ks, vs


SPLIT_KERNELS = ("per_tile", "two_tile", "fill_ring", "pingpong", "pingpong_two_pairs",
                 "per_tile_cached")


class Emulator:
    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        self.lib.muse_emu_target.restype = ctypes.c_char_p
        self.target = self.lib.muse_emu_target().decode()
        self.mfma_k = self.lib.muse_emu_mfma_k()

    def run(self, q, kv, table, seq_lens, *, scale, tokens, window=None, num_reqs=None,
            traced_num_reqs=False, plan, schedule="lockstep", seed=1, k_scale=None, v_scale=None,
            draft_lens=None, tree_mask=None, draft_depths=None, return_lse=False):
        """out (bf16 bits as uint16, q's shape) of one call, and its lse (float32 [rows, Hq])
        with return_lse; q: bf16 (any dtype with 2-byte items); kv: bf16 likewise, or
        float8_e4m3fn / float8_e4m3fnuz with k_scale and v_scale; draft_lens [R] alone (a ragged
        chain); tree_mask and / or draft_depths [R, tokens] (a tree; draft_lens too where given,
        the kernels' defaults for those not); plan: a launch_plan() dict."""
        q = np.ascontiguousarray(np.asarray(q)).view(np.uint16)
        kv, fmt, scale_kind, ks, vs = _kv_operands(kv, k_scale, v_scale)
        table = np.ascontiguousarray(table, np.int32)
        seq_lens = np.ascontiguousarray(seq_lens, np.int32)
        rows, hq, d = q.reshape(q.shape[0], -1, kv.shape[3] // 2).shape
        R, hkv = rows // tokens, kv.shape[1]
        nr = np.array([R if num_reqs is None else num_reqs], np.int32)
        splits = plan["num_splits"]
        groups, grows = R * hkv, tokens * (hq // hkv)
        out = np.full(q.shape, 0xFFFF, np.uint16)  # NaN until written
        part_o = np.full((groups, splits, grows, d), 0xFFFF, np.uint16)
        part_ml = np.full((groups, splits, grows, 2), np.nan, np.float32)
        ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
        kind = 2 if tree_mask is not None or draft_depths is not None else int(draft_lens is not None)
        given = lambda a, dtype: None if a is None else np.ascontiguousarray(a, dtype)  # noqa: E731
        dl, tm, dd = given(draft_lens, np.int32), given(tree_mask, np.uint32), given(draft_depths, np.int32)
        opt = lambda a: None if a is None else ptr(a)  # noqa: E731 (null: the kernels' default)
        lse = np.full((rows, hq), np.nan, np.float32)  # NaN until written
        call = _Call(ptr(q), ptr(kv), ptr(table), ptr(seq_lens), ptr(nr), ptr(out), ptr(part_o),
                     ptr(part_ml), kv.shape[0], table.shape[1], R, tokens, hq, hkv, d,
                     table.shape[1], window or 0, splits,
                     -1 if traced_num_reqs else int(nr[0]), scale,
                     SPLIT_KERNELS.index(plan["split_kernel"]), plan["merge_warps"],
                     int(plan["merge_by_lane"]), SCHEDULES[schedule], seed, ptr(ks), ptr(vs), fmt,
                     scale_kind, opt(dl), opt(tm), opt(dd), ptr(lse) if return_lse else None, kind,
                     int(plan["balance_segments"]))
        err = ctypes.create_string_buffer(2048)
        if self.lib.muse_emu_verify_attention(ctypes.byref(call), err, len(err)) != 0:
            raise EmulatorError(err.value.decode())
        return (out, lse) if return_lse else out

    def mfma(self, a_words, b_words, c):
        """D registers [64, 4] of one MFMA of lane registers a, b ([64, K / 8] uint32) and c."""
        a = np.ascontiguousarray(a_words, np.uint32)
        b = np.ascontiguousarray(b_words, np.uint32)
        c = np.ascontiguousarray(c, np.float32)
        d = np.zeros((64, 4), np.float32)
        err = ctypes.create_string_buffer(2048)
        ptr = lambda x: x.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
        self.lib.muse_emu_mfma.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_char_p, ctypes.c_int]
        if self.lib.muse_emu_mfma(ptr(a), ptr(b), ptr(c), ptr(d), err, len(err)) != 0:
            raise EmulatorError(err.value.decode())
        return d

    def ops_probe(self, which: int, inputs, outputs: int, *, threads: int = 128, variant: int = 0,
                  lds_words: int = 0, schedule: str = "lockstep", seed: int = 3):
        """The output words (uint32 [outputs]) of probe kernel `which` of tests/emu_ops_probes.cc
        run on one block of `threads` from the input words (LDS first: lds_words of them)."""
        inp = np.ascontiguousarray(np.asarray(inputs).view(np.uint32).reshape(-1))
        out = np.zeros(outputs, np.uint32)
        err = ctypes.create_string_buffer(2048)
        f = self.lib.muse_emu_ops_probe
        f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                      ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int]
        rc = f(which, variant, threads, inp.ctypes.data, lds_words, out.ctypes.data,
               SCHEDULES[schedule], seed, err, len(err))
        if rc != 0:
            raise EmulatorError(err.value.decode())
        return out

    def probe(self, which: int, schedule: str = "lockstep", seed: int = 3) -> str:
        """"" (ran clean) or the emulator's message for probe kernel `which` (tests/emu_probes.cc)."""
        err = ctypes.create_string_buffer(2048)
        self.lib.muse_emu_probe.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint64,
                                            ctypes.c_char_p, ctypes.c_int]
        rc = self.lib.muse_emu_probe(which, SCHEDULES[schedule], seed, err, len(err))
        assert rc in (0, 1), (which, rc, err.value)
        return err.value.decode() if rc else ""


HEADER = ("num_requests", "tokens", "num_q_heads", "num_kv_heads", "head_dim", "pages", "window",
          "num_splits", "num_reqs_static", "split_kernel", "merge_warps", "merge_by_lane",
          "schedule", "seed", "num_blocks", "table_rows", "num_reqs", "kv_format", "scale_kind",
          "balance_segments")


def write_case(path, c, plan, schedule="lockstep", seed=1):
    """A case file for run_case (ffi/gpu/emu/run_case.cc): int64 header, float64 scale, q as bf16
    bits, kv as bf16 bits or FP8 bytes, block table and seq_lens as int32, the K and V scales as
    float32 (one unused value each for bf16)."""
    q = np.ascontiguousarray(np.asarray(c.q_np)).view(np.uint16)
    kv, fmt, kind, ks, vs = _kv_operands(c.kv_np, getattr(c, "k_scale_np", None),
                                         getattr(c, "v_scale_np", None))
    rows, d = q.shape[0], kv.shape[3] // 2
    R = rows // c.NQ
    head = dict(num_requests=R, tokens=c.NQ, num_q_heads=q.size // (rows * d),
                num_kv_heads=kv.shape[1], head_dim=d, pages=c.bt_np.shape[1],
                window=c.window or 0, num_splits=plan["num_splits"], num_reqs_static=c.num_reqs,
                split_kernel=SPLIT_KERNELS.index(plan["split_kernel"]),
                merge_warps=plan["merge_warps"], merge_by_lane=int(plan["merge_by_lane"]),
                schedule=SCHEDULES[schedule], seed=seed, num_blocks=kv.shape[0],
                table_rows=c.bt_np.shape[0], num_reqs=c.num_reqs, kv_format=fmt, scale_kind=kind,
                balance_segments=int(plan["balance_segments"]))
    with open(path, "wb") as f:
        np.array([head[k] for k in HEADER], np.int64).tofile(f)
        np.array([c.scale], np.float64).tofile(f)
        q.tofile(f)
        kv.tofile(f)
        np.ascontiguousarray(c.bt_np, np.int32).tofile(f)
        np.ascontiguousarray(c.sl_np, np.int32).tofile(f)
        ks.tofile(f)
        vs.tofile(f)
