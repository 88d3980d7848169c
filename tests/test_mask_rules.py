"""muse_attn/mask.h's draft rules (the functions the GPU kernels are to call per row and key) on
the host, against the README's words written in Python: tree_draft_row + draft_key_is_visible
for random trees, counts, contexts (negative too), windows and raw (unclamped) depths and masks;
the tree of the causal mask against key_is_visible (the chain);
draft_slot_is_read / tree_read_bits; tree_whole_tiles against the visibility of every key."""

import random
import subprocess

from conftest import build_host_harness

HARNESS = r"""
#include <cstdio>
#include <cstdint>
#include "muse_attn/mask.h"
using namespace muse_attn;
// Per case: nq ctx n window, then nq raw depths and nq raw mask words. Prints, for the rows t
// < nq: the tree row's visibility of keys [0, ctx + nq) as 0/1, then key_is_visible's; then the
// read bits and the whole-tile range.
int main() {
  int nq, ctx, n, window;
  while (std::scanf("%d %d %d %d", &nq, &ctx, &n, &window) == 4) {
    int raw_depth[32], depth[32];
    unsigned mask[32];
    for (int t = 0; t < nq; ++t) std::scanf("%d", &raw_depth[t]);
    for (int t = 0; t < nq; ++t) std::scanf("%u", &mask[t]);
    const int count = clamp_draft_count(n, nq);
    int max_depth = 0;
    for (int t = 0; t < nq; ++t) depth[t] = clamp_draft_depth(raw_depth[t], nq);
    for (int t = 0; t < count; ++t) max_depth = depth[t] > max_depth ? depth[t] : max_depth;
    const int keys = ctx + count > 0 ? ctx + count : 0;
    DraftRow rows[32];
    for (int t = 0; t < nq; ++t) {
      rows[t] = tree_draft_row(ctx, count, t, mask[t], depth, window);
      for (int k = 0; k < keys; ++k) std::putchar(draft_key_is_visible(rows[t], ctx, k) ? '1' : '0');
      std::putchar(' ');
      const bool live = t < count && ctx + t >= 0;
      for (int k = 0; k < keys; ++k)
        std::putchar(live && key_is_visible(k, ctx + t, window) ? '1' : '0');
      std::putchar('\n');
    }
    const unsigned read = tree_read_bits(rows, count);
    int lo, hi;
    tree_whole_tiles(ctx, max_depth, window, &lo, &hi);
    std::printf("%u %d %d ", read, lo, hi);
    for (int k = 0; k < keys; ++k) std::putchar(draft_slot_is_read(k, ctx, read) ? '1' : '0');
    std::printf("\n");
  }
  return 0;
}
"""


def spec_visible(ctx, n, t, window, depth, mask_row, key):
    """The README's rule for a tree row (depths already clamped)."""
    if t >= n or ctx + t < 0:
        return False
    qpos = ctx + depth[t]
    if key < ctx:
        kpos = key
    else:
        j = key - ctx
        if j >= n or not (mask_row >> j) & 1:
            return False
        kpos = ctx + depth[j]
    return window == 0 or qpos - kpos < window


def test_draft_rules_against_the_spec(tmp_path_factory):
    exe = build_host_harness(tmp_path_factory, "mask_rules", HARNESS)
    rnd = random.Random(62)
    cases = []
    for _ in range(1500):
        nq = rnd.choice([1, 2, 5, 8, 16])
        ctx = rnd.choice([rnd.randint(-nq, 3), rnd.randint(0, 200)])
        n = rnd.choice([nq, rnd.randint(0, nq), -3, nq + 5, -(2**31), 2**31 - 1])
        window = rnd.choice([0, 0, 1, 2, 3, 5, 64, rnd.randint(1, 300)])
        depths = [rnd.choice([t, rnd.randint(0, nq - 1), -7, nq + 3, -(2**31)]) for t in range(nq)]
        masks = [rnd.choice([(2 << t) - 1, rnd.getrandbits(32), 0xFFFFFFFF, 0]) for t in range(nq)]
        cases.append((nq, ctx, n, window, depths, masks))
    text = "".join(f"{nq} {ctx} {n} {w} {' '.join(map(str, d))} {' '.join(map(str, m))}\n"
                   for nq, ctx, n, w, d, m in cases)
    proc = subprocess.run([exe], input=text, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    at = 0
    checked = 0
    for nq, ctx, n_raw, window, raw_depths, masks in cases:
        n = min(max(n_raw, 0), nq)
        depth = [min(max(d, 0), nq - 1) for d in raw_depths]
        keys = max(ctx + n, 0)
        seen = 0
        for t in range(nq):
            tree, causal = (lines[at].split(" ") + [""])[:2] if keys else ("", "")
            at += 1
            want = "".join("1" if spec_visible(ctx, n, t, window, depth, masks[t], k) else "0"
                           for k in range(keys))
            assert tree == want, (nq, ctx, n_raw, window, raw_depths, masks, t)
            if masks[t] == (2 << t) - 1 and depth == list(range(nq)):
                assert tree == causal, ("causal tree != key_is_visible", nq, ctx, n, window, t)
            if t < n:
                seen |= sum(1 << (k - ctx) for k in range(max(ctx, 0), keys) if tree[k] == "1")
            checked += keys
        read, lo, hi, slots = lines[at].split(" ")
        at += 1
        assert int(read) == seen, (nq, ctx, n_raw, masks)
        assert slots == "".join("1" if k < ctx or (seen >> (k - ctx)) & 1 else "0"
                                for k in range(keys))
        # Whole tiles: every key of each is visible to every computed row.
        live = [t for t in range(n) if ctx + t >= 0]
        for tile in range(int(lo), int(hi)):
            for k in range(64 * tile, 64 * tile + 64):
                assert all(spec_visible(ctx, n, t, window, depth, masks[t], k) for t in live), (
                    "whole tile with a hidden key", nq, ctx, n, window, tile, k)
    assert checked > 10000
