"""A lookup-table activation in the array's output stage (``epilogue.lut_activations``,
``lut_elements_per_cycle``): ceil(outputs / rate) cycles on top of the kernel's. Added, not
overlapped, because the boards say so: rknn_model_zoo's yolov5s and yolov5s_relu have the
same RKNN-Toolkit2 estimate (it costs ConvExSwish as a plain convolution), yet the board
takes 5.5 ms longer with SiLU on the RK3588 and 12.6 ms on the RK3566/68."""

from __future__ import annotations

import math
from dataclasses import replace

from hardware.kernel_cost import KernelCost
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
        extra = math.ceil(work.output_elems / profile.epilogue.lut_elements_per_cycle)
        return replace(cost, compute_cycles=cost.compute_cycles + extra,
                       total_cycles=cost.total_cycles + extra, lut_cycles=extra)
