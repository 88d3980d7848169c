#!/usr/bin/env bash
# The kernels alone (benchmarks/kernel_bench.cu) of this tree against this tree with each patch of
# benchmarks/experiments applied (and against .kb_base, another commit's ffi/ and benchmarks/, if
# carried: see scripts/device_check.sh kbab), in one device call: every variant built in
# parallel, then two rounds, variants alternating, hot (CUDA graph) and cold (MUSE_KB_COLD=1)
# figures; then each patched build's outputs against the float64 reference (MUSE_KB_CHECK=1,
# clean and poisoned). Logs to $OUT/experiments.txt.
#   bash benchmarks/experiments/measure.sh [PATCH_NAME ... | --no-patches]   (default: every *.patch)
#   KB_ARGS="L R window splits ..." to pick the configs.   BUILD_ONLY=1: build, run nothing.
#   FLAG_VARIANTS="name:-DKNOB=V[,-DKNOB2=W] ..." adds this tree built with those nvcc flags
#   (the knobs of kernel_bench.cu, e.g. s6:-DMUSE_ATTN_SPLIT_STAGES_D64=6); checked like patches.
#   ENV_VARIANTS="name[@variant]:VAR=V[,VAR2=W] ..." adds this tree's binary (or a FLAG_VARIANTS
#   variant's, after @) run with that environment (e.g. pp1:MUSE_ATTN_PINGPONG=1 against
#   pp0:MUSE_ATTN_PINGPONG=0; late1@late:MUSE_ATTN_FILL_RING=1); checked like patches.
#   NO_COLD=1: hot (graph) figures only.
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$ROOT/device_out}"
mkdir -p "$OUT"
LOG="$OUT/experiments.txt"
: >"$LOG"
names=("$@")
if [[ "${names[0]:-}" == --no-patches ]]; then  # this tree (+ FLAG_VARIANTS, .kb_base) only
  names=()
elif ((${#names[@]} == 0)); then
  shopt -s nullglob  # no patch waiting: this tree against .kb_base only
  for p in "$ROOT"/benchmarks/experiments/*.patch; do names+=("$(basename "$p" .patch)"); done
fi
ARGS=${KB_ARGS:-"32768 1 2048 0 32768 4 2048 0 32768 16 2048 0 2048 1 0 0 2048 16 0 0 8192 2 0 0 32768 1 0 0 32768 2 0 0 131072 1 0 0 131072 2 0 0 131072 4 0 0"}
build() {  # name src_dir [nvcc flags...]
  local name=$1 dir=$2
  shift 2
  nvcc -O3 -std=c++17 --use_fast_math -arch=${KB_ARCH:-sm_90a} "$@" -I "$dir/ffi" -o "/tmp/exp_$name" -x cu \
    "$dir/benchmarks/kernel_bench.cu" "$dir/ffi/gpu/split_kernel.cu.cc" "$dir/ffi/gpu/merge_kernel.cu.cc" \
    >"/tmp/exp_$name.build.log" 2>&1 || { echo "build of $name failed:"; cat "/tmp/exp_$name.build.log"; }
}
variants=(tree)
build tree "$ROOT" &
if [[ -d "$ROOT/.kb_base/ffi" ]]; then variants=(base "${variants[@]}"); build base "$ROOT/.kb_base" & fi
for fv in ${FLAG_VARIANTS:-}; do
  IFS=, read -r -a flags <<<"${fv#*:}"
  variants+=("${fv%%:*}"); build "${fv%%:*}" "$ROOT" "${flags[@]}" &
done
for n in "${names[@]}"; do
  src="/tmp/exp_src_$n"
  rm -rf "$src" && mkdir -p "$src" && cp -r "$ROOT/ffi" "$ROOT/benchmarks" "$ROOT/jax_muse_attn" "$ROOT/tests" "$ROOT/README.md" "$src/"
  if (cd "$src" && patch -p1 -s -f --no-backup-if-mismatch <"$ROOT/benchmarks/experiments/$n.patch" >/dev/null); then
    variants+=("$n"); build "$n" "$src" &
  else
    echo "$n.patch does not apply to this tree" | tee -a "$LOG"
  fi
done
wait
for ev in ${ENV_VARIANTS:-}; do  # a built variant's binary run with an environment (a wrapper)
  IFS=, read -r -a envs <<<"${ev#*:}"
  head=${ev%%:*}; name=${head%%@*}; bin=tree
  [[ $head == *@* ]] && bin=${head#*@}
  printf '#!/usr/bin/env bash\nexec env %s /tmp/exp_%s "$@"\n' "${envs[*]}" "$bin" >"/tmp/exp_$name"
  chmod +x "/tmp/exp_$name"
  variants+=("$name")
done
for v in "${variants[@]}"; do [[ -x /tmp/exp_$v ]] || echo "no binary for $v" | tee -a "$LOG"; done
[[ -n "${BUILD_ONLY:-}" ]] && { echo "built: ${variants[*]}"; exit 0; }
short() {  # config line + its cold line -> one line: variant config splits launch graph cold
  awk -v v="$1" '/us\/call/ {if (line) print line; line=sprintf("%-16s %-5s %-9s %-6s %-12s %-11s graph %7s", v, $1, $2, $3, $4, $5, $(NF-3))}
                 /cold/ {line=line sprintf("  cold %7s", $(NF-1))} END {if (line) print line}'
}
# '== round': hot and cold of each variant, alternating (figures in us a call)
for round in 1 2; do
  for v in "${variants[@]}"; do
    [[ -x /tmp/exp_$v ]] || continue
    echo "== round $round $v" | tee -a "$LOG"
    # shellcheck disable=SC2086
    env $([[ -z "${NO_COLD:-}" ]] && echo MUSE_KB_COLD=1) timeout 150 "/tmp/exp_$v" $ARGS 2>&1 | tee -a "$LOG.raw" | short "$v" | tee -a "$LOG"
  done
done
for v in "${variants[@]}"; do
  [[ $v == base || $v == tree || ! -x /tmp/exp_$v ]] && continue
  for poison in 0 1; do
    if ((poison)); then export MUSE_KB_POISON=1; else unset MUSE_KB_POISON; fi
    # shellcheck disable=SC2086
    res=$(MUSE_KB_CHECK=1 timeout 150 "/tmp/exp_$v" $ARGS 1000 2 0 300 2>&1 | grep -E "^check")
    echo "== check $v poison=$poison: $(grep -c PASS <<<"$res") PASS, $(grep -c FAIL <<<"$res") FAIL" | tee -a "$LOG"
    grep FAIL <<<"$res" | tee -a "$LOG"
  done
  unset MUSE_KB_POISON
done
