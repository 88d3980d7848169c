#!/usr/bin/env bash
# Per-instruction warp-stall samples of one split-kernel launch (ncu PC sampling, SourceCounters,
# the 41st launch of benchmarks/kernel_bench.cu, application replay): which SASS instructions
# the warps wait at, and for what. Builds this tree (benchmarks/experiments/measure.sh
# BUILD_ONLY=1 --no-patches), then for each "L:R:window:splits" of PROFILES writes
# $OUT/stall_L_R.csv (the source page, SASS) and prints the instructions with the most samples
# of each reason in REASONS (substrings of the CSV's column names).
#   PROFILES="8192:1:0:0 8192:2:0:0" bash scripts/ncu_stall_source.sh     (on the device tool)
set -u
OUT=${OUT:-$PWD/device_out}
export OUT
mkdir -p "$OUT"
BUILD_ONLY=1 bash benchmarks/experiments/measure.sh --no-patches >"$OUT/stall_build.txt" 2>&1
for prof in ${PROFILES:-8192:1:0:0}; do
  IFS=: read -r L R W S <<<"$prof"
  rep="/tmp/stall_${L}_${R}"
  timeout -s KILL 150 ncu --clock-control none --cache-control none --replay-mode application \
    -k regex:split_kernel -s 40 -c 1 --section SourceCounters --section WarpStateStats \
    --warp-sampling-interval 0 -f -o "$rep" /tmp/exp_tree "$L" "$R" "$W" "$S" >"$rep.log" 2>&1
  echo "== $prof rc=$?"
  ncu -i "$rep.ncu-rep" --page source --print-source sass --csv >"$OUT/stall_${L}_${R}.csv" 2>>"$rep.log"
  python3 - "$OUT/stall_${L}_${R}.csv" "${REASONS:-no_instruction imc long_scoreboard barrier wait}" <<'PY'
import csv, sys
lines = open(sys.argv[1]).read().splitlines()
start = next((i for i, l in enumerate(lines) if l.startswith('"')), None)
if start is None:
    print("  no CSV"); sys.exit()
rows = list(csv.reader(lines[start:]))
hdr, body = rows[0], rows[1:]
print("  columns:", "; ".join(hdr)[:1500])
def f(v):
    try: return float(v.replace(",", ""))
    except Exception: return 0.0
src = next((i for i, h in enumerate(hdr) if h.lower() in ("source", "sass")), 1)
addr = next((i for i, h in enumerate(hdr) if "address" in h.lower()), 0)
for reason in sys.argv[2].split():
    cols = [i for i, h in enumerate(hdr) if reason in h.lower()]
    for c in cols[:2]:
        tot = sum(f(r[c]) for r in body if len(r) > c)
        top = sorted(((f(r[c]), n, r) for n, r in enumerate(body) if len(r) > c), reverse=True)[:12]
        print(f"  [{hdr[c]}] total {tot:.0f}")
        for v, n, r in top:
            if v > 0: print(f"    {v:6.0f}  #{n:5d} {r[addr][:10]:10} {r[src][:70]}")
PY
done
