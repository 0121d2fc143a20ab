"""How a vendor compiler rewrites a convolution its array does not run as written, named by
a profile's ``ops.Conv.lowering``.

Written here, not taken from a library, because it is the vendor compiler's private rule;
what is public is what it emits. ``rknn`` is RKNN-Toolkit2 2.5.0's, read off its layer
tables for one-layer probes on rk3588, rk3568 and rk3576 alike (``benchmarks/rknn_layers.py``,
probes ``patch_*`` and ``stride_*``):

- a kernel wider than ``kernel_max`` (16) taps on an axis is cut into ceil(k / 16) parts
  per axis, each a convolution over its slice of the input, summed (Slice, ConvAdd, Add);
- an even stride above ``stride_max`` (7) runs at s / 2^j, the first such stride within
  the limit, then 1x1 "select" convolutions keep every (2^j)-th output: a ViT-B/32 patch
  embedding (32x32, stride 32) is 4 parts of 16x16 at stride 4 on a 49x49 grid, 49 times
  the positions it keeps;
- an odd stride equal to an unpadded kernel of at most 16 taps becomes space-to-depth
  (exWindow + Reshape) and a 1x1 convolution over Cin x k x k channels; other odd strides
  run as written (3x3 at stride 9, 21x21 at stride 21 in parts).

``native`` (every other profile) rewrites nothing: a convolution over the limits falls to
the CPU, as the op checks say.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ops.graph import Graph, Node


@dataclass(frozen=True)
class Lowering:
    """A convolution as the array runs it."""

    parts: int = 1  # kernel parts over all axes, each read from its own slice and summed
    run_strides: tuple[int, ...] = ()  # the strides the array runs at (empty: as written)
    space_to_depth: bool = False  # patches rearranged into channels, then a 1x1
    how: str = ""  # what the compiler did, for the check's detail (empty: nothing)

    @property
    def rewritten(self) -> bool:
        return bool(self.how)


AS_WRITTEN = Lowering()


def _geometry(node: Node, graph: Graph) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    taps = tuple(int(k) for k in graph.tensors[node.inputs[1]].shape[2:])
    strides = tuple(int(s) for s in node.attrs.get("strides") or [1] * len(taps))
    unpadded = not any(int(p) for p in node.attrs.get("pads") or []) and \
        node.attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID", b"NOTSET", b"VALID")
    return taps, strides, unpadded


def _native(node: Node, graph: Graph, limits: Mapping[str, Any]) -> Lowering:
    return AS_WRITTEN


def _rknn(node: Node, graph: Graph, limits: Mapping[str, Any]) -> Lowering:
    kernel_max, stride_max = limits.get("kernel_max", math.inf), limits.get("stride_max",
                                                                              math.inf)
    taps, strides, unpadded = _geometry(node, graph)
    if int(node.attrs.get("group", 1)) != 1:
        return AS_WRITTEN
    if unpadded and taps == strides and all(s % 2 and stride_max < s <= kernel_max
                                            for s in strides):
        side = "x".join(map(str, taps))
        return Lowering(space_to_depth=True,
                        how=f"{side} patches as space-to-depth + 1x1 (RKNN's lowering)")
    parts = math.prod(math.ceil(k / kernel_max) for k in taps)
    run = []
    for s in strides:
        while s > stride_max and s % 2 == 0:
            s //= 2
        run.append(s)
    run_strides = tuple(run) if tuple(run) != strides else ()
    if parts == 1 and not run_strides:
        return AS_WRITTEN
    said = [f"{parts} kernel parts"] if parts > 1 else []
    if run_strides:
        keep = "x".join(str(s // r) for s, r in zip(strides, run_strides, strict=True))
        said.append(f"stride {'x'.join(map(str, run_strides))} then keep 1 in {keep}")
    return Lowering(parts=parts, run_strides=run_strides,
                    how=", ".join(said) + " (RKNN's lowering)")


LOWERINGS: dict[str, Callable[[Node, Graph, Mapping[str, Any]], Lowering]] = {
    "native": _native,
    "rknn": _rknn,
}


def conv_lowering(node: Node, graph: Graph, limits: Mapping[str, Any]) -> Lowering:
    """The rewrite ``limits['lowering']`` (a profile's ``ops.Conv``) applies to ``node``."""
    if node.op_type != "Conv":
        return AS_WRITTEN
    return LOWERINGS[limits.get("lowering", "native")](node, graph, limits)


def run_outputs(node: Node, graph: Graph, lowering: Lowering) -> tuple[int, ...]:
    """The output map the array computes at the lowering's strides (ONNX's output size
    formula with each stride replaced)."""
    x = graph.tensors[node.inputs[0]].shape
    taps, strides, _ = _geometry(node, graph)
    rank = len(taps)
    pads = [int(p) for p in node.attrs.get("pads") or [0] * (2 * rank)]
    dilations = [int(d) for d in node.attrs.get("dilations") or [1] * rank]
    run = lowering.run_strides or strides
    return tuple((x[2 + i] + pads[i] + pads[i + rank] - dilations[i] * (taps[i] - 1) - 1)
                 // run[i] + 1 for i in range(rank))
