"""Whether an Arm Ethos-U85 runs a convolution kernel-first.

regor (Vela 5.2's C++ back end, architecture/ethosu85/ethos_u85.cpp ``ChooseKernelFirst``)
runs a convolution "part-kernel first" where 16-deep input slices taken over the kernel's
taps (counted in fives, at least two left over) use the array at least as well as 64-deep
slices; otherwise depth-first. The choice sets the depth its input blocks are fetched in
(16 or 64: hardware/units/dma_channels.py) and, kernel-first, how its taps are stepped
(four at a time for 8-bit inputs: hardware/channel_padding.py). Written here because the
rule is inside Vela's compiler; sparse weights (fives -> tens) are not modelled.
"""

from __future__ import annotations

import math


def kernel_first(channels: int, taps: int) -> bool:
    """regor's ChooseKernelFirst for dense weights: ``channels`` input channels through a
    kernel of ``taps`` positions."""
    rounded_taps = (taps // 5) * 5 + max(taps % 5, 2)
    by_kernel = channels / (math.ceil(channels / 16) * 16) * (taps / rounded_taps)
    by_depth = channels / (math.ceil(channels / 64) * 64)
    return by_kernel >= by_depth
