"""What an operator costs, independent of any hardware: the result type of every op spec."""

from __future__ import annotations

from dataclasses import dataclass

ARRAY, VECTOR, MEMORY, FREE = "array", "vector", "memory", "free"


@dataclass(frozen=True)
class GemmShape:
    """An op lowered to ``groups`` independent GEMMs of (M x K) @ (K x N).

    Conv lowers by im2col: M = output pixels (x batch), K = in-channels/group x kh x kw,
    N = out-channels/group; depthwise is groups = channels with N = depth multiplier.
    """

    m: int
    k: int
    n: int
    groups: int = 1
    width: int = 0  # output width of a convolution (M = batch x height x width); 0: not spatial

    @property
    def macs(self) -> int:
        return self.m * self.k * self.n * self.groups


@dataclass(frozen=True)
class HostInput:
    """A convolution input the host wrote: ``channels`` per pixel, read through a kernel of
    ``taps`` (height x width) positions. A DMA that fetches the NPU's input blocks reads its
    pixels in runs of at most one block's depth (hardware/units/dma_channels.py)."""

    channels: int
    taps: int


# the ops that reduce along an axis before they can write (``Work.reduction``): a
# normalisation's mean and variance, a Softmax's max and sum
REDUCTIONS = {"LayerNormalization": "norm", "InstanceNormalization": "norm",
              "GroupNormalization": "norm", "Softmax": "softmax", "LogSoftmax": "softmax"}


def reduction_of(op_type: str | None) -> str:
    """The reducing pass an op is: norm, softmax or "" (none)."""
    return REDUCTIONS.get(op_type or "", "")


@dataclass(frozen=True)
class Work:
    """Element counts and the unit that does the work.

    ``unit`` is ARRAY (MAC array, described by ``gemm``), VECTOR (``vector_ops`` elementwise
    operations), MEMORY (a data-movement copy of ``output_elems``) or FREE (a view: reshape,
    squeeze; no data moves). Bytes are element counts times the precision's width, which the
    compiler chooses, so they are not fixed here.
    """

    unit: str
    macs: int = 0
    vector_ops: int = 0
    input_elems: int = 0  # non-constant operands read
    weight_elems: int = 0  # constant operands read each inference (weights, biases, rows)
    output_elems: int = 0
    gemm: GemmShape | None = None
    # DRAM bytes of the inputs per on-chip byte: below 1 when the NPU pads the channels of
    # an input the host wrote unpadded (a graph input: the image crosses the link as 3
    # channels, the array sees 8 or 16)
    input_dram_ratio: float = 1.0
    # the outputs pass through the output stage's lookup table (a SiLU / Sigmoid /
    # HardSwish fused into a convolution on a profile with ``epilogue.lut_activations``)
    lut_activation: bool = False
    # constants held but not read each inference: the rows of an embedding table that no
    # index selects (a Gather reads only the rows it looks up)
    unread_weight_elems: int = 0
    # a convolution's input as the host wrote it into DRAM (unpadded, channels last); None:
    # a map the NPU wrote in its own layout
    host_input: HostInput | None = None
    # a copy's tensors as (pixels, channels): an engine that copies in micro-blocks rounds
    # each tensor's channels up to the block's depth (hardware/units/pooling_copy.py)
    copied: tuple[tuple[int, int], ...] = ()
    # elements a transcendental function (exp, tanh, erf, log) is evaluated on: a host that
    # runs them one at a time pays each (``host.transcendental_ns``)
    transcendentals: int = 0
    # the pass reduces along an axis before it can write: "norm" (a LayerNorm, InstanceNorm
    # or GroupNorm's mean and variance) or "softmax" (its max and sum); an NPU may retire
    # these at their own rate (``vector_unit.norm_elements_per_cycle`` / ``softmax_...``)
    reduction: str = ""

    @property
    def held_weight_elems(self) -> int:
        """Constants the kernel needs stored (in a cache or DRAM), read or not."""
        return self.weight_elems + self.unread_weight_elems

    @property
    def flops(self) -> int:
        """Host-CPU operations: 2 per MAC plus the elementwise operations."""
        return 2 * self.macs + self.vector_ops
