#!/usr/bin/env bash
# The architecture-dependent GPU tests on two builds of this tree, on an sm_90 GPU (device tool):
# the default one (editable, sm_90a + compute_90) and one built for sm_90 only
# (CMAKE_CUDA_ARCHITECTURES=90-real, in /tmp/t90): there the warpgroup MMA and the ping-pong
# kernel's two-pair form are not in the build, so the kernels take their mma.sync path and the
# plan one pair a CTA; the tests must expect that (_ffi.sm90a_code()). Uninstalls the editable
# install before the second run (it would shadow /tmp/t90): `device_check.sh build` after it.
#   bash scripts/sm90_only_check.sh            # ~70 s on an H200 (session 44)
set -u
R=$PWD; export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
rm -rf /tmp/t90 /tmp/b90
(cd /tmp && timeout 240 python3 -m pip install --no-build-isolation --no-deps -q --target /tmp/t90 -C build-dir=/tmp/b90 -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90-real "$R" > /tmp/b90.log 2>&1; echo "t90 build rc=$?" >> /tmp/b90.log) &
bp=$!
timeout 200 python3 -m pip install --no-build-isolation --no-deps -q -e "$R" > /tmp/be.log 2>&1; echo "editable build rc=$?"
run_tests() {  # the architecture-dependent tests, from /tmp (so that the tree's package is not imported)
  (cd /tmp && timeout 170 python3 -m pytest -q -p no:cacheprovider -p no:xdist \
     -k "launch_plans or sees or cuda_arch or sm90a or two_tile or four_tile" \
     "$R/tests/test_gpu_launch_modes.py" "$R/tests/test_cpu_ffi.py" "$R/tests/test_gpu.py" 2>&1 | tail -15)
}
run_tests
python3 -m pip uninstall -y -q jax_muse_attn >/dev/null 2>&1
wait $bp; tail -3 /tmp/b90.log; grep -o "CMAKE_CUDA_ARCHITECTURES:[A-Z]*=.*" /tmp/b90/CMakeCache.txt
(cd /tmp && PYTHONPATH=/tmp/t90 python3 -c "from jax_muse_attn import _ffi; print(_ffi.__file__, _ffi.cuda_architectures(), _ffi.sm90a_code())")
PYTHONPATH=/tmp/t90 run_tests
