"""The README's performance table from a bench JSON, with a previous run's device-clock column.

    python scripts/readme_table.py benchmarks/results/h200.json benchmarks/results/h200_v25.json "version 25"
"""
import json
import sys


def label(s):
    if s["window"]:
        return f"SWA {s['window']} @ {s['L'] // 1024}k, R={s['R']}"
    return f"full {s['L'] // 1024}k, R={s['R']}"


def fmt(v, spec):
    """A figure, or "-" where the run has none (a skipped or failed config, a mode not run)."""
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def main(cur_path, prev_path, prev_name):
    cur = {s["config"]: s for s in json.load(open(cur_path))["summary"]}
    prev = {s["config"]: s for s in json.load(open(prev_path))["summary"]}
    print(f"| config | KV MB | splits | ours µs (cmd buffers on / off) | ours on, device clock µs | GB/s "
          f"| % of copy BW (host / device clock) | × FlashInfer hot (host / device clock) | FlashInfer hot µs "
          f"| cold µs, ours / FlashInfer, in a graph (device clock) | × FlashInfer cold, in a graph "
          f"| cold µs: ours (host, paired chains) / FlashInfer (one replay, events) "
          f"| {prev_name}: ours on µs, device clock (× FI) |")
    print("|---" * 13 + "|")
    for name, s in cur.items():
        p = prev.get(name, {})
        g = s.get
        pc = f"{fmt(p.get('ours_dev_on_us'), '.1f')} ({fmt(p.get('ratio_to_fi_hot_dev'), '.2f')})"
        print(f"| {label(s)} | {fmt(g('kv_mb'), '.1f')} | {g('num_splits', '-')} "
              f"| {fmt(g('ours_on_us'), '.1f')} / {fmt(g('ours_off_us'), '.1f')} "
              f"| {fmt(g('ours_dev_on_us'), '.1f')} | {fmt(g('ours_GBps'), '.0f')} "
              f"| {fmt(g('pct_copy'), '.0f')} / {fmt(g('pct_copy_dev'), '.0f')} "
              f"| {fmt(g('ratio_to_fi_hot'), '.2f')} / {fmt(g('ratio_to_fi_hot_dev'), '.2f')} "
              f"| {fmt(g('fi_hot_us'), '.1f')} "
              f"| {fmt(g('ours_cold_dev_on_us'), '.1f')} / {fmt(g('fi_cold_graph_us'), '.1f')} "
              f"| {fmt(g('ratio_to_fi_cold_graph'), '.2f')} "
              f"| {fmt(g('ours_cold_on_us'), '.1f')} / {fmt(g('fi_cold_us'), '.1f')} | {pc} |")


if __name__ == "__main__":
    main(*sys.argv[1:4])
