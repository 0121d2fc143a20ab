"""How many output blocks a layer's plane is cut into on an NPU that accumulates one block
at a time in a small accumulator RAM (Arm Ethos-U85), and so how often it re-reads what it
reads once per block (the per-channel scale words).

Vela 5.2's C++ back end (regor, architecture/ethosu85/ethos_u85.cpp ``FindBlockConfig``)
picks each convolution's output block: a block must fit the accumulator RAM twice over
(``TryBlockConfig``: double-buffered, ``numBlocksInRam`` 2, 32-bit accumulators for int8,
depth in granules of 16), and among those it takes the one that fetches the fewest input
and weight elements per output element (the input once per depth slice of the output,
the weights once per block in the plane). ``MeasureElementAccess`` then re-reads the
layer's scale words once per block in the plane (``weightsRefetch``). This module keeps
that search at the level npuflow's kernels describe: the input's elements and the
weights' per output channel, blocks of ``pixels`` x ``depth`` with depth a multiple of 16;
regor's own 2-D block shapes, input halo and block granules are left out, so the count is
the search's, not its exact block.

Written here because the search is inside Vela's compiler and no library exposes it.
"""

from __future__ import annotations

import math

from ops.work import Work

ACC_BYTES = 4  # an int8 layer's 32-bit accumulators
DEPTH_GRANULE = 16  # regor ACC_DEPTH_GRANULE / OFMSplitDepth


def blocks_in_plane(work: Work, accumulator_bytes: int) -> int:
    """Output blocks in the plane of a layer with weights (1 for anything else)."""
    g = work.gemm
    if g is None or not work.weight_elems:
        return 1
    pixels, channels = max(g.m, 1), g.n * g.groups
    depthwise = g.groups > 1
    per_block = accumulator_bytes // (2 * ACC_BYTES)  # accumulators of one block
    best: tuple[float, int] | None = None
    for depth in range(DEPTH_GRANULE, _round_up(channels) + 1, DEPTH_GRANULE):
        block_pixels = per_block // depth
        if block_pixels < 1:
            break
        in_plane = math.ceil(pixels / block_pixels)
        slices = 1 if depthwise else math.ceil(channels / depth)
        # regor's relative cost: input elements fetched + weight elements fetched
        cost = work.input_elems * slices + work.weight_elems * in_plane
        if best is None or cost < best[0]:
            best = (cost, in_plane)
    return best[1] if best else pixels


def _round_up(channels: int) -> int:
    return max(DEPTH_GRANULE, math.ceil(channels / DEPTH_GRANULE) * DEPTH_GRANULE)
