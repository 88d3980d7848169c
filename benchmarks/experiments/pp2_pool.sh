#!/usr/bin/env bash
# Session 49: the two-pair kernel's tail from a per-group pool (-DMUSE_ATTN_PP2_POOL=k: about k
# tiles a segment go to the pool; split_kernel.cu.cc), kernels alone against this tree through
# measure.sh (two rounds, checked clean and poisoned), each pool build checked again with the
# two-pair kernel forced on short, odd and padding requests, and the pool's per-pair ends from a
# lean timeline build (pair_ends.py). Output under $OUT.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
POOLS=${POOLS:-"2 4 8"}
CFG=${CFG:-"32768 8 0 0 131072 2 0 0 32768 16 0 0 131072 8 0 0"}
B="nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -x cu -I ffi benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc ffi/gpu/merge_kernel.cu.cc"
for k in $POOLS; do $B -DMUSE_ATTN_PP2_POOL=$k -o /tmp/kb_pool$k & done
$B -DMUSE_ATTN_PP2_POOL=4 -DMUSE_ATTN_TIMELINE -DMUSE_ATTN_TIMELINE_LEAN -o /tmp/kbtl_pool4 &
wait
POISON="2048 3 0 0 8192 5 0 0 1000 7 0 5 4096 2 2048 0 32768 3 0 0 131072 1 0 300 8192 4 0 2 131072 3 0 0 65536 5 0 7"
for k in $POOLS; do
  for poison in 0 1; do
    res=$(MUSE_KB_CHECK=1 MUSE_KB_POISON=$poison MUSE_ATTN_PINGPONG=1 MUSE_ATTN_PP_TWO_PAIRS=1 timeout 100 /tmp/kb_pool$k $POISON 2>&1 | grep -E "^check")
    echo "== forced check pool $k poison=$poison: $(grep -c PASS <<<"$res") PASS, $(grep -c FAIL <<<"$res") FAIL"
    grep FAIL <<<"$res" | head -5
  done
done
fv=""; for k in $POOLS; do fv+="pool$k:-DMUSE_ATTN_PP2_POOL=$k "; done
NO_COLD=1 KB_ARGS="$CFG" FLAG_VARIANTS="$fv" OUT=$OUT bash benchmarks/experiments/measure.sh --no-patches >/dev/null 2>&1
cat "$OUT/experiments.txt"
for run in 1 2; do
  MUSE_KB_TL_CSV=$OUT/tl_pool4_run$run.csv timeout 80 /tmp/kbtl_pool4 $CFG | grep -E "^full"
done
python3 benchmarks/experiments/pair_ends.py "$OUT"/tl_pool4_run*.csv
