#!/usr/bin/env bash
# Per-instruction warp-stall samples of one split-kernel launch (ncu PC sampling, SourceCounters,
# the 41st launch of benchmarks/kernel_bench.cu, application replay): which SASS instructions
# the warps wait at, and for what. Builds this tree (benchmarks/experiments/measure.sh
# BUILD_ONLY=1 --no-patches), then for each "L:R:window:splits" of PROFILES writes
# $OUT/stall_L_R.csv (the source page, SASS) and prints the samples by reason and the
# instructions with the most samples of each reason in REASONS (the CSV's stall_<reason> columns;
# #n is the instruction's index in the kernel's SASS).
#   PROFILES="8192:1:0:0 8192:2:0:0" bash scripts/ncu_stall_source.sh     (on the device tool)
set -u
OUT=${OUT:-$PWD/device_out}
export OUT
mkdir -p "$OUT"
# shellcheck source=scripts/ncu_common.sh
. "$(dirname "$0")/ncu_common.sh"
ncu_build "$OUT/stall_build.txt"
for prof in ${PROFILES:-8192:1:0:0}; do
  IFS=: read -r L R W S <<<"$prof"
  rep="/tmp/stall_${L}_${R}"
  timeout -s KILL 150 ncu "${NCU_SPLIT_LAUNCH[@]}" --section SourceCounters --section WarpStateStats \
    --warp-sampling-interval 0 -f -o "$rep" /tmp/exp_tree "$L" "$R" "$W" "$S" >"$rep.log" 2>&1
  echo "== $prof rc=$?"
  ncu -i "$rep.ncu-rep" --page source --print-source sass --csv >"$OUT/stall_${L}_${R}.csv" 2>>"$rep.log"
  python3 - "$OUT/stall_${L}_${R}.csv" "${REASONS:-no_inst imc long_sb barrier wait}" <<'PY'
import csv, sys
lines = open(sys.argv[1]).read().splitlines()
# The source page: a "Kernel Name" line, then the header ("Address","Source",...), one row an
# instruction. Stall samples are in the stall_<reason> columns ("(Not Issued)" ones left out).
start = next((i for i, l in enumerate(lines) if l.startswith('"Address"')), None)
if start is None:
    print("  no source table"); sys.exit()
rows = list(csv.reader(lines[start:]))
hdr, body = rows[0], rows[1:]
def f(v):
    try: return float(v.replace(",", ""))
    except Exception: return 0.0
src = hdr.index("Source")
all_col = hdr.index("Warp Stall Sampling (All Samples)")
total = sum(f(r[all_col]) for r in body)
reasons = {h: sum(f(r[i]) for r in body) for i, h in enumerate(hdr)
           if h.startswith("stall_") and "Not Issued" not in h}
print(f"  {total:.0f} samples; " + ", ".join(f"{h[6:]} {v:.0f} ({100 * v / max(total, 1):.0f} %)"
                                         for h, v in sorted(reasons.items(), key=lambda x: -x[1]) if v))
for reason in sys.argv[2].split():
    c = hdr.index("stall_" + reason) if "stall_" + reason in hdr else None
    if c is None:
        print(f"  [stall_{reason}] no such column"); continue
    top = sorted(((f(r[c]), n, r[src].strip()) for n, r in enumerate(body)), reverse=True)[:12]
    print(f"  [stall_{reason}] " + "; ".join(f"#{n} {v:.0f} {s[:44]}" for v, n, s in top if v))
PY
done
