"""Depthwise convolution in the MAC engine's channel-parallel mode.

A depthwise layer has one input channel per output channel, so the im2col GEMM of each
channel is (pixels x taps) @ (taps x 1): on a systolic array it fills one column and pays a
fill and drain per channel, which is not how NPUs built for MobileNets run it. Their MAC
engine has a depthwise mode that works on a block of ``channels`` channels x ``pixels``
output pixels at once and consumes ``taps`` kernel taps per step of ``step_cycles``
cycles. Vela's performance model of Ethos-U (``npu_performance._estimate_conv_cycles``,
ethos-u-vela 5.2.0) is this formula with the 2x2x8 output micro-block of the U55-256 and
``cycles = 4 x ceil(taps / 4)`` per micro-block, and at least ``cycles_wb`` (32 for a
micro-block 8 channels deep) per kernel step of an output block, the time to write it
back: a map of fewer than 8 micro-blocks (a spatial mean's single pixel, a 4x4 map) pays
that floor, not 4 cycles per micro-block. 16-bit activations take twice as long,
which the precision's throughput (MACs per PE per cycle, 0.5 for int16) expresses, unless
the mode lists the precision in ``full_rate`` (RKNN's fp16 depthwise runs at the int8 rate).
"""

from __future__ import annotations

import math

from hardware.profile_schema import DepthwiseMode, PerPrecision
from ops.work import GemmShape


def engine_cycles(gemm: GemmShape, mode: DepthwiseMode, throughput: float) -> int:
    """Cycles of a depthwise GEMM (``groups`` channels, M pixels, K taps, N = depth
    multiplier) in the engine's channel-parallel mode."""
    if throughput <= 0:
        raise ValueError("this precision does not run on the MAC array (throughput 0)")
    channels = gemm.groups * gemm.n
    # Vela 5.2 npu_performance._estimate_conv_cycles: max(cycles_wb, 4 x micro-blocks, twice
    # that for 16-bit activations) per step of 4 taps; the write-back floor is not scaled
    per_step = max(pixel_blocks(gemm, mode) * mode.step_cycles / throughput,
                   mode.writeback_cycles)
    steps = math.ceil(channels / mode.channels) * math.ceil(gemm.k / mode.taps)
    return math.ceil(steps * per_step)


def engine_rate(mode: DepthwiseMode, throughput: PerPrecision, precision: str) -> float:
    """MACs per PE per cycle the engine sustains at ``precision``: the array's, or its
    int8 rate for a precision in ``mode.full_rate`` that runs on the NPU at all."""
    rate = getattr(throughput, precision)
    return throughput.int8 if rate > 0 and precision in mode.full_rate else rate


def pixel_blocks(gemm: GemmShape, mode: DepthwiseMode) -> int:
    """Output-pixel blocks of ``block_rows`` x (pixels / block_rows): Vela counts a grid of
    micro-blocks, ceil(H / 2) x ceil(W / 2) for the U55-256's 2x2 and H x ceil(W / 2) for
    the U55-128's 2x1 (one row high, two pixels wide), so odd maps pay for partial blocks."""
    cols = mode.pixels // mode.block_rows
    if not gemm.width:
        return math.ceil(gemm.m / mode.pixels)
    rows = gemm.m // gemm.width  # batch x output height
    return math.ceil(rows / mode.block_rows) * math.ceil(gemm.width / cols)


def engine_efficiency(gemm: GemmShape, mode: DepthwiseMode) -> float:
    """Useful MACs per MAC slot of the engine block (edge effects of the ceilings)."""
    channels = gemm.groups * gemm.n
    slots = (math.ceil(channels / mode.channels) * mode.channels
             * pixel_blocks(gemm, mode) * mode.pixels
             * math.ceil(gemm.k / mode.taps) * mode.taps)
    return gemm.macs / slots if slots else 1.0
