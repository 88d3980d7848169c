"""The launch plan (ffi/gpu/launch_plan.h, asked through launch_plan_query.cc as
jax_muse_attn.launch_plan asks it) on the host, without a GPU: compiled with nvcc against a stub
of the two CUDA runtime calls it makes (the current device and its attributes: the SM count and
compute capability come from the environment) and of merge_waits_for_split (merge_kernel.cu.cc
asks the loaded merge code), then asked for every config of the benchmark grid and of
h200_plans.OFF_GRID as an H200 (132 SMs, sm_90) would be, by default and with each override.
The expectations are tests/h200_plans.py's, which the GPU test (test_gpu_launch_modes.py) asserts
on the real device; here CI checks the rules on every run. Skips without nvcc."""

import os
import subprocess

import pytest

import h200_plans
from jax_muse_attn import _validate, attention, bench
from jax_muse_attn.tools.gpu_compile_check import find_nvcc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime_api.h>
#include "gpu/kernels.h"
#include "gpu/launch_plan_query.h"

namespace muse_attn::gpu {
bool merge_waits_for_split() {  // merge_kernel.cu.cc: whether the loaded merge code has the wait
  const char* v = std::getenv("STUB_MERGE_WAITS");
  return v == nullptr || v[0] == '1';
}
bool pingpong_two_pairs_loaded() {  // split_kernel.cu.cc: whether the loaded module has sm_90a's
  const char* v = std::getenv("STUB_TWO_PAIRS_LOADED");
  return v == nullptr || v[0] == '1';
}
}  // namespace muse_attn::gpu

extern "C" {  // linked with --wrap: the plan's runtime calls land here
cudaError_t __wrap_cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t __wrap_cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  const char* v = std::getenv(attr == cudaDevAttrMultiProcessorCount ? "STUB_SMS"
                              : attr == cudaDevAttrComputeCapabilityMajor ? "STUB_MAJOR"
                                                                          : nullptr);
  if (v == nullptr) return cudaErrorInvalidValue;
  *value = std::atoi(v);
  return cudaSuccess;
}
}

int main() {  // sizes in, plan out, a line each (launch_plan_query.h's order)
  int s[kMuseNumSizes];
  for (;;) {
    for (int i = 0; i < kMuseNumSizes; ++i)
      if (std::scanf("%d", &s[i]) != 1) return 0;
    int plan[kMuseNumPlanFields] = {};
    const int rc = MuseLaunchPlanCuda(s, plan);
    std::printf("%d", rc);
    for (int f : plan) std::printf(" %d", f);
    std::printf("\n");
  }
}
"""


@pytest.fixture(scope="module")
def plan_bin(tmp_path_factory):
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (PATH, /usr/local/cuda/bin): the host launch-plan check not run")
    d = tmp_path_factory.mktemp("plan_host")
    (d / "main.cu").write_text(HARNESS)
    exe = d / "plan"
    cmd = [nvcc, "-O1", "-std=c++17", "-arch=sm_90", "-DMUSE_ATTN_WITH_CUDA",
           "-I", os.path.join(ROOT, "ffi"), "-o", str(exe), "-x", "cu", str(d / "main.cu"),
           os.path.join(ROOT, "ffi", "gpu", "launch_plan_query.cc"),
           "-Xlinker", "--wrap=cudaGetDevice", "-Xlinker", "--wrap=cudaDeviceGetAttribute"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return str(exe)


def _configs():
    return bench.full_grid() + [bench.parse_config(n) for n in h200_plans.OFF_GRID]


def _plans(plan_bin, monkeypatch, sms=132, major=9, **overrides):
    """{name-dD: plan} for every config at D = 64 and 128, the split count as verify_attention
    picks it on that device (attention._default_num_splits), the plan from the C++ query."""
    monkeypatch.setattr(attention._ffi, "multiprocessor_count", lambda: sms)
    monkeypatch.setattr(attention._ffi, "compute_capability_major", lambda: major)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSE_ATTN_")}
    env.update(STUB_SMS=str(sms), STUB_MAJOR=str(major), **overrides)
    for k, v in overrides.items():
        if k.startswith("MUSE_ATTN_"):
            monkeypatch.setenv(k, v)  # MUSE_ATTN_PINGPONG moves the split count too

    def query(shapes, num_splits):  # _ffi.gpu_launch_plan, answered by the stub-runtime build
        line = (f"{shapes.head_dim} {shapes.tokens} {shapes.num_q_heads} {shapes.num_kv_heads} "
                f"{shapes.num_requests} {shapes.pages} {shapes.window} {num_splits}\n")
        rc, kernel, *_ = map(int, subprocess.run([plan_bin], input=line, env=env, text=True,
                                                 capture_output=True, check=True).stdout.split())
        assert rc == 0, line
        return {"split_kernel": h200_plans.SPLIT_KERNELS[kernel]}
    monkeypatch.setattr(attention._ffi, "gpu_launch_plan", query)  # the split count asks it
    names, lines = [], []
    for c in _configs():
        for d in (64, 128):
            s = _validate.Shapes(num_requests=c.R, tokens=bench.NQ, num_q_heads=bench.H_Q,
                                 num_kv_heads=bench.H_KV, head_dim=d, num_blocks=c.blocks,
                                 pages=c.pages, window=c.window or 0, q_rank=3)
            splits = attention._default_num_splits(s, "CUDA")
            names.append((c, d, splits, s.max_tiles))
            lines.append(f"{d} {bench.NQ} {bench.H_Q} {bench.H_KV} {c.R} {c.pages} "
                         f"{c.window or 0} {splits}\n")
    out = subprocess.run([plan_bin], input="".join(lines), env=env, capture_output=True,
                         text=True, check=True).stdout.split("\n")
    plans = {}
    for (c, d, splits, max_tiles), line in zip(names, out):
        rc, kernel, warps, pdl, by_lane, fill = map(int, line.split())
        assert rc == 0, (c.name, d)
        plans[f"{c.name}-d{d}"] = dict(
            num_splits=splits, split_kernel=h200_plans.SPLIT_KERNELS[kernel],
            merge_warps=warps, merge_pdl=bool(pdl), merge_by_lane=bool(by_lane),
            split_fill_ring=bool(fill), R=c.R, max_tiles=max_tiles)
    assert len(plans) == 2 * len(_configs())
    return plans


def test_h200_default_plans(plan_bin, monkeypatch):
    for name, plan in _plans(plan_bin, monkeypatch).items():
        config, d = name.rsplit("-d", 1)
        ctas = plan["R"] * bench.H_KV * plan["num_splits"]  # 64 rows a group: one row block
        assert plan["split_kernel"] == h200_plans.split_kernel(config, int(d)), (name, plan)
        assert plan["split_fill_ring"] == h200_plans.fill_ring(config, int(d)), (name, plan)
        assert plan["merge_pdl"] == (ctas <= 2 * 132), (name, plan)
        per_warp = -(-plan["num_splits"] // plan["merge_warps"])
        assert plan["merge_by_lane"] == (per_warp <= 16), (name, plan)
        assert plan["merge_warps"] == h200_plans.merge_warps(config, int(d), plan["num_splits"]), (
            name, plan)


def test_h200_plans_with_the_merge_a_plain_launch(plan_bin, monkeypatch):
    for name, plan in _plans(plan_bin, monkeypatch, MUSE_ATTN_PDL="0").items():
        config, d = name.rsplit("-d", 1)
        assert not plan["merge_pdl"], (name, plan)
        assert plan["split_kernel"] == h200_plans.split_kernel_without_pdl(config, int(d)), (
            name, plan)
        assert plan["split_fill_ring"] == h200_plans.fill_ring(config, int(d), pdl=False), (
            name, plan)


def test_h200_plans_without_the_two_pair_code(plan_bin, monkeypatch):
    """A module without sm_90a code (the two-pair kernel a stub there) never takes the two-pair
    form, forced or not: the plan is the MUSE_ATTN_PP_TWO_PAIRS=0 plan."""
    off = _plans(plan_bin, monkeypatch, MUSE_ATTN_PP_TWO_PAIRS="0")
    assert any(p["split_kernel"] == "pingpong_two_pairs" for p in _plans(plan_bin, monkeypatch).values())
    assert _plans(plan_bin, monkeypatch, STUB_TWO_PAIRS_LOADED="0") == off
    assert _plans(plan_bin, monkeypatch, STUB_TWO_PAIRS_LOADED="0", MUSE_ATTN_PP_TWO_PAIRS="1") == off


def test_two_pairs_only_in_one_wave_by_default(plan_bin, monkeypatch):
    """By default the two-pair form runs only where its CTAs, one an SM, fit in one wave and
    segments have 32 tiles or more (launch_plan.h kPpTwoPairsMinSegmentTiles); forced on,
    wherever the ping-pong kernel runs."""
    seen = 0
    for sms in (132, 78, 114, 124):
        for name, plan in _plans(plan_bin, monkeypatch, sms=sms).items():
            if plan["split_kernel"] != "pingpong_two_pairs":
                continue
            assert -(-plan["num_splits"] // 2) * plan["R"] * bench.H_KV <= sms, (sms, name, plan)
            assert (-(-plan["max_tiles"] // plan["num_splits"])
                    >= h200_plans.TWO_PAIRS_MIN_SEGMENT_TILES), (sms, name, plan)
            seen += 1
    assert seen > 0
    # forced, past one wave too: full 128k R=4 (33 splits, 136 CTAs on 132 SMs)
    forced = _plans(plan_bin, monkeypatch, MUSE_ATTN_PP_TWO_PAIRS="1")
    assert forced["full128k-r4-d64"]["split_kernel"] == "pingpong_two_pairs"
    assert _plans(plan_bin, monkeypatch)["full128k-r4-d64"]["split_kernel"] == "pingpong"
    # one wave: 124 SMs cut full 128k R=8 into 15 segments of 137 tiles: 8 two-pair CTAs a group
    # x 16 groups = 128 > 124, so one pair a CTA
    at124 = _plans(plan_bin, monkeypatch, sms=124)["full128k-r8-d64"]
    assert (at124["num_splits"], at124["split_kernel"]) == (15, "pingpong"), at124


@pytest.mark.parametrize("major", [8, 10])
def test_two_pairs_only_on_sm90(plan_bin, monkeypatch, major):
    """Forced with the ping-pong kernel on another GPU, the two-pair form still is not taken (its
    code is built for sm_90a only)."""
    for name, plan in _plans(plan_bin, monkeypatch, major=major, MUSE_ATTN_PINGPONG="1",
                             MUSE_ATTN_PP_TWO_PAIRS="1").items():
        assert plan["split_kernel"] == ("pingpong" if name.endswith("-d64") else "per_tile"), (
            name, plan)


def test_h200_plans_when_the_merge_code_has_no_wait(plan_bin, monkeypatch):
    """A build whose merge lacks the dependency wait (no sm_90 code) launches it plainly, so the
    plan is the MUSE_ATTN_PDL=0 plan."""
    plain = _plans(plan_bin, monkeypatch, MUSE_ATTN_PDL="0")
    assert _plans(plan_bin, monkeypatch, STUB_MERGE_WAITS="0") == plain


@pytest.mark.parametrize("override, kernel", [
    ({"MUSE_ATTN_PAIRS": "1", "MUSE_ATTN_PINGPONG": "0"}, "two_tile"),
    ({"MUSE_ATTN_PAIRS": "0", "MUSE_ATTN_PINGPONG": "0"}, "per_tile"),
    ({"MUSE_ATTN_PINGPONG": "1", "MUSE_ATTN_PP_TWO_PAIRS": "0"}, "pingpong"),
    ({"MUSE_ATTN_PINGPONG": "1", "MUSE_ATTN_PP_TWO_PAIRS": "1"}, "pingpong_two_pairs")])
def test_h200_forced_split_kernels(plan_bin, monkeypatch, override, kernel):
    for name, plan in _plans(plan_bin, monkeypatch, **override).items():
        assert plan["split_kernel"] == (kernel if name.endswith("-d64") else "per_tile"), (
            name, plan)


@pytest.mark.parametrize("major", [8, 10])
def test_other_gpus_run_neither_variant_by_default(plan_bin, monkeypatch, major):
    """The variants are tuned for sm_90 only: an A100 gets plain launches and the plain split
    kernel, a B200 PDL by size and the plain split kernel."""
    for name, plan in _plans(plan_bin, monkeypatch, major=major).items():
        assert plan["split_kernel"] == "per_tile" and not plan["split_fill_ring"], (name, plan)
        if major < 9:
            assert not plan["merge_pdl"], (name, plan)
