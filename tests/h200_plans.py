"""What README.md (Performance, "The launch plan") and benchmarks/NOTES.md say each config of the
benchmark grid runs on an H200 (132 SMs, sm_90), and the off-grid configs around the two-tile
kernel's bound; shared by the GPU test (test_gpu_launch_modes.py: the real device's plan) and the
host test (test_launch_plan_host.py: ffi/gpu/launch_plan.h compiled against a stub runtime).

Two-tile steps where segments have at most 2 tiles and split CTAs are at most 1.5 an SM, or at
most 2 an SM where the merge is a programmatic dependent (since version 33; before, only where the
merge's CTAs also fit beside them: split + merge CTAs at most 3 an SM); ping-pong where segments have
16 tiles or more at 2 CTAs an SM, as two pairs a CTA (one CTA an SM) where segments have 32 tiles or
more (128 before version 45) and those CTAs fit in one wave; the merge a programmatic dependent where the split grid has at
most 2 CTAs an SM; a 4-tile segment's copies all in the prologue (the fill ring) where segments
have 4 tiles (full 2k R=16, 8k R=4, 32k R=1), except where the merge, a programmatic dependent,
has CTAs that do not fit (2k R=16: 256 + 256). D = 128 runs neither split variant.
"""

# Off the grid, around the two-tile kernel's bound at 2 split CTAs an SM (measured in
# benchmarks/results/h200_v26_pairs_rule_kb.txt and, with its register cap, h200_v32_pairs_cap_kb.txt and
# h200_v33_pairs_rule_kb.txt, the first with 3k R=5):
# split + merge CTAs on an H200 396 (SWA R=6), 336 (full 2k R=7), 400 (full 3k R=5), 462 (SWA R=7)
# and 512 (full 1k R=16) all take it since version 33 (the last three did not before).
OFF_GRID = ("swa32k-r6", "full2k-r7", "full3k-r5", "swa32k-r7", "full1k-r16")

# at 2 split CTAs an SM: need the merge to be a programmatic dependent
TWO_TILE_AT_TWO_AN_SM = {"full2k-r8", "full8k-r2", "swa32k-r6", "full2k-r7", "full3k-r5", "swa32k-r7",
                         "full1k-r16"}
TWO_TILE = {"swa32k-r1", "swa32k-r2", "swa32k-r4", "full2k-r1", "full2k-r2", "full2k-r4",
            "full8k-r1"} | TWO_TILE_AT_TWO_AN_SM
PINGPONG = {"full8k-r16", "full32k-r4", "full32k-r8", "full32k-r16", "full128k-r1",
            "full128k-r2", "full128k-r4", "full128k-r8", "full128k-r16"}
# of those, as two pairs a CTA (one CTA an SM): segments of 32 tiles or more, one wave (128k
# R=16 at 8 splits, 256 tiles, since the split count's two-pair bound; 32k R=8 and 128k R=2 at 32
# tiles and 32k R=16 at 64 since version 45; 128k R=4, 33 splits, would be 136 CTAs)
PINGPONG_TWO_PAIRS = {"full32k-r8", "full32k-r16", "full128k-r2", "full128k-r8", "full128k-r16"}
# launch_plan.h kPpTwoPairsMinSegmentTiles: the fewest tiles a segment of the two-pair form (any GPU)
TWO_PAIRS_MIN_SEGMENT_TILES = 32
SPLIT_KERNELS = ("per_tile", "two_tile", "pingpong", "pingpong_two_pairs")  # the query's order
FILL_RING = {"full8k-r4", "full32k-r1"}


def split_kernel(config: str, d: int) -> str:
    """The split kernel a config of the grid (or OFF_GRID) runs on an H200 by default."""
    if d != 64:
        return "per_tile"
    if config in PINGPONG_TWO_PAIRS:
        return "pingpong_two_pairs"
    return "two_tile" if config in TWO_TILE else "pingpong" if config in PINGPONG else "per_tile"


def split_kernel_without_pdl(config: str, d: int) -> str:
    """The same with MUSE_ATTN_PDL=0: the two-tile kernel keeps its 1.5-an-SM bound (measured
    only beside a programmatic dependent merge at 2 an SM)."""
    kernel = split_kernel(config, d)
    return "per_tile" if kernel == "two_tile" and config in TWO_TILE_AT_TWO_AN_SM else kernel


def fill_ring(config: str, d: int, pdl: bool = True) -> bool:
    """Whether the fill-ring form runs; with the merge a plain launch its CTAs need not fit, so
    full 2k R=16 takes it too."""
    return d == 64 and config in (FILL_RING if pdl else FILL_RING | {"full2k-r16"})


# Where the merge's warps a row differ from the fewest that load a row's segments in one batch
# (16 a warp): widened while a warp folds more than 9 and the merge's CTAs stay one an SM, two
# beside the ping-pong split kernel (since version 43: full 128k R=2 and 32k R=4; before, 4 and 2
# warps). D = 128 runs the plain split kernel, so only the one-an-SM bound there.
MERGE_WARPS_WIDENED = {("full2k-r1", 64): 4, ("full2k-r1", 128): 4, ("full8k-r1", 64): 8,
                       ("full8k-r1", 128): 8, ("full32k-r4", 64): 4, ("full128k-r2", 64): 8}


def fewest_merge_warps(num_splits: int) -> int:
    """The fewest warps a row (a power of 2 up to 8) that load a row's segments in one batch of 16
    each (launch_plan.h kMergeBatch; any GPU), where the merge's width starts."""
    return next(w for w in (1, 2, 4, 8) if w * 16 >= num_splits or w == 8)


def merge_warps(config: str, d: int, num_splits: int) -> int:
    """The merge's warps a row a config of the grid runs on an H200 by default."""
    return MERGE_WARPS_WIDENED.get((config, d), fewest_merge_warps(num_splits))
