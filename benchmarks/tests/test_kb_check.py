"""benchmarks/kb_check.h, the naive float64 reference that kernel_bench (MUSE_KB_CHECK=1) checks
the CUDA kernels against, itself checked on the CPU: compiled with the host C++ compiler into a
small harness, it must pass the CPU handler's output of poisoned, padded cases and fail an output
with one wrong row."""

import subprocess

import numpy as np
import pytest

HARNESS = r"""
#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>
#include "kb_check.h"

template <typename T>
std::vector<T> slurp(const char* path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

int main(int argc, char** argv) {
  // argv: dir R NQ Hq Hkv D pages window num_blocks num_reqs scale
  const std::string dir = argv[1];
  auto kv = slurp<uint16_t>((dir + "/kv.bin").c_str());
  auto q = slurp<uint16_t>((dir + "/q.bin").c_str());
  auto out = slurp<uint16_t>((dir + "/out.bin").c_str());
  auto table = slurp<int32_t>((dir + "/table.bin").c_str());
  auto lens = slurp<int32_t>((dir + "/lens.bin").c_str());
  kb_check::Problem p{};
  p.num_requests = std::atoi(argv[2]); p.tokens = std::atoi(argv[3]); p.num_q_heads = std::atoi(argv[4]);
  p.num_kv_heads = std::atoi(argv[5]); p.head_dim = std::atoi(argv[6]); p.pages = std::atoi(argv[7]);
  p.window = std::atoi(argv[8]); p.num_blocks = std::atoll(argv[9]); p.num_reqs = std::atoi(argv[10]);
  p.scale = std::atof(argv[11]);
  p.kv = kv.data(); p.q = q.data(); p.table = table.data(); p.seq_lens = lens.data();
  std::vector<int> reqs;
  for (int r = 0; r < p.num_requests; ++r) reqs.push_back(r);
  const kb_check::Result res = kb_check::check(p, out.data(), reqs);
  std::printf("%lld %lld %.6g\n", (long long)res.checked, (long long)res.bad, res.max_err);
  return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory, build_host_harness):
    return build_host_harness(tmp_path_factory, "kb_check", HARNESS)


def _run(harness, tmp_path, c, out):
    bits = lambda a: np.asarray(a).view(np.uint16)  # noqa: E731
    bits(c.kv).tofile(tmp_path / "kv.bin")
    bits(c.q).tofile(tmp_path / "q.bin")
    out.tofile(tmp_path / "out.bin")
    np.ascontiguousarray(c.bt_np[: c.R], np.int32).tofile(tmp_path / "table.bin")
    np.ascontiguousarray(c.sl_np[: c.R], np.int32).tofile(tmp_path / "lens.bin")
    R, Hq, D = c.R, c.q.shape[1], c.q.shape[2]
    args = [harness, str(tmp_path), R, c.NQ, Hq, c.kv.shape[1], D, c.P, c.window or 0,
            c.kv.shape[0], c.num_reqs, c.scale]
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    checked, bad, max_err = r.stdout.split()
    return int(checked), int(bad), float(max_err)


@pytest.mark.parametrize("window", [None, 16])
def test_kb_check_passes_the_cpu_handler_and_fails_a_wrong_row(rng, make_case, harness, tmp_path, window):
    c = make_case(rng, 5, [100, 50, 191, 20, 7], P=12, window=window, num_reqs=4)
    out = np.asarray(c.run("ffi")).view(np.uint16).copy()
    checked, bad, max_err = _run(harness, tmp_path, c, out)
    assert checked == out.size and bad == 0, (bad, max_err)
    wrong = out.copy()
    wrong[8 * 2 + 3, 5] = wrong[8 * 2 + 3, 6]  # request 2, token 3: head 5 gets head 6's row
    _, bad, max_err = _run(harness, tmp_path, c, wrong)
    assert bad > 0 and max_err > 1e-2
    padded = out.copy()
    padded[8 * 4] = np.uint16(0x3f80)  # a padding request's row must be zero (1.0 here)
    _, bad, _ = _run(harness, tmp_path, c, padded)
    assert bad > 0
