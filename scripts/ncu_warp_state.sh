#!/usr/bin/env bash
# Where the split kernels' warps stall (ncu, one split launch of benchmarks/kernel_bench.cu in its
# CUDA graph, the 41st, after warm-up; application replay, so every pass sees the same state).
# Builds this tree, each patch named in PATCHES and .kb_base if carried (benchmarks/experiments/
# measure.sh BUILD_ONLY=1), then profiles each "variant:L:R:window:splits" of PROFILES.
#   PATCHES="pairs_interior_path" PROFILES="tree:8192:2:0:0 pairs_interior_path:8192:2:0:0" \
#     bash scripts/ncu_warp_state.sh          (on the device tool; carry [".kb_base"] for base)
# Prints, per profile: duration, SM active cycles, executed instructions, warp cycles per issued
# instruction (the sum of the reasons) and each stall reason's share of it
# (smsp__average_warps_issue_stalled_*_per_issue_active.ratio); the
# raw CSVs go to $OUT/ncu.csv.
set -u
OUT=${OUT:-$PWD/device_out}
export OUT
mkdir -p "$OUT"
# shellcheck source=scripts/ncu_common.sh
. "$(dirname "$0")/ncu_common.sh"
# shellcheck disable=SC2086
ncu_build "$OUT/ncu_build.txt" ${PATCHES:-}
: >"$OUT/ncu.csv"
for prof in ${PROFILES:-tree:8192:2:0:0}; do
  IFS=: read -r name L R W S <<<"$prof"
  timeout -s KILL 120 ncu "${NCU_SPLIT_LAUNCH[@]}" --csv --page raw \
    --metrics "gpu__time_duration.sum,sm__cycles_active.avg,smsp__inst_executed.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    "/tmp/exp_$name" "$L" "$R" "$W" "$S" >"/tmp/ncu_$name.$L.$R.csv" 2>/dev/null
  echo "== $prof rc=$?" | tee -a "$OUT/ncu.csv"
  grep -v '^==' "/tmp/ncu_$name.$L.$R.csv" >>"$OUT/ncu.csv"
  python3 - "/tmp/ncu_$name.$L.$R.csv" <<'PY'
import csv, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.startswith('"')]
rows = list(csv.reader(lines))
if len(rows) < 3:
    print("  no rows"); sys.exit()
hdr, vals = rows[0], rows[-1]
m = {h: v for h, v in zip(hdr, vals)}
def num(k):
    try: return float(m[k].replace(",", ""))
    except Exception: return float("nan")
st = sorted(((num(k), k) for k in hdr
             if k.startswith("smsp__average_warps_issue_stalled_") and k.endswith("_per_issue_active.ratio")), reverse=True)
print(f"  duration {num('gpu__time_duration.sum'):.0f} ns, SM active {num('sm__cycles_active.avg'):.0f} cycles, "
      f"instructions {num('smsp__inst_executed.sum'):.0f}, warp cycles / issued instruction {sum(v for v, _ in st):.2f} "
      "(the sum of the reasons, 'selected' the issue itself)")
print("  " + ", ".join(f"{k[len('smsp__average_warps_issue_stalled_'):-len('_per_issue_active.ratio')]} {v:.2f}" for v, k in st if v >= 0.01))
PY
done
