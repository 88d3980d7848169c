"""What the launch plan (ffi/gpu/launch_plan.h) gives each config of the benchmark grid on an
H200 / H100 SXM (132 SMs, sm_90, the default build's sm_90a code), as the README's Performance
section describes it; shared by the host test (test_launch_plan.py: the plan of a described
device, on any machine) and the GPU test (test_gpu_launch_modes.py: the real device's plan).

The rules in words: two-tile steps where segments have at most 2 tiles and split CTAs are at most
1.5 an SM, or at most 2 an SM beside a dependent merge; ping-pong where segments have 16 tiles or
more at 2 CTAs an SM, as two pairs a CTA (one CTA an SM) where segments have 32 tiles or more and
those CTAs fit in one wave; the fill ring where segments have 4 tiles, except where a dependent
merge's CTAs do not fit beside the split CTAs (full 2k R=16: 256 + 256); the merge a dependent
launch where the split grid has at most 2 CTAs an SM. D = 128 runs the per-tile kernel. Segments
of 128 tiles at most: full 128k R=16 takes 24 of 86 tiles (per_tile), not 8 of 256.
"""

import re

# One TP rank of Muse Spark: 16 query heads, 2 KV heads, 8 tokens a request, pages of 16 keys.
HQ, HKV, NQ, PAGE = 16, 2, 8, 16
SMS = 132
H200 = dict(vendor="nvidia", multiprocessors=SMS, compute_major=9, warp_size=32,
            merge_can_wait=True, has_two_pairs=True)

R_VALUES = (1, 2, 4, 8, 16)
GRID = ([f"swa32k-r{r}" for r in R_VALUES]
        + [f"full{k}-r{r}" for k in ("2k", "8k", "32k", "128k") for r in R_VALUES])
# Off the grid, around the two-tile kernel's bound at 2 split CTAs an SM: split + merge CTAs 396
# (SWA R=6), 336 (full 2k R=7), 400 (full 3k R=5), 462 (SWA R=7) and 512 (full 1k R=16).
OFF_GRID = ["swa32k-r6", "full2k-r7", "full3k-r5", "swa32k-r7", "full1k-r16"]


def parse(name: str):
    """(context keys, R, window or None) of a config name: full8k-r4, swa32k-r16 (window 2048)."""
    m = re.fullmatch(r"(full|swa)(\d+)k-r(\d+)", name)
    assert m, name
    return int(m.group(2)) * 1024, int(m.group(3)), 2048 if m.group(1) == "swa" else None


# at 2 split CTAs an SM: need the merge to be a dependent launch
TWO_TILE_AT_TWO_AN_SM = {"full2k-r8", "full8k-r2", "swa32k-r6", "full2k-r7", "full3k-r5", "swa32k-r7",
                         "full1k-r16"}
TWO_TILE = {"swa32k-r1", "swa32k-r2", "swa32k-r4", "full2k-r1", "full2k-r2", "full2k-r4",
            "full8k-r1"} | TWO_TILE_AT_TWO_AN_SM
PINGPONG = {"full8k-r16", "full32k-r4", "full128k-r1", "full128k-r4"}
PINGPONG_TWO_PAIRS = {"full32k-r8", "full32k-r16", "full128k-r2", "full128k-r8"}
FILL_RING = {"full8k-r4", "full32k-r1"}
# the fewest tiles a segment of the two-pair form has (tuning.h two_pairs_min_segment_tiles)
TWO_PAIRS_MIN_SEGMENT_TILES = 32


def split_kernel(config: str, d: int, pdl: bool = True) -> str:
    """The split kernel a config runs on an H200 by default (pdl=False: with the merge forced to a
    plain launch, where the two-tile kernel keeps its 1.5-an-SM bound and the fill ring no longer
    needs the merge's CTAs to fit, so full 2k R=16 takes it too)."""
    if d != 64:
        return "per_tile"
    if config in PINGPONG_TWO_PAIRS:
        return "pingpong_two_pairs"
    if config in PINGPONG:
        return "pingpong"
    if config in TWO_TILE and (pdl or config not in TWO_TILE_AT_TWO_AN_SM):
        return "two_tile"
    if config in FILL_RING or (not pdl and config == "full2k-r16"):
        return "fill_ring"
    return "per_tile"


# Where the merge's warps a row differ from the fewest that load a row's segments in one batch
# (16 a warp): widened while a warp folds more than 9 and the merge's CTAs stay one an SM, two
# beside the ping-pong split kernel.
MERGE_WARPS_WIDENED = {("full2k-r1", 64): 4, ("full2k-r1", 128): 4, ("full8k-r1", 64): 8,
                       ("full8k-r1", 128): 8, ("full32k-r4", 64): 4, ("full128k-r2", 64): 8}


def fewest_merge_warps(num_splits: int) -> int:
    """The fewest warps a row (a power of 2 up to 8) that load a row's segments in one batch of 16
    each, where the merge's width starts (any GPU)."""
    return next(w for w in (1, 2, 4, 8) if w * 16 >= num_splits or w == 8)


def merge_warps(config: str, d: int, num_splits: int) -> int:
    """The merge's warps a row a config runs on an H200 by default."""
    return MERGE_WARPS_WIDENED.get((config, d), fewest_merge_warps(num_splits))
