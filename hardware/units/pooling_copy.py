"""Copies run on the pooling engine (``units.pooling_copy``): Arm Ethos-U85.

Vela 5.2's C++ back end lowers a Concat to one MemoryCopy per input it cannot write in
place (regor ``GraphIrOptimiser::RewriteConcat``), and the Ethos-U85 runs a MemoryCopy,
a Transpose or a Reverse as a 1x1 average pool that changes nothing (``ArchEthosU85::
UseAvgPoolNop``). Its pooling engine takes ``max(4, kernel elements) x ifm bits / 2``
cycles per output micro-block (``EthosU85Performance::EstimateMacCyclesPerBlock``), so a
1x1 pool pays for four kernel steps: 16 cycles per micro-block of int8, whatever its
channels fill of the block's depth. Measured against Vela 5.2 on a U-Net's skip copies
(ethos-u85-256, Ethos_U85_SYS_DRAM_Mid): 16x16x32, 32x32x16 and 64x64x8 int8 copies take
4,320, 8,336 and 32,880 cycles, 0.53, 0.51 and 1.0 per element: 1x2x16 micro-blocks, the
8-channel map filling half of each.

A copy's tensors come as (pixels, channels) in ``Work.copied`` (a Concat's inputs that
are copied); a copy without them (a Slice, a Pad) is counted in blocks as deep as the
micro-block. Written here because the per-block model is inside Vela's compiler.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from omegaconf import MISSING

from hardware.bounds import AT_LEAST_1, bounded
from hardware.kernel_cost import WIDTHS, KernelCost
from hardware.profile_schema import HardwareProfile
from hardware.units import Operands, Unit, register, section, streamed
from ops.work import MEMORY, Work


@dataclass
class PoolingCopySection:
    """The pooling engine's output micro-block a copy runs in (regor's s_EthosU85Configs
    ofmUBlocks) and the kernel steps it pays at least (regor: 4)."""

    # output pixels of the micro-block a copy runs in (1x2x16 on the U85-256: 2)
    ublock_pixels: int = bounded(MISSING, AT_LEAST_1, plausible=(1, 64))
    # its channels: a tensor's channels are rounded up to a multiple of them
    ublock_depth: int = bounded(MISSING, AT_LEAST_1, plausible=(1, 256))
    # kernel steps a micro-block pays at least, whatever the kernel (regor: max(4, taps))
    min_kernel_steps: int = bounded(4, AT_LEAST_1, plausible=(1, 64))


def pooling_copy_cycles(copied: list[tuple[int, int]], element_bytes: int,
                        s: PoolingCopySection) -> int:
    """``min_kernel_steps x ifm bits / 2`` cycles per micro-block of each copied tensor,
    its channels rounded up to the micro-block's depth."""
    per_block = s.min_kernel_steps * 8 * element_bytes // 2
    blocks = sum(math.ceil(pixels / s.ublock_pixels) * math.ceil(channels / s.ublock_depth)
                 for pixels, channels in copied)
    return blocks * per_block


@register
class PoolingCopyUnit(Unit):
    name = "pooling_copy"
    lane = "npu.vector"
    Section = PoolingCopySection
    replaces = "memory"

    @staticmethod
    def runs(work: Work, profile: HardwareProfile, depthwise: bool) -> bool:
        return work.unit == MEMORY and section(profile, "pooling_copy") is not None

    @staticmethod
    def cost(work: Work, precision: str, profile: HardwareProfile, where: Operands
             ) -> KernelCost:
        s: PoolingCopySection = section(profile, "pooling_copy")
        copied = list(work.copied) or [(math.ceil(work.output_elems / s.ublock_depth),
                                        s.ublock_depth)]
        compute = pooling_copy_cycles(copied, WIDTHS[precision][0], s)
        return streamed(work, precision, profile, where, "pooling_copy", compute)
