#!/usr/bin/env bash
# split_kernel_duo (two warpgroups a CTA, a segment each, their score MMAs in turn) forced by
# MUSE_ATTN_DUO=1 against the shipped plan (MUSE_ATTN_DUO=0) and against the duo without turns
# (-DMUSE_ATTN_DUO_NO_TURNS), kernels alone, in one device call:
# kernel_bench built once; its float64 check of the duo plan first (clean and poisoned; a hang
# in the turns shows as a timeout), then rounds of both plans alternating (CUDA graph, us a call).
#   bash benchmarks/experiments/duo_ab.sh          (DUO_ROUNDS, DUO_ARGS / DUO_CHECK_ARGS: configs)
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$ROOT/device_out}"; mkdir -p "$OUT"; LOG="$OUT/duo_ab.txt"; : >"$LOG"
build() {  # binary nvcc-flags...
  local out=$1; shift
  nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -I "$ROOT/ffi" "$@" -o "$out" -x cu \
    "$ROOT/benchmarks/kernel_bench.cu" "$ROOT/ffi/gpu/split_kernel.cu.cc" "$ROOT/ffi/gpu/merge_kernel.cu.cc" \
    >"$out.build.log" 2>&1 || { echo "build of $out failed"; tail -n 30 "$out.build.log"; exit 1; }
}
build /tmp/kb_duo & build /tmp/kb_duo_nt -DMUSE_ATTN_DUO_NO_TURNS & wait
# L R window splits: 4-tile (fill ring), 2-tile (pairs) and longer segments, odd split counts
# (a last CTA with one team idle), short and one-tile segments, many empty segments.
CHECK_ARGS=${DUO_CHECK_ARGS:-"8192 4 0 0 32768 1 0 0 16384 2 0 0 8192 2 0 0 8192 1 0 0 2048 4 0 0 32768 4 2048 0 32768 1 2048 0 3000 5 0 7 1000 3 0 5 8192 3 0 0 8192 8 0 0 1000 2 0 300 12345 2 0 33 32768 2 0 0 4096 16 0 0"}
ARGS=${DUO_ARGS:-"8192 4 0 0 32768 1 0 0 16384 2 0 0 8192 2 0 0 8192 1 0 0 2048 4 0 0 32768 4 2048 0 32768 2 0 0 8192 8 0 0 2048 16 0 0"}
export MUSE_ATTN_PINGPONG=0  # the duo runs where the ping-pong kernel does not (launch_plan.h)
for poison in 0 1; do
  res=$(env MUSE_ATTN_DUO=1 MUSE_KB_CHECK=1 $( ((poison)) && echo MUSE_KB_POISON=1) timeout 120 /tmp/kb_duo $CHECK_ARGS 2>&1)
  echo "rc=$? $(grep -c PASS <<<"$res") PASS, $(grep -c FAIL <<<"$res") FAIL (duo, poison=$poison)" | tee -a "$LOG"
  grep -E "FAIL|rror" <<<"$res" | head -n 5 | tee -a "$LOG"
done
# v: 0 the shipped plan, 1 the duo, nt the duo without turns (-DMUSE_ATTN_DUO_NO_TURNS); a
# suffix c: with MUSE_ATTN_DUO_CARVEOUT=${DUO_CARVEOUT:-100} (the duo's preferred carveout, %)
for round in $(seq 1 "${DUO_ROUNDS:-3}"); do
  for v in ${DUO_VARIANTS:-0 1 nt}; do
    echo "== round $round duo=$v" | tee -a "$LOG"
    bin=/tmp/kb_duo; [[ $v == nt* ]] && bin=/tmp/kb_duo_nt
    carve=""; [[ $v == *c ]] && carve="MUSE_ATTN_DUO_CARVEOUT=${DUO_CARVEOUT:-100}"
    env MUSE_ATTN_DUO=$([[ $v == 0 ]] && echo 0 || echo 1) $carve timeout 150 $bin $ARGS 2>&1 | grep "us/call" | \
      awk '{printf "%-5s %-9s %-6s %-12s %-14s split %7s merge %6s both %7s graph %7s\n", $1, $2, $3, $4, $5, $(NF-12), $(NF-9), $(NF-6), $(NF-3)}' | tee -a "$LOG"
  done
done
