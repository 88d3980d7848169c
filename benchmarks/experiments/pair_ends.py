"""Per-pair ends from kernel_bench's MUSE_KB_TL_CSV files (session 49, pp2_balance.sh).

A two-pair CTA's pairs stamp as the one-pair CTAs of segments 2x and 2x + 1 would, so a segment's
parity is its pair (for the one-pair kernel: two CTAs, likely on one SM). Per config and file:
the tiles-done spread, the mean end of even / odd segments, and the mean and spread of (odd - even)
within a segment pair.
"""
import statistics as st
import sys

for path in sys.argv[1:]:
    blocks, cur = [], None
    for line in open(path):
        if line.startswith("#"):
            cur = [line.split(":")[0][2:], []]
            blocks.append(cur)
        elif line.strip():
            c, seg, grp, sm, *us = line.split(",")
            cur[1].append((int(seg), int(grp), int(sm), [float(u) for u in us]))
    for name, rows in blocks:
        done = {(g, s): u[4] for s, g, sm, u in rows if u[4] >= 0}
        if not done:
            continue
        even = [v for (g, s), v in done.items() if s % 2 == 0]
        odd = [v for (g, s), v in done.items() if s % 2 == 1]
        diffs = [done[(g, s + 1)] - done[(g, s)] for (g, s) in done if s % 2 == 0 and (g, s + 1) in done]
        print(f"{path.split('/')[-1]:22s} {name:28s} tiles done {min(done.values()):6.2f}-{max(done.values()):6.2f} "
              f"median {st.median(done.values()):6.2f} | even mean {st.mean(even):6.2f} odd mean {st.mean(odd):6.2f} | "
              f"odd-even mean {st.mean(diffs):+5.2f} min {min(diffs):+5.2f} max {max(diffs):+5.2f}")
