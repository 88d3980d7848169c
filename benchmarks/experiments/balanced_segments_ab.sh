#!/usr/bin/env bash
# balanced_segments.patch (a group's tiles cut into min(splits, tiles) segments whose lengths
# differ by at most one tile, instead of ceil(tiles / splits)-tile segments) against this tree,
# kernels alone (benchmarks/kernel_bench.cu, sm_90a), one device call (~2 min on an H200):
# checks of the patched build (clean and poisoned, the float64 reference of kb_check.h) at the
# split counts that fill 2 CTAs an SM exactly, then three rounds alternating. The pairs to
# compare: 128k R=2 at 64 (this tree's count: 256 CTAs, 8 SMs with one) against 66 patched (264
# CTAs, 2 an SM on every SM, 31-32 tiles); 128k R=1 128 / 132; 32k R=2 64 / 66; 32k R=1 128 / 132.
set -u -o pipefail
cd "$(dirname "$0")/../.."
rm -rf /tmp/bal && mkdir -p /tmp/bal && cp -r ffi benchmarks /tmp/bal/
patch -s -d /tmp/bal -p1 < benchmarks/experiments/balanced_segments.patch || { echo "patch failed"; exit 1; }
B="nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -x cu"
$B -I ffi -o /tmp/kb benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc ffi/gpu/merge_kernel.cu.cc &
(cd /tmp/bal && $B -I ffi -o /tmp/kbb benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc ffi/gpu/merge_kernel.cu.cc) &
wait
[[ -x /tmp/kb && -x /tmp/kbb ]] || { echo "build failed"; exit 1; }
CFG="131072 2 0 64 131072 2 0 66 131072 1 0 128 131072 1 0 132 32768 2 0 64 32768 2 0 66 32768 1 0 128 32768 1 0 132 131072 4 0 33 32768 8 0 16"
CHK="131072 2 0 66 131072 1 0 132 32768 2 0 66 32768 1 0 132 131072 4 0 33 2048 3 0 5 1000 7 0 5 4096 2 2048 7"
POISON="2048 3 0 5 8192 5 0 7 1000 7 0 5 4096 2 2048 3 32768 3 0 66 131072 1 0 300"
short() { awk '/graph/ {print $2, $3, $4, $5, $(NF-3)}' | tr '\n' ';'; echo; }
checks() {
  local label=$1; shift
  local out rc
  out=$(env "$@" 2>&1); rc=$?
  echo "$out" | grep -E "^check" | grep -v PASS | cut -c1-140
  echo "$label: rc=$rc, $(echo "$out" | grep -c '^check.*PASS') PASS of $(echo "$out" | grep -c '^check') check lines"
}
echo "== checks, balanced"
checks clean MUSE_KB_CHECK=1 timeout 120 /tmp/kbb $CHK
checks poisoned MUSE_KB_CHECK=1 MUSE_KB_POISON=1 timeout 60 /tmp/kbb $POISON
for r in 1 2 3; do
  echo "== main, round $r"; timeout 60 /tmp/kb $CFG | short
  echo "== balanced, round $r"; timeout 60 /tmp/kbb $CFG | short
done
