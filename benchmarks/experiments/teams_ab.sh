#!/usr/bin/env bash
# Split CTAs of one team (4 warps) against two (8 warps, tiles interleaved): .kb_base (HEAD), this
# tree with MUSE_ATTN_SPLIT_TEAMS=1 and =2, alternating, two rounds, hot and cold; then checks.
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$ROOT/device_out}"; mkdir -p "$OUT"; LOG="$OUT/teams_ab.txt"; : >"$LOG"
build() { nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -I "$2/ffi" $3 -o "/tmp/$1" -x cu \
  "$2/benchmarks/kernel_bench.cu" "$2/ffi/gpu/split_kernel.cu.cc" "$2/ffi/gpu/merge_kernel.cu.cc" >"/tmp/$1.log" 2>&1 || cat "/tmp/$1.log"; }
build kb_tree "$ROOT" "" & build kb_base "$ROOT/.kb_base" "" & wait
ARGS=${KB_ARGS:-"32768 1 2048 0 32768 1 2048 17 32768 2 2048 0 32768 4 2048 0 32768 4 2048 16 32768 8 2048 0 2048 1 0 0 2048 1 0 16 2048 2 0 0 2048 4 0 0 8192 1 0 0 8192 1 0 32 8192 2 0 0 8192 4 0 0 32768 1 0 0 32768 2 0 0 131072 1 0 0 131072 2 0 0"}
short() { awk -v v="$1" '/us\/call/ {if (line) print line; line=sprintf("%-8s %-5s %-9s %-6s %-12s %-6s graph %7s", v, $1, $2, $3, $4, $5, $(NF-3))}
                 /cold/ {line=line sprintf("  cold %7s", $(NF-1))} END {if (line) print line}'; }
for round in 1 2; do
  echo "== round $round base" | tee -a "$LOG"; MUSE_KB_COLD=1 timeout 150 /tmp/kb_base $ARGS 2>&1 | short base | tee -a "$LOG"
  for tm in 1 2; do
    echo "== round $round teams=$tm" | tee -a "$LOG"
    MUSE_ATTN_SPLIT_TEAMS=$tm MUSE_KB_COLD=1 timeout 150 /tmp/kb_tree $ARGS 2>&1 | short "teams$tm" | tee -a "$LOG"
  done
done
for tm in 1 2; do for poison in 0 1; do
  if ((poison)); then export MUSE_KB_POISON=1; else unset MUSE_KB_POISON; fi
  res=$(MUSE_ATTN_SPLIT_TEAMS=$tm MUSE_KB_CHECK=1 timeout 150 /tmp/kb_tree $ARGS 1000 2 0 300 4096 3 256 0 2>&1 | grep -E "^check")
  echo "== check teams=$tm poison=$poison: $(grep -c PASS <<<"$res") PASS, $(grep -c FAIL <<<"$res") FAIL" | tee -a "$LOG"; grep FAIL <<<"$res" | tee -a "$LOG"
done; done
unset MUSE_KB_POISON
if [[ -n "${TEAMS_SAN:-}" ]]; then
  for tool in racecheck memcheck; do
    MUSE_ATTN_SPLIT_TEAMS=2 MUSE_KB_ONCE=1 MUSE_KB_POISON=1 timeout 200 compute-sanitizer --tool $tool --error-exitcode 1 \
      /tmp/kb_tree 2048 4 0 0 4096 3 256 0 32768 2 2048 0 8192 5 0 0 1000 2 0 3 >/tmp/san.log 2>&1
    echo "== $tool teams=2 poisoned rc=$? $(tail -n 1 /tmp/san.log)" | tee -a "$LOG"
  done
fi
