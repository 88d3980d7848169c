#!/usr/bin/env bash
# Everything the GPU issues need from one device call, each step hard-killed at its own limit
# (no pipes that can outlive a killed step), each log under $OUT (or ./device_out).
#   bash scripts/device_check.sh [STEP ...]
# Steps (default: build tests cb selftest memcheck racecheck):
#   build      pip install --no-build-isolation --no-deps -e .   (the CUDA handler: sm_90a, sm_90 PTX)
#   tests      pytest -n 8 over the whole suite (every ffi test runs on the CUDA handler; --dist
#              worksteal where pytest-xdist has it); killed after TESTS_LIMIT s (default 540; the
#              suite took 313-425 s on an H200 in sessions 25-37, 272 s under work stealing in 39)
#   cb         scripts/command_buffer_check.py (command buffers on/off, thunk dump)
#   selftest   compute-sanitizer on a planted OOB write / race: does the tool work here?
#   memcheck   compute-sanitizer memcheck on scripts/sanitize_cases.py (6 cases; SANITIZE_QUICK=1: 2),
#              XLA's autotuner off (25 s on an H200, session 39)
#   racecheck  compute-sanitizer racecheck on the same (38 s)
#   bench      python -m jax_muse_attn.bench $BENCH_ARGS (default --budget-s 550); FlashInfer is
#              extracted to /tmp/site first when .fi/flashinfer_site.tar.gz was carried
#   kb         benchmarks/kernel_bench.cu: the CUDA kernels alone, timed (no JAX; KB_FLAGS: nvcc
#              flags such as -DMUSE_ATTN_MIN_TILES_PER_SEGMENT=1, KB_ARGS: L R window splits ...); kbpdl / kbnopdl:
#              the merge always / never a programmatic dependent launch (MUSE_ATTN_PDL=1 / 0;
#              default: on sm_90+); kbagain: the same binary again, under whatever
#              MUSE_ATTN_PDL the caller set (gpu/launch_plan.h);
#              kbcheck: the same binary with MUSE_KB_CHECK=1 (each config's output against the
#              naive reference of benchmarks/kb_check.h; exit 1 on a failure);
#              kbsan: racecheck + memcheck on it (KBSAN_ARGS: configs; default: each split kernel); kbcold: the same binary with MUSE_KB_COLD=1
#              (a cold figure a config: one call after a 256 MiB read; set it for kbab too);
#              kbsweep: the same over split counts; kbtl: built with timeline stamps, prints where
#              each config's time goes (KBTL_ARGS: L R window splits ...)
#   kbab       the kernels alone, A/B in one call: /tmp/kb_base built from $ROOT/.kb_base (another
#              commit's sources: `rm -rf .kb_base && mkdir .kb_base && git archive REF ffi
#              benchmarks | tar -x -C .kb_base`, git-ignored, so `carry: [".kb_base"]`) against
#              /tmp/kernel_bench built from this tree, alternating, two rounds (KB_ARGS: configs)
#   sass       SASS of the split and merge kernels to $OUT/sass_*.txt (SASS_FLAGS: nvcc flags)
#   latency    benchmarks/latency_probe.cu: one thread's dependent load / copy / atomic latencies
#   pdlprobe   benchmarks/pdl_probe.cu: the first loads after a programmatic dependent launch's
#              wait, against a plain launch's
#   readfloor  benchmarks/read_floor_probe.cu: what a kernel that only reads a call's K/V bytes
#              (alone, then with a dependent launch) takes at each config of the grid, beside a
#              1 GiB copy (RF_ARGS: L R window ...; default: the whole grid)
#   tp / tp8   scripts/tp_gpu_check.py on 2 / 8 GPUs (TP2 32/4 heads, TP8 128/16)
# The device tool returns at most 8 files: every step's log is appended to $OUT/logs.txt when the
# step ends (and its last lines printed), the bench writes $OUT/bench/NAME.{json,md,png}.
set -u
OUT="${OUT:-$PWD/device_out}"
mkdir -p "$OUT"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
steps=("$@")
((${#steps[@]})) || steps=(build tests cb selftest memcheck racecheck)
summary=()

run_step() {  # name limit_s command...
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  local log="$LOGS/$name.log"
  (cd /tmp && timeout -s KILL "$limit" "$@") >"$log" 2>&1
  local rc=$?
  summary+=("$(printf '%-13s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(tail -n 1 "$log" | cut -c1-100)")")
  { echo "==== $name rc=$rc $((SECONDS - t0))s"; cat "$log"; } >>"$OUT/logs.txt"
  echo "==== $name rc=$rc $((SECONDS - t0))s (last lines)"; tail -n "${TAIL_LINES:-8}" "$log" | cut -c1-300
}
LOGS=$(mktemp -d)
# The JAX process under compute-sanitizer (memcheck, racecheck): the caller's XLA flags plus the
# autotuner off (see those steps).
sanitize_xla_flags="${XLA_FLAGS:-} --xla_gpu_autotune_level=0"

build_kernel_bench() {  # out_binary log_name extra_nvcc_flags...: benchmarks/kernel_bench.cu + the kernels
  local out=$1 log=$2 src=${KB_SRC:-$ROOT}  # KB_SRC: another source tree (kbab)
  shift 2
  nvcc -O3 -std=c++17 --use_fast_math -arch=${KB_ARCH:-sm_90a} -I "$src/ffi" "$@" -o "$out" -x cu \
    "$src/benchmarks/kernel_bench.cu" "$src/ffi/gpu/split_kernel.cu.cc" "$src/ffi/gpu/merge_kernel.cu.cc" \
    >"$LOGS/$log.log" 2>&1
}

for s in "${steps[@]}"; do
  case $s in
    build) run_step build 240 python3 -m pip install --no-build-isolation --no-deps -q -e "$ROOT" ;;
    tests)  # work stealing (pytest-xdist >= 3.2) where the workers have it: with the default
      # "load" schedule one worker was handed nine of the launch-mode tests' ten pytest
      # subprocesses (18-22 s alone, up to 108 s beside the other workers) in a row and ran them
      # one after another at the end (session 38: past 330 and 420 s, against 313 s in session 37)
      xdist_mode=load
      python3 -c "import xdist.scheduler as s; s.WorkStealingScheduling" 2>/dev/null && xdist_mode=worksteal
      run_step tests "${TESTS_LIMIT:-540}" python3 -m pytest -q -n 8 --dist "$xdist_mode" -p no:benchmark \
        --durations=15 "$ROOT/tests" ;;
    cb) run_step cb 150 python3 "$ROOT/scripts/command_buffer_check.py" ;;
    selftest)
      nvcc -arch=sm_90 -o /tmp/sanitizer_selftest "$ROOT/scripts/sanitizer_selftest.cu" >"$LOGS/selftest_build.log" 2>&1
      run_step selftest_mem 60 compute-sanitizer --tool memcheck /tmp/sanitizer_selftest
      run_step selftest_race 60 compute-sanitizer --tool racecheck /tmp/sanitizer_selftest ;;
    # XLA's autotuner off under compute-sanitizer: its delay kernel timed out there and the JAX
    # process segfaulted inside the tool before any report (logged in sessions 13, 26 and 39;
    # blamed on PDL until session 39 found the autotuner); with it off, memcheck (PDL on and off) and racecheck of
    # the JAX process run clean. SANITIZE_QUICK=1 (two cases) where the caller sets it.
    memcheck) XLA_FLAGS=$sanitize_xla_flags XLA_PYTHON_CLIENT_ALLOCATOR=platform \
        run_step memcheck 240 compute-sanitizer --tool memcheck --error-exitcode 1 python3 "$ROOT/scripts/sanitize_cases.py" ;;
    racecheck) XLA_FLAGS=$sanitize_xla_flags run_step racecheck 240 \
        compute-sanitizer --tool racecheck --error-exitcode 1 python3 "$ROOT/scripts/sanitize_cases.py" ;;
    bench)
      if [[ -f "$ROOT/.fi/flashinfer_site.tar.gz" && ! -d /tmp/site/flashinfer ]]; then
        python3 -c "import tarfile; tarfile.open('$ROOT/.fi/flashinfer_site.tar.gz').extractall('/tmp/site', filter='fully_trusted')"
      fi
      # shellcheck disable=SC2086
      run_step bench "${BENCH_LIMIT:-580}" python3 -m jax_muse_attn.bench ${BENCH_ARGS:---budget-s 550} --out "$OUT/bench" ;;
    kb)  # the kernels alone (benchmarks/kernel_bench.cu), default grid
      # shellcheck disable=SC2086
      build_kernel_bench /tmp/kernel_bench kb_build ${KB_FLAGS:-}
      # shellcheck disable=SC2086
      TAIL_LINES=${TAIL_LINES:-12} run_step kb 120 /tmp/kernel_bench ${KB_ARGS:-} ;;
    kbsweep)  # after kb: the kernels alone over split counts (L R window splits), benchmarks/NOTES.md v4
      sweep=()
      for sp in 9 12 17 24 33; do sweep+=(32768 1 2048 "$sp"); done
      for sp in 3 6 9 12; do sweep+=(32768 16 2048 "$sp"); done
      for sp in 8 11 16 32; do sweep+=(2048 1 0 "$sp"); done
      for sp in 16 32 49 64; do sweep+=(8192 4 0 "$sp"); done
      for sp in 66 99 132 198 256; do sweep+=(32768 1 0 "$sp"); done
      for sp in 33 49 66; do sweep+=(32768 4 0 "$sp"); done
      MUSE_ATTN_PDL="${MUSE_ATTN_PDL:-0}" TAIL_LINES=40 run_step kbsweep 200 /tmp/kernel_bench "${sweep[@]}" ;;
    kbtl)  # the kernels alone with timeline stamps (gpu/timeline.h): where a call's time goes
      # shellcheck disable=SC2086
      build_kernel_bench /tmp/kernel_bench_tl kbtl_build -DMUSE_ATTN_TIMELINE ${KB_FLAGS:-}
      TAIL_LINES=100 run_step kbtl 120 /tmp/kernel_bench_tl ${KBTL_ARGS:-} ;;
    sass)  # SASS of the split and merge kernels (KB_ARCH, default sm_90a) to $OUT/sass_*.txt; SASS_FLAGS adds nvcc flags
      for k in split merge; do
        # shellcheck disable=SC2086
        nvcc -O3 -std=c++17 --use_fast_math -arch=${KB_ARCH:-sm_90a} -I "$ROOT/ffi" ${SASS_FLAGS:-} -cubin -o "/tmp/$k.cubin" \
          -x cu "$ROOT/ffi/gpu/${k}_kernel.cu.cc" && cuobjdump -sass "/tmp/$k.cubin" >"$OUT/sass_$k.txt"
      done ;;
    latency)  # benchmarks/latency_probe.cu: dependent-load latencies, cold and after a warm-up
      nvcc -O3 -arch=sm_90 -o /tmp/latency_probe "$ROOT/benchmarks/latency_probe.cu" >"$LOGS/latency_build.log" 2>&1
      TAIL_LINES=30 run_step latency 60 /tmp/latency_probe ;;
    pdlprobe)  # benchmarks/pdl_probe.cu: load latencies right after griddepcontrol.wait
      nvcc -O3 -arch=sm_90a -o /tmp/pdl_probe "$ROOT/benchmarks/pdl_probe.cu" \
        >"$LOGS/pdlprobe_build.log" 2>&1
      TAIL_LINES=10 run_step pdlprobe 60 /tmp/pdl_probe ;;
    readfloor)  # benchmarks/read_floor_probe.cu: the read-only floor at each config
      nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/read_floor "$ROOT/benchmarks/read_floor_probe.cu" \
        >"$LOGS/readfloor_build.log" 2>&1
      # shellcheck disable=SC2086
      TAIL_LINES=30 run_step readfloor 240 /tmp/read_floor ${RF_ARGS:-} ;;
    kbab)  # base (.kb_base) against this tree, the kernels alone, alternating, two rounds
      if [[ ! -d "$ROOT/.kb_base/ffi" ]]; then
        echo "device_check: kbab needs $ROOT/.kb_base (see the header)" >&2
      else
        ab_args=${KB_ARGS:-"32768 1 2048 0 32768 16 2048 0 2048 1 0 0 8192 4 0 0 32768 1 0 0 32768 4 0 0 32768 16 0 0 131072 1 0 0 131072 4 0 0 131072 16 0 0"}
        # shellcheck disable=SC2086
        build_kernel_bench /tmp/kernel_bench kb_build ${KB_FLAGS:-}
        # shellcheck disable=SC2086
        KB_SRC="$ROOT/.kb_base" build_kernel_bench /tmp/kb_base kb_base_build ${KB_FLAGS:-}
        for round in 1 2; do
          # shellcheck disable=SC2086
          TAIL_LINES=12 run_step "kbab_base_$round" 120 /tmp/kb_base $ab_args
          # shellcheck disable=SC2086
          TAIL_LINES=12 run_step "kbab_tree_$round" 120 /tmp/kernel_bench $ab_args
        done
      fi ;;
    kbagain) TAIL_LINES=12 run_step kbagain 120 /tmp/kernel_bench ${KB_ARGS:-} ;;  # after kb: again (MUSE_ATTN_* set by the caller)
    kbcold) MUSE_KB_COLD=1 TAIL_LINES=24 run_step kbcold 180 /tmp/kernel_bench ${KB_ARGS:-} ;;  # after kb
    kbcheck) MUSE_KB_CHECK=1 TAIL_LINES=12 run_step kbcheck 180 /tmp/kernel_bench ${KB_ARGS:-} ;;  # after kb: outputs vs benchmarks/kb_check.h
    kbpdl) MUSE_ATTN_PDL=1 TAIL_LINES=12 run_step kbpdl 120 /tmp/kernel_bench ;;  # after kb
    kbnopdl) MUSE_ATTN_PDL=0 TAIL_LINES=12 run_step kbnopdl 120 /tmp/kernel_bench ;;  # after kb
    kbsan)  # after kb: racecheck and memcheck on the kernels alone (no JAX), clean and poisoned;
      # KBSAN_ARGS: configs (L R window splits ...). The default takes every split kernel the plan
      # picks on an H200 (session 39's plan query): two-tile (2k R=4, 4k R=3 SWA 256, 32k R=2 SWA
      # 2048, 8k R = 1-2), fill-ring (8k R=4; 8k R=5 with the merge launched plainly), ping-pong
      # (32k R=4), plain (1k R=2 with 3 splits), the ping-pong kernel as two pairs a CTA (32k R=4
      # with 4 splits, 128 tiles a segment; 32k R=3 with 3, 171: the last CTA's second pair has no
      # segment; session 42 ran 16k R=4 / R=3 at 4 / 3 splits, two pairs under its first 64-tile rule)
      kbsan_default="2048 4 0 0 4096 3 256 0 32768 2 2048 0 8192 5 0 0 1000 2 0 3 8192 1 0 0 8192 2 0 0 8192 4 0 0 32768 4 0 0 32768 4 0 4 32768 3 0 3"
      for tool in racecheck memcheck; do
        for poison in 0 1; do
          export MUSE_KB_ONCE=1
          if ((poison)); then export MUSE_KB_POISON=1; else unset MUSE_KB_POISON; fi
          # shellcheck disable=SC2086
          TAIL_LINES=3 run_step "kb_${tool}_p$poison" 200 compute-sanitizer --tool "$tool" \
            --error-exitcode 1 /tmp/kernel_bench ${KBSAN_ARGS:-$kbsan_default}
        done
      done
      unset MUSE_KB_ONCE MUSE_KB_POISON ;;
    tp) run_step tp 450 python3 "$ROOT/scripts/tp_gpu_check.py" ;;
    tp8) run_step tp8 540 python3 "$ROOT/scripts/tp_gpu_check.py" --tp 8 ;;
    *) echo "device_check: unknown step $s" >&2; exit 2 ;;
  esac
done
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
