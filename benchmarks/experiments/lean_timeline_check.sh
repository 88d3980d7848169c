#!/usr/bin/env bash
# Session 49: how much the lean timeline build (-DMUSE_ATTN_TIMELINE_LEAN) perturbs the two-pair
# kernel (graph us, plain build and lean build alternating, three rounds), and its per-pair ends
# (pair_ends.py) at the bandwidth edge. Output under $OUT.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CFG=${CFG:-"32768 8 0 0 131072 2 0 0 32768 16 0 0"}
B="nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -x cu -I ffi benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc ffi/gpu/merge_kernel.cu.cc"
$B -o /tmp/kb & $B -DMUSE_ATTN_TIMELINE -DMUSE_ATTN_TIMELINE_LEAN -o /tmp/kbtl & wait
short() { awk '/graph/ {printf "%s %s %s %s %s; ", $1, $2, $3, $5, $(NF-3)} END {print ""}'; }
for r in 1 2 3; do
  echo "== round $r plain: $(timeout 80 /tmp/kb $CFG | short)"
  echo "== round $r lean:  $(MUSE_KB_TL_CSV=$OUT/tl_lean_run$r.csv timeout 80 /tmp/kbtl $CFG | short)"
done
python3 benchmarks/experiments/pair_ends.py "$OUT"/tl_lean_run*.csv
