#!/usr/bin/env bash
# The knobs are in ffi/ at 29f6332 only (removed after session 50's two calls): run it on that tree
# (git worktree add /tmp/swap 29f6332). Results: benchmarks/results/h200_v50_pair_swap_check{,2}.txt.
# Session 50: why does pair 1 (warps 8-15) of the two-pair kernel end its segment before pair 0
# (session 49, pair_ends.py)? Three lean timeline builds (-DMUSE_ATTN_TIMELINE_LEAN): the tree;
# the pairs' segments swapped (MUSE_ATTN_PP2_SWAP_SEGMENTS: pair 0 on 2x + 1); the pairs' shared
# memory halves swapped (MUSE_ATTN_PP2_SWAP_SMEM). pair_ends.py reports odd - even segments: the
# segment's parity is the pair in the tree and the smem build, the other pair in the segment build.
# Plain builds of the three too, timed alternating (do the knobs cost anything by themselves?).
# VARIANTS="tree bar all" (session 50's device call 4; call 3 ran the default): the pairs' barrier ids and code copies swapped
# (MUSE_ATTN_PP2_SWAP_BARRIERS: pair 0 runs run_pp_pair<D, 6>, pair 1 run_pp_pair<D, 1>); all three
# swapped (warps 8-15 then do all that warps 0-7 did: what is left is the hardware warp slot).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CFG=${CFG:-"32768 8 0 0 131072 2 0 0"}
B="nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -x cu -I ffi benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc ffi/gpu/merge_kernel.cu.cc"
L="-DMUSE_ATTN_TIMELINE -DMUSE_ATTN_TIMELINE_LEAN"
VARIANTS=${VARIANTS:-"tree seg smem"}
declare -A FLAG=([tree]="" [seg]="-DMUSE_ATTN_PP2_SWAP_SEGMENTS" [smem]="-DMUSE_ATTN_PP2_SWAP_SMEM" [bar]="-DMUSE_ATTN_PP2_SWAP_BARRIERS"
           [all]="-DMUSE_ATTN_PP2_SWAP_SEGMENTS -DMUSE_ATTN_PP2_SWAP_SMEM -DMUSE_ATTN_PP2_SWAP_BARRIERS")
for v in $VARIANTS; do $B ${FLAG[$v]} -o /tmp/kb_$v & $B $L ${FLAG[$v]} -o /tmp/tl_$v & done
wait
short() { awk '/graph/ {printf "%s %s %s %s %s; ", $1, $2, $3, $5, $(NF-3)} END {print ""}'; }
for r in 1 2 3; do
  for v in $VARIANTS; do
    echo "== round $r $v plain: $(timeout 80 /tmp/kb_$v $CFG | short)"
  done
  for v in $VARIANTS; do
    echo "== round $r $v lean:  $(MUSE_KB_TL_CSV=$OUT/tl_${v}_run$r.csv timeout 80 /tmp/tl_$v $CFG | short)"
  done
done
for v in $VARIANTS; do
  echo "== pair_ends $v (odd - even: $([ $v = seg ] || [ $v = all ] && echo 'pair 0 - pair 1' || echo 'pair 1 - pair 0'))"
  python3 benchmarks/experiments/pair_ends.py "$OUT"/tl_${v}_run*.csv
done
for v in $VARIANTS; do
  [ $v = tree ] && continue
  MUSE_KB_CHECK=1 timeout 150 /tmp/kb_$v $CFG > "$OUT/check_$v.txt" 2>&1
  echo "== check $v (rc $?): $(grep -c ': PASS' "$OUT/check_$v.txt") PASS lines, $(grep -c FAIL "$OUT/check_$v.txt") FAIL"
done
