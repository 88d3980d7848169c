#!/usr/bin/env bash
# Session 49: split_kernel_pp2 with both pairs in one copy of run_pp_pair's code (barrier ids at run
# time, -DMUSE_ATTN_PP2_ONE_BODY: 1480 sm_90a instructions against 2920) against this tree, kernels
# alone: checks (clean at the edge configs, poisoned with the two-pair kernel forced), two rounds.
set -u -o pipefail
cd "$(dirname "$0")/../.."
B="nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -x cu -I ffi benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc ffi/gpu/merge_kernel.cu.cc"
$B -o /tmp/kb & $B -DMUSE_ATTN_PP2_ONE_BODY -o /tmp/kb1 & wait
CFG=${CFG:-"32768 8 0 0 131072 2 0 0 32768 16 0 0"}
echo "check clean: $(MUSE_KB_CHECK=1 timeout 60 /tmp/kb1 $CFG 2>&1 | grep -E '^check' | grep -c PASS) PASS of 6"
echo "check poisoned, forced: $(MUSE_KB_CHECK=1 MUSE_KB_POISON=1 MUSE_ATTN_PINGPONG=1 MUSE_ATTN_PP_TWO_PAIRS=1 timeout 60 /tmp/kb1 2048 3 0 0 1000 7 0 5 32768 3 0 0 8192 5 0 0 2>&1 | grep -E '^check' | grep -c PASS) PASS of 8"
short() { awk '/graph/ {printf "%s %s %s %s; ", $2, $3, $5, $(NF-3)} END {print ""}'; }
for r in 1 2; do
  echo "round $r tree:     $(timeout 60 /tmp/kb $CFG | short)"
  echo "round $r one body: $(timeout 60 /tmp/kb1 $CFG | short)"
done
