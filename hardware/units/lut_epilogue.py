"""A lookup-table activation in the array's output stage (``epilogue.lut_activations``,
``lut_elements_per_cycle``): ceil(outputs / rate) cycles of table work per kernel.

Added after the convolution where the boards say so: rknn_model_zoo's yolov5s and
yolov5s_relu have the same RKNN-Toolkit2 estimate (it costs ConvExSwish as a plain
convolution), yet the board takes 5.5 ms longer with SiLU on the RK3588 and 12.6 ms on the
RK3566/68. With ``epilogue.lut_overlap`` the table works on results as the array produces
them, as NVDLA's output stage runs in line with its accumulator: the kernel's compute is
max(array, table), and only the table's excess over the array shows (``lut_cycles``);
where the DMA overlaps the compute too, the kernel takes the largest of the three."""

from __future__ import annotations

import math
from dataclasses import replace

from hardware.kernel_cost import KernelCost, overlaps_dma
from hardware.profile_schema import HardwareProfile
from hardware.units import OutputStage, register
from ops.work import ARRAY, Work


@register
class LutEpilogue(OutputStage):
    name = "lut_epilogue"

    @staticmethod
    def after(cost: KernelCost, work: Work, profile: HardwareProfile) -> KernelCost:
        if not work.lut_activation or work.unit != ARRAY:
            return cost
        table = math.ceil(work.output_elems / profile.epilogue.lut_elements_per_cycle)
        if not profile.epilogue.lut_overlap:
            return replace(cost, compute_cycles=cost.compute_cycles + table,
                           total_cycles=cost.total_cycles + table, lut_cycles=table)
        extra = max(0, table - cost.compute_cycles)
        if not extra:
            return cost
        compute = cost.compute_cycles + extra
        streamed = work.gemm is not None and overlaps_dma(work.gemm, profile)
        total = max(cost.total_cycles, compute + cost.overhead_cycles) if streamed \
            else cost.total_cycles + extra
        return replace(cost, compute_cycles=compute, total_cycles=total, lut_cycles=extra)
