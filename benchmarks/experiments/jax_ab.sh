#!/usr/bin/env bash
# An A/B through JAX: python -m jax_muse_attn.bench on $AB_CONFIGS for two variants, in the order
# A B B A (command buffers on, no FlashInfer), each run's files in $OUT/ab (abN_V.{json,md}); it
# prints each run's device-clock figures (ours_dev_on_us, us a call), the ones to compare. A
# variant is
#   - an environment (A_ENV / B_ENV: "NAME=V ..."; e.g. the launch plan's MUSE_ATTN_* overrides),
#     on the installed build (scripts/device_check.sh build first), or
#   - with B_FLAGS set, this tree built twice as plain installs in /tmp/ab_A and /tmp/ab_B (B with
#     CUDAFLAGS=$B_FLAGS: kernel_bench's nvcc knobs, e.g. -DMUSE_ATTN_SPLIT_STAGES_D64=5), from
#     scratch each time. This uninstalls the installed jax_muse_attn (an editable install would
#     shadow both), so steps after it in the same call need `device_check.sh build` again.
#   A_ENV=MUSE_ATTN_PDL=0 B_ENV=MUSE_ATTN_PDL=1 AB_CONFIGS="full8k-r4,full32k-r1" \
#     bash benchmarks/experiments/jax_ab.sh                  # on the device tool
#   B_FLAGS="-DMUSE_ATTN_SPLIT_STAGES_D64=5" AB_CONFIGS="full8k-r4" bash benchmarks/experiments/jax_ab.sh
# AB_ORDER (default "A B B A"), AB_BUDGET (bench --budget-s, default 60), AB_LIMIT (s a run, 150),
# AB_MODES (bench --modes, default "on"; "on,off" also times command buffers off).
set -u
: "${AB_CONFIGS:?comma-separated bench config names}"
OUT="${OUT:-$PWD/device_out}"; ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$OUT/ab"; export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
if [[ -n "${B_FLAGS:-}" ]]; then
  python3 -m pip uninstall -y -q jax_muse_attn >/dev/null 2>&1
  rm -rf /tmp/ab_A /tmp/ab_B /tmp/ab_build_A /tmp/ab_build_B  # a warm machine keeps old builds
  build() {  # name cudaflags
    (cd /tmp && CUDAFLAGS="$2" timeout 300 python3 -m pip install --no-build-isolation --no-deps -q \
       --target "/tmp/ab_$1" -C build-dir="/tmp/ab_build_$1" "$ROOT") >"/tmp/ab_build_$1.log" 2>&1
  }
  build A "" & pid_a=$!
  build B "$B_FLAGS" & pid_b=$!
  for v in A:$pid_a B:$pid_b; do
    wait "${v#*:}" || { echo "build ${v%%:*} failed:"; tail -n 20 "/tmp/ab_build_${v%%:*}.log"; exit 1; }
  done
  grep -H "CMAKE_CUDA_FLAGS:" /tmp/ab_build_A/CMakeCache.txt /tmp/ab_build_B/CMakeCache.txt
  grep -qF -- "$B_FLAGS" /tmp/ab_build_B/CMakeCache.txt || { echo "B was not built with $B_FLAGS"; exit 1; }
fi
n=0
for v in ${AB_ORDER:-A B B A}; do
  n=$((n + 1))
  envs=A_ENV; [[ $v == B ]] && envs=B_ENV
  pp=""; [[ -n "${B_FLAGS:-}" ]] && pp="PYTHONPATH=/tmp/ab_$v"
  echo "== $n $v ${!envs:-} ${pp}"
  # shellcheck disable=SC2086
  (cd /tmp && env ${!envs:-} $pp timeout "${AB_LIMIT:-150}" python3 -m jax_muse_attn.bench \
    --configs "$AB_CONFIGS" --modes "${AB_MODES:-on}" --no-flashinfer --budget-s "${AB_BUDGET:-60}" \
    --name "ab${n}_$v" --out "$OUT/ab" >"/tmp/ab${n}_$v.log" 2>&1
   echo "  exit $?: $(grep -E "ALL CHECKS|FAIL|Error" "/tmp/ab${n}_$v.log" | tail -n 2 | tr '\n' ' ')")
  rm -f "$OUT/ab/ab${n}_$v.png"  # the device tool returns few files: the JSON and table only
  python3 - "$OUT/ab/ab${n}_$v.json" "ab${n}_$v" <<'PY' 2>&1 | tail -n 3
import json, sys
d = json.load(open(sys.argv[1]))
for mode in ("on", "off"):
    key = "ours_dev_%s_us" % mode
    if any(isinstance(s.get(key), (int, float)) for s in d["summary"]):
        print("  " + sys.argv[2], mode, "  ".join("%s %s" % (s["config"], "%.2f" % s[key]
              if isinstance(s.get(key), (int, float)) else "-") for s in d["summary"]))
PY
done
