# The ping-pong kernel as two pairs a CTA (one CTA an SM, MUSE_ATTN_PP_TWO_PAIRS=1) against one pair a
# CTA (two CTAs an SM, =0), kernels alone, one binary (written in session 41, run in 42: benchmarks/
# results/h200_v42_pp2_kb.txt; PP2_LONG=1 runs the long-segment set of its second call instead,
# three rounds, no base, no timeline, no poisoned check): checks
# (clean at the ping-pong configs, poisoned with the ping-pong kernel forced; each run's exit status and
# its count of check lines printed: a hang or a trap shows as rc != 0 or missing lines), two A/B rounds,
# then both forms' per-segment stamps ($OUT/tl_pp1.csv, tl_pp2.csv: since session 42 each pair
# stamps as the one-pair CTA of its segment would; not yet run so). With .kb_base carried (another
# commit's sources: `rm -rf .kb_base && mkdir .kb_base && git archive REF ffi benchmarks | tar -x -C
# .kb_base`; in session 42 the commit before the two-pair form, whose one-pair kernel had its body
# inline), the base's kernels run in each round too.
set -u -o pipefail
cd "$(dirname "$0")/.."
rm -f /tmp/kb /tmp/kbtl /tmp/kb_base
B="nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -x cu"
$B -I ffi -o /tmp/kb benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc ffi/gpu/merge_kernel.cu.cc &
$B -I ffi -DMUSE_ATTN_TIMELINE -o /tmp/kbtl benchmarks/kernel_bench.cu ffi/gpu/split_kernel.cu.cc ffi/gpu/merge_kernel.cu.cc &
if [[ -d .kb_base ]]; then
  $B -I .kb_base/ffi -o /tmp/kb_base .kb_base/benchmarks/kernel_bench.cu .kb_base/ffi/gpu/split_kernel.cu.cc .kb_base/ffi/gpu/merge_kernel.cu.cc &
fi
wait
[[ -x /tmp/kb && -x /tmp/kbtl ]] || { echo "build failed"; exit 1; }
CFG="32768 4 0 0 32768 8 0 0 32768 16 0 0 131072 1 0 0 131072 2 0 0 131072 4 0 0 131072 8 0 0 8192 16 0 0"
if [[ -n "${PP2_LONG:-}" ]]; then
  CFG="131072 4 0 32 131072 4 0 0 65536 8 0 0 65536 16 0 0 131072 8 0 0 32768 16 0 0 131072 16 0 8 131072 16 0 0 32768 8 0 0 131072 2 0 0"
fi
POISON="2048 3 0 0 8192 5 0 0 1000 7 0 5 4096 2 2048 0 32768 3 0 0 131072 1 0 300"
short() { awk '/graph/ {print $2, $3, $5, $(NF-3)}' | tr '\n' ';'; echo; }
checks() {  # label, then env assignments and kb arguments; 2 check lines a config expected
  local label=$1; shift
  local out rc
  out=$(env "$@" 2>&1); rc=$?
  echo "$out" | grep -E "^check" | grep -v PASS | cut -c1-140
  echo "$label: rc=$rc, $(echo "$out" | grep -c '^check.*PASS') PASS of $(echo "$out" | grep -c '^check') check lines"
}
echo "== checks, two pairs"
checks clean MUSE_KB_CHECK=1 MUSE_ATTN_PP_TWO_PAIRS=1 timeout 150 /tmp/kb $CFG
[[ -n "${PP2_LONG:-}" ]] || checks poisoned MUSE_KB_CHECK=1 MUSE_KB_POISON=1 MUSE_ATTN_PINGPONG=1 MUSE_ATTN_PP_TWO_PAIRS=1 timeout 60 /tmp/kb $POISON
rounds="1 2"; [[ -n "${PP2_LONG:-}" ]] && rounds="1 2 3"
for r in $rounds; do
  echo "== one pair, round $r"; MUSE_ATTN_PP_TWO_PAIRS=0 timeout 80 /tmp/kb $CFG | short
  echo "== two pairs, round $r"; MUSE_ATTN_PP_TWO_PAIRS=1 timeout 80 /tmp/kb $CFG | short
  if [[ -z "${PP2_LONG:-}" && -x /tmp/kb_base ]]; then echo "== base, round $r"; timeout 60 /tmp/kb_base $CFG | short; fi
done
[[ -n "${PP2_LONG:-}" ]] && exit 0
for n in 1 2; do
  echo "== timeline, pairs a CTA: $n"
  MUSE_ATTN_PP_TWO_PAIRS=$((n - 1)) MUSE_KB_TL_CSV=${OUT:-/tmp}/tl_pp$n.csv timeout 60 /tmp/kbtl \
    32768 8 0 16 131072 2 0 64 131072 8 0 16 | grep -E "^full|tiles done|dep wait|SMs with"
done
