#!/usr/bin/env bash
# Session 49: the per-group pool of tail tiles with the static loop left bare (its last four
# iterations and the pool in a second copy of the loop body; -DMUSE_ATTN_PP2_POOL=k). Forced
# checks (short, odd, padding requests), then measure.sh: this tree, k = 2, and the same code
# never pooled (k = 100000). Output under $OUT.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CFG=${CFG:-"32768 8 0 0 131072 2 0 0 32768 16 0 0"}
B="nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -x cu -I ffi benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc ffi/gpu/merge_kernel.cu.cc"
for k in 2 100000; do $B -DMUSE_ATTN_PP2_POOL=$k -o /tmp/kb_pool$k & done; wait
POISON="2048 3 0 0 8192 5 0 0 1000 7 0 5 4096 2 2048 0 32768 3 0 0 131072 1 0 300 8192 4 0 2 131072 3 0 0 65536 5 0 7"
for k in 2 100000; do
  for poison in 0 1; do
    res=$(MUSE_KB_CHECK=1 MUSE_KB_POISON=$poison MUSE_ATTN_PINGPONG=1 MUSE_ATTN_PP_TWO_PAIRS=1 timeout 100 /tmp/kb_pool$k $POISON 2>&1 | grep -E "^check")
    echo "== forced check pool $k poison=$poison: $(grep -c PASS <<<"$res") PASS, $(grep -c FAIL <<<"$res") FAIL"
    grep FAIL <<<"$res" | head -5
  done
done
NO_COLD=1 KB_ARGS="$CFG" FLAG_VARIANTS="peeled2:-DMUSE_ATTN_PP2_POOL=2 peelednever:-DMUSE_ATTN_PP2_POOL=100000" OUT=$OUT \
  bash benchmarks/experiments/measure.sh --no-patches >/dev/null 2>&1
cat "$OUT/experiments.txt"
