"""How an NPU pads a GEMM's channels: what it stores and what its array computes.

Written here rather than taken from a library because it is the chip's rule, not the
graph's: the profile's ``channel_alignment`` is the memory layout's channel multiple
(RKNN's NC1HWC2 blocks of 16 channels, Ethos-U's bricks of 8), and ``mac_array.tap_channels``
is the atom a direct-convolution array reads per kernel tap (NVDLA's atomic-C; RKNN-Toolkit2's
per-layer estimate charges a 3-channel 6x6 stem 36 atoms per output pixel). The compiler
supplies the graph facts (is the op a convolution, how many input channels it has).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hardware.kernel_first import kernel_first
from ops.work import GemmShape


@dataclass(frozen=True)
class PaddedGemm:
    stored: GemmShape  # the layout in memory: its bytes
    computed: GemmShape  # what the array multiplies: its cycles
    input_scale: float  # padded / real input bytes
    output_scale: float  # padded / real output bytes


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def pad_gemm(g: GemmShape, alignment: int, tap_channels: int = 0,
             conv_in_channels: int | None = None, kernel_first_taps: int = 0) -> PaddedGemm:
    """Pad ``g`` to the layout's channel ``alignment``; a convolution
    (``conv_in_channels`` given) on a direct-convolution array (``tap_channels`` > 0) also
    takes every kernel tap's input channels as whole atoms: its GEMM depth is
    taps x ceil(Cin / atom) x atom, where im2col would pack the taps into ceil(Cin x taps /
    atom). One the array runs kernel-first (``kernel_first_taps`` > 0, regor's choice in
    hardware/kernel_first.py) computes its taps in whole steps of that many. Depthwise and
    grouped convolutions pad their number of groups instead."""
    alignment = max(alignment, 1)
    if conv_in_channels is None:
        padded = replace(g, k=round_up(g.k, alignment), n=round_up(g.n, alignment))
        return PaddedGemm(padded, padded, padded.k / g.k, padded.n / g.n)
    cin = conv_in_channels
    if g.groups > 1:
        padded = replace(g, groups=round_up(g.groups, alignment))
        scale = padded.groups / g.groups
        return PaddedGemm(padded, padded, scale, scale)
    taps = g.k // max(cin, 1)
    stored = replace(g, k=round_up(cin, alignment) * taps, n=round_up(g.n, alignment))
    if kernel_first_taps and kernel_first(cin, taps):
        taps = round_up(taps, kernel_first_taps)
    computed = replace(stored, k=round_up(cin, max(alignment, tap_channels)) * taps)
    return PaddedGemm(stored, computed, round_up(cin, alignment) / cin, computed.n / g.n)
