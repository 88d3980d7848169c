"""Per-pair ends from kernel_bench's MUSE_KB_TL_CSV files (session 49, lean_timeline_check.sh).

A two-pair CTA's pairs stamp as the one-pair CTAs of segments 2x and 2x + 1 would, so a segment's
parity is its pair and segments 2x, 2x + 1 of a group are one CTA. (For the one-pair kernel the
parity means nothing: its two CTAs of an SM are not a segment pair.) Per config and file: the
tiles-done spread, the mean end of even / odd segments, the mean and spread of (odd - even)
within a CTA, then per CTA the mean of its two pairs' ends (what the CTA's end would be with its
pairs balanced), the latest CTA end, and the latest group mean (what the call's split end would
be with each group balanced across its CTAs). With several files of one config (reruns of one
binary, the same block table), the correlation between runs of each SM's mean end and of each
CTA's mean end: does lateness follow the SM or the CTA's pages?
"""
import statistics as st
import sys


def load(path):
    blocks, cur = {}, None
    for line in open(path):
        if line.startswith("#"):
            cur = {}
            blocks[line.split(":")[0][2:]] = cur
        elif line.strip():
            _, seg, grp, sm, *us = line.split(",")
            if float(us[4]) >= 0:
                cur[(int(grp), int(seg))] = (int(sm), float(us[4]))
    return blocks


def corr(a, b):
    ma, mb = st.mean(a), st.mean(b)
    num = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    den = (sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)) ** 0.5
    return num / den if den else float("nan")


runs = [(p, load(p)) for p in sys.argv[1:]]
for path, blocks in runs:
    for name, done in blocks.items():
        if not done:
            continue
        ends = [t for _, t in done.values()]
        even = [t for (g, s), (_, t) in done.items() if s % 2 == 0]
        odd = [t for (g, s), (_, t) in done.items() if s % 2 == 1]
        ctas = [(t, done[(g, s + 1)][1]) for (g, s), (_, t) in done.items() if s % 2 == 0 and (g, s + 1) in done]
        diffs = [b - a for a, b in ctas]
        means = [(a + b) / 2 for a, b in ctas]
        groups = {}
        for (g, s), (_, t) in done.items():
            groups.setdefault(g, []).append(t)
        print(f"{path.split('/')[-1]:22s} {name:28s} tiles done {min(ends):6.2f}-{max(ends):6.2f} "
              f"median {st.median(ends):6.2f} | even mean {st.mean(even):6.2f} odd mean {st.mean(odd):6.2f} | "
              f"odd-even mean {st.mean(diffs):+5.2f} min {min(diffs):+5.2f} max {max(diffs):+5.2f} | "
              f"CTA mean {min(means):6.2f}-{max(means):6.2f} (sd {st.pstdev(means):.2f}) | "
              f"latest group mean {max(st.mean(v) for v in groups.values()):6.2f}")
if len(runs) > 1:
    for name in runs[0][1]:
        per_sm, per_cta = [], []
        for _, blocks in runs:
            sm, cta = {}, {}
            for (g, s), (m, t) in blocks.get(name, {}).items():
                sm.setdefault(m, []).append(t)
                cta.setdefault((g, s // 2), []).append(t)
            per_sm.append({k: st.mean(v) for k, v in sm.items()})
            per_cta.append({k: st.mean(v) for k, v in cta.items()})
        pairs = [(i, j) for i in range(len(runs)) for j in range(i + 1, len(runs))]
        ks = sorted(set.intersection(*(set(d) for d in per_sm)))
        kc = sorted(set.intersection(*(set(d) for d in per_cta)))
        print(f"{name:28s} correlation between runs: SM mean end "
              + " ".join(f"{corr([per_sm[i][k] for k in ks], [per_sm[j][k] for k in ks]):+.2f}" for i, j in pairs)
              + " | CTA mean end "
              + " ".join(f"{corr([per_cta[i][k] for k in kc], [per_cta[j][k] for k in kc]):+.2f}" for i, j in pairs))
