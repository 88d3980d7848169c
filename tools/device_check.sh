#!/usr/bin/env bash
# The GPU checklist in one call (an NVIDIA GPU with nvcc, JAX and the package's build
# dependencies): each step hard-killed at its own limit, each log appended to $OUT/logs.txt
# (default ./device_out) with its last lines printed, a one-line summary a step at the end.
#   bash tools/device_check.sh [STEP ...]          (default: build tests cb selftest memcheck racecheck)
# Steps:
#   build      pip install --no-build-isolation --no-deps -e .  (the CUDA handler)
#   tests      pytest over tests/ and benchmarks/tests/ (-n 8 where pytest-xdist is installed;
#              killed after TESTS_LIMIT s, default 540)
#   cb         tools/command_buffer_check.py: command buffers on / off, checked, thunk dump
#   selftest   compute-sanitizer on a planted out-of-bounds write and race: does the tool work here?
#   memcheck   compute-sanitizer memcheck on tools/sanitize_cases.py (SANITIZE_QUICK=1: 2 cases)
#   racecheck  compute-sanitizer racecheck on the same
#   bench      python benchmarks/bench.py $BENCH_ARGS (default --budget-s 550) --out $OUT/bench;
#              the FlashInfer in .fi/ (git-ignored: the site tarball, XQA overlays, modules built
#              by fimods in .fi/aot/) assembled in /tmp/site (benchmarks/fi_site.py) and put on the
#              FlashInfer worker's path
#   fimods     FlashInfer's fa2 modules for an FP8 cache compiled to $OUT/fimods (carry as .fi/aot)
#   kb         benchmarks/kernel_bench.cu built (KB_ARCH, default sm_90a; KB_FLAGS: more nvcc
#              flags) and run on KB_ARGS (L R window splits ...; default: its own grid)
#   kbcheck    after kb: the same with MUSE_KB_CHECK=1 (outputs against benchmarks/kb_check.h)
#   kbsan      after kb: racecheck and memcheck on the kernels alone, clean and poisoned, over
#              KBSAN_ARGS (default: configs where the plan picks each split kernel on an H200)
#   timeline   kernel_bench built with benchmarks/timeline_marks.h (every CTA's marks stamped) and
#              run on TL_ARGS (L R window splits ...; default: serving rows and one long call)
#   readfloor  benchmarks/read_floor_probe.cu on RF_ARGS (L R window ...; default: the grid)
#   fp8decode  benchmarks/fp8_decode_probe.cu: FP8 values an SM dequantizes a clock, by sequence
#   isa        the split and merge kernels' SASS (KB_ARCH) to $OUT/isa/, normalised as
#              tools/isa_compare.py compares it (`isa_compare.py diff` against another tree's dump)
#   tp / tp8   tools/tp_gpu_check.py on 2 / 8 GPUs (TP2: 32/4 heads, TP8: 128/16)
# The launch plan's override reaches every step that plans a call, through JAX or kernel_bench:
#   MUSE_ATTN_LAUNCH=merge_pdl=0 bash tools/device_check.sh kb
set -u
OUT="${OUT:-$PWD/device_out}"
mkdir -p "$OUT"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
steps=("$@")
((${#steps[@]})) || steps=(build tests cb selftest memcheck racecheck)
summary=()
LOGS=$(mktemp -d)

run_step() {  # name limit_s command...
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS log="$LOGS/$name.log"
  (cd /tmp && timeout -s KILL "$limit" "$@") >"$log" 2>&1
  local rc=$?
  summary+=("$(printf '%-13s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(tail -n 1 "$log" | cut -c1-100)")")
  { echo "==== $name rc=$rc $((SECONDS - t0))s"; cat "$log"; } >>"$OUT/logs.txt"
  echo "==== $name rc=$rc $((SECONDS - t0))s (last lines)"
  tail -n "${TAIL_LINES:-8}" "$log" | cut -c1-300
}

# The JAX process under compute-sanitizer: XLA's autotuner off (its delay kernel times out under
# the tool, which then crashes before any report).
sanitize_xla_flags="${XLA_FLAGS:-} --xla_gpu_autotune_level=0"
kb_bin=/tmp/kernel_bench

# kernel_bench.cu with the kernels into $1 (log: $LOGS/$2_build.log); the rest: more nvcc flags.
build_kernel_bench() {
  local bin=$1 name=$2
  shift 2
  nvcc -O3 -std=c++17 --use_fast_math -arch="${KB_ARCH:-sm_90a}" --threads 0 -I "$ROOT/ffi" "$@" -o "$bin" \
    -x cu "$ROOT/benchmarks/kernel_bench.cu" "$ROOT/ffi/gpu/split_kernel.cu.cc" \
    "$ROOT/ffi/gpu/split_kernel_fp8.cu.cc" "$ROOT/ffi/gpu/split_kernel_balanced.cu.cc" \
    "$ROOT/ffi/gpu/merge_kernel.cu.cc" "$ROOT/ffi/gpu/device_query.cc" >"$LOGS/${name}_build.log" 2>&1 ||
    { echo "device_check: $name did not build:"; tail -n 20 "$LOGS/${name}_build.log"; }
}

for s in "${steps[@]}"; do
  case $s in
    build) run_step build 240 python3 -m pip install --no-build-isolation --no-deps -q -e "$ROOT" ;;
    tests)
      xdist=()
      if python3 -c "import xdist" 2>/dev/null; then
        xdist=(-n 8 --dist load)  # work stealing where pytest-xdist has it
        python3 -c "import xdist.scheduler as s; s.WorkStealingScheduling" 2>/dev/null && xdist=(-n 8 --dist worksteal)
      fi
      run_step tests "${TESTS_LIMIT:-540}" python3 -m pytest -q "${xdist[@]}" -p no:benchmark --durations=15 \
        "$ROOT/tests" "$ROOT/benchmarks/tests" ;;
    cb) run_step cb 150 python3 "$ROOT/tools/command_buffer_check.py" ;;
    selftest)
      nvcc -arch=sm_90 -o /tmp/sanitizer_selftest "$ROOT/tools/sanitizer_selftest.cu" >"$LOGS/selftest_build.log" 2>&1
      run_step selftest_mem 60 compute-sanitizer --tool memcheck /tmp/sanitizer_selftest
      run_step selftest_race 60 compute-sanitizer --tool racecheck /tmp/sanitizer_selftest ;;
    memcheck) XLA_FLAGS=$sanitize_xla_flags XLA_PYTHON_CLIENT_ALLOCATOR=platform run_step memcheck 240 \
        compute-sanitizer --tool memcheck --error-exitcode 1 python3 "$ROOT/tools/sanitize_cases.py" ;;
    racecheck) XLA_FLAGS=$sanitize_xla_flags run_step racecheck 240 \
        compute-sanitizer --tool racecheck --error-exitcode 1 python3 "$ROOT/tools/sanitize_cases.py" ;;
    bench)
      fi=()
      [[ -f "$ROOT/.fi/flashinfer_site.tar.gz" ]] && python3 "$ROOT/benchmarks/fi_site.py" prepare --site /tmp/site
      [[ -d /tmp/site/flashinfer ]] && fi=(--flashinfer-path /tmp/site)
      # shellcheck disable=SC2086
      run_step bench "${BENCH_LIMIT:-580}" python3 "$ROOT/benchmarks/bench.py" ${BENCH_ARGS:---budget-s 550} \
        --out "$OUT/bench" "${fi[@]}" ;;
    fimods) run_step fimods "${FIMODS_LIMIT:-480}" python3 "$ROOT/benchmarks/fi_site.py" build-fp8 --site /tmp/site \
        --out "$OUT/fimods" ;;
    kb)
      # shellcheck disable=SC2086
      build_kernel_bench "$kb_bin" kb ${KB_FLAGS:-}
      # shellcheck disable=SC2086
      TAIL_LINES=${TAIL_LINES:-12} run_step kb 120 "$kb_bin" ${KB_ARGS:-} ;;
    timeline)
      tl_default="32768 64 2048 0 32768 256 2048 0 2048 64 0 0 2048 256 0 0 131072 16 0 0"
      build_kernel_bench /tmp/kernel_timeline timeline -include "$ROOT/benchmarks/timeline_marks.h"
      # shellcheck disable=SC2086
      TAIL_LINES=80 run_step timeline 180 /tmp/kernel_timeline ${TL_ARGS:-$tl_default} ;;
    # shellcheck disable=SC2086
    kbcheck) MUSE_KB_CHECK=1 TAIL_LINES=12 run_step kbcheck 180 "$kb_bin" ${KB_ARGS:-} ;;
    kbsan)
      # Where an H200's plan picks each split kernel: two_tile (2k R=4, 4k R=3 SWA 256, 32k R=2 SWA,
      # 8k R = 1-2), fill_ring (8k R=4; R=5, its merge launched plainly), pingpong (32k R=4),
      # per_tile (1k R=2 at 3 splits), pingpong_two_pairs (32k R=4 at 4 splits; 32k R=3 at 3,
      # where the last CTA's second pair has no segment).
      kbsan_default="2048 4 0 0 4096 3 256 0 32768 2 2048 0 8192 5 0 0 1000 2 0 3 8192 1 0 0 8192 2 0 0 8192 4 0 0 32768 4 0 0 32768 4 0 4 32768 3 0 3"
      for tool in racecheck memcheck; do
        for poison in 0 1; do
          kb_env=(MUSE_KB_ONCE=1)
          ((poison)) && kb_env+=(MUSE_KB_POISON=1)
          # shellcheck disable=SC2086
          TAIL_LINES=3 run_step "kb_${tool}_p$poison" 200 env -u MUSE_KB_POISON "${kb_env[@]}" \
            compute-sanitizer --tool "$tool" --error-exitcode 1 "$kb_bin" ${KBSAN_ARGS:-$kbsan_default}
        done
      done ;;
    readfloor)
      nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/read_floor "$ROOT/benchmarks/read_floor_probe.cu" \
        >"$LOGS/readfloor_build.log" 2>&1
      # shellcheck disable=SC2086
      TAIL_LINES=30 run_step readfloor 240 /tmp/read_floor ${RF_ARGS:-} ;;
    fp8decode)
      nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -o /tmp/fp8_decode "$ROOT/benchmarks/fp8_decode_probe.cu" \
        >"$LOGS/fp8decode_build.log" 2>&1
      TAIL_LINES=10 run_step fp8decode 60 /tmp/fp8_decode ;;
    isa) run_step isa 300 python3 "$ROOT/tools/isa_compare.py" dump "$ROOT" "$OUT/isa" --arch "${KB_ARCH:-sm_90a}" ;;
    tp) run_step tp 450 python3 "$ROOT/tools/tp_gpu_check.py" ;;
    tp8) run_step tp8 540 python3 "$ROOT/tools/tp_gpu_check.py" --tp 8 ;;
    *) echo "device_check: unknown step $s" >&2; exit 2 ;;
  esac
done
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
