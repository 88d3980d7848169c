"""The FP8 dequantization rule (ffi/muse_attn/fp8.h, shared by every handler) against ml_dtypes:
every byte of both formats decodes exactly, and bf16(fp32(scale * value)) rounds as numpy does."""

import subprocess

import ml_dtypes
import numpy as np
import pytest

from conftest import build_host_harness

HARNESS = r"""
#include <cstdio>
#include "muse_attn/fp8.h"
int main() {
  float scale;
  while (std::scanf("%f", &scale) == 1)
    for (int fnuz = 0; fnuz < 2; ++fnuz)
      for (unsigned b = 0; b < 256; ++b)
        std::printf("%08x %04x\n", muse_attn::fp8_float_bits(muse_attn::fp8_decode(b, fnuz)),
                    muse_attn::fp8_dequantize_bf16(b, scale, fnuz));
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    return build_host_harness(tmp_path_factory, "fp8_rule", HARNESS)


@pytest.mark.parametrize("scale", [1.0, 0.0137, 3.5e-3, 117.25, -2.0])
def test_decode_and_dequantize_match_ml_dtypes(harness, scale):
    out = subprocess.run([harness], input=f"{scale!r}\n", capture_output=True, text=True,
                         check=True).stdout.split()
    got_f = np.array([int(x, 16) for x in out[0::2]], np.uint32).view(np.float32)
    got_b = np.array([int(x, 16) for x in out[1::2]], np.uint16)
    codes = np.arange(256, dtype=np.uint8)
    s = np.float32(scale)
    for i, dtype in enumerate((ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz)):
        want = codes.view(dtype).astype(np.float32)
        f = got_f[256 * i:256 * (i + 1)]
        np.testing.assert_array_equal(np.isnan(f), np.isnan(want), err_msg=str(dtype))
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(f[ok], want[ok], err_msg=str(dtype))
        deq = (want * s).astype(ml_dtypes.bfloat16).view(np.uint16)
        b = got_b[256 * i:256 * (i + 1)]
        np.testing.assert_array_equal(b[ok], deq[ok], err_msg=f"{dtype} scale {scale}")
        assert (b[~ok] == 0x7FC0).all()
