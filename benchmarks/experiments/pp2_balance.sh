#!/usr/bin/env bash
# Session 49: are the two pairs of a two-pair ping-pong CTA (split_kernel_pp2) unequal in speed,
# as session 41 found an SM's two one-pair CTAs? (1) Per-pair stamps from a lean timeline build
# (-DMUSE_ATTN_TIMELINE_LEAN: start, tiles done and partials only; no spills, unlike the full
# timeline build, which spills 24 bytes in split_kernel_pp2 and ran it 4-12 us slow in session 43),
# its graph time beside the plain build's; (2) a static skew between the pairs
# (-DMUSE_ATTN_PP2_SKEW=k: pair 0 takes k tiles of pair 1's segment) through measure.sh, kernels
# alone, checked clean and poisoned, and the skewed builds checked again with the two-pair kernel
# forced on short, odd and padding requests. Output under $OUT.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B="nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -x cu -I ffi benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc ffi/gpu/merge_kernel.cu.cc"
$B -o /tmp/kb & $B -DMUSE_ATTN_TIMELINE -DMUSE_ATTN_TIMELINE_LEAN -o /tmp/kbtl & wait
CFG=${CFG:-"32768 8 0 0 131072 2 0 0 32768 16 0 0 131072 8 0 0"}
echo "== plain build / lean timeline build (graph us), two pairs as planned"
for r in 1 2; do
  timeout 80 /tmp/kb $CFG | awk '/graph/ {printf "%s %s %s %s; ", $2, $3, $5, $(NF-3)} END {print ""}'
  timeout 80 /tmp/kbtl $CFG | awk '/graph/ {printf "%s %s %s %s; ", $2, $3, $5, $(NF-3)} END {print ""}'
done
for run in 1 2 3; do
  MUSE_KB_TL_CSV=$OUT/tl_pp2_run$run.csv timeout 80 /tmp/kbtl $CFG | grep -E "^full|tiles done|partials"
  MUSE_ATTN_PP_TWO_PAIRS=0 MUSE_KB_TL_CSV=$OUT/tl_pp1_run$run.csv timeout 80 /tmp/kbtl $CFG | grep -E "^full|tiles done"
done
python3 benchmarks/experiments/pair_ends.py "$OUT"/tl_pp2_run*.csv
python3 benchmarks/experiments/pair_ends.py "$OUT"/tl_pp1_run*.csv
POISON="2048 3 0 0 8192 5 0 0 1000 7 0 5 4096 2 2048 0 32768 3 0 0 131072 1 0 300 8192 4 0 2"
for k in ${SKEWS:-2 4 -2}; do
  $B -DMUSE_ATTN_PP2_SKEW=$k -o /tmp/kb_skew$k &
done
wait
for k in ${SKEWS:-2 4 -2}; do
  for poison in 0 1; do
    res=$(MUSE_KB_CHECK=1 MUSE_KB_POISON=$poison MUSE_ATTN_PINGPONG=1 MUSE_ATTN_PP_TWO_PAIRS=1 timeout 100 /tmp/kb_skew$k $POISON 2>&1 | grep -E "^check")
    echo "== forced check skew $k poison=$poison: $(grep -c PASS <<<"$res") PASS, $(grep -c FAIL <<<"$res") FAIL"
  done
done
fv=""; for k in ${SKEWS:-2 4 -2}; do fv+="skew${k/-/m}:-DMUSE_ATTN_PP2_SKEW=$k "; done
NO_COLD=1 KB_ARGS="$CFG" FLAG_VARIANTS="$fv" OUT=$OUT bash benchmarks/experiments/measure.sh --no-patches >/dev/null 2>&1
cat "$OUT/experiments.txt"
