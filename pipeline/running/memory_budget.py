"""Host memory a run will need, checked before it is allocated.

npuflow runs every model in onnxruntime on the host: the export's reference run, the
calibration, the per-layer error analysis. A model pinned to a huge input
(``model.input_shape=[1,3,60000,60000]``) would otherwise fail deep inside numpy with an
80 GiB allocation traceback, or be killed by the kernel's OOM killer minutes later. So the
stage that is about to run a model estimates what it will hold and refuses, in one line
naming the largest tensor and what to reduce, when that exceeds the memory the machine has
available (``MemAvailable`` in /proc/meminfo).

The estimate is the bytes of every tensor of one inference (inputs, activations, outputs,
weights; static shapes after shape inference) times how many inferences' tensors a step
keeps at once:

- export's reference run: 1, plus the float64 draw of the seeded input (twice its bytes);
- quantize: the per-layer analysis keeps every tensor of ``quant.analysis.samples`` samples
  for the float and the quantized model (2 x samples), entropy and percentile calibration
  keep every sample's tensors (``data.calibration_size``); minmax reduces in the graph.

Checked on resnet18 (int8, default analysis of 8 samples): at 448 px one inference holds
186 MB and the run peaked at 3.7 GB (estimate 3.2 GB); at 896 px, 745 MB and 12.6 GB
(estimate 12.7 GB), both measured with ``/usr/bin/time -f %M``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import onnx

from pipeline.errors import UserError

_ELEMENT_BYTES = {onnx.TensorProto.DOUBLE: 8, onnx.TensorProto.INT64: 8,
                  onnx.TensorProto.UINT64: 8, onnx.TensorProto.FLOAT16: 2,
                  onnx.TensorProto.BFLOAT16: 2, onnx.TensorProto.INT16: 2,
                  onnx.TensorProto.UINT16: 2, onnx.TensorProto.INT8: 1,
                  onnx.TensorProto.UINT8: 1, onnx.TensorProto.BOOL: 1}


def available_bytes() -> int:
    """Memory the kernel says can be allocated without swapping."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


@dataclass(frozen=True)
class TensorSize:
    name: str
    shape: tuple[int, ...]
    bytes: int


def _size(vi: onnx.ValueInfoProto) -> TensorSize | None:
    t = vi.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
    if not t.HasField("shape") or any(d < 0 for d in dims):
        return None
    return TensorSize(vi.name, tuple(dims),
                      math.prod(dims) * _ELEMENT_BYTES.get(t.elem_type, 4))


def tensors(model: onnx.ModelProto) -> list[TensorSize]:
    """Every tensor of the graph with a static shape (inputs, value_info, outputs)."""
    g = model.graph
    seen: dict[str, TensorSize] = {}
    for vi in (*g.input, *g.value_info, *g.output):
        size = _size(vi)
        if size is not None:
            seen.setdefault(size.name, size)
    return list(seen.values())


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def weight_bytes(model: onnx.ModelProto) -> int:
    return sum(len(i.raw_data) for i in model.graph.initializer)


def check(model: onnx.ModelProto, copies: int, step: str, reduce: str,
          extra_bytes: int = 0, weights: int | None = None) -> None:
    """Refuse when ``copies`` inferences' tensors (plus ``extra_bytes``) exceed what the
    machine has available. ``weights``: the weights' bytes when ``model`` is a
    skeleton carrying the shapes only (``graph_edit.skeleton``)."""
    sizes = tensors(model)
    if not sizes:
        return
    one = sum(s.bytes for s in sizes)
    weights = weight_bytes(model) if weights is None else weights
    need = one * copies + weights + extra_bytes
    have = available_bytes()
    if need <= have:
        return
    largest = max(sizes, key=lambda s: s.bytes)
    raise UserError(
        f"{step}: needs about {_gib(need)} of host memory ({copies} x {_gib(one)} of tensors "
        f"per inference; the largest, '{largest.name}' {list(largest.shape)}, is "
        f"{_gib(largest.bytes)}), more than the {_gib(have)} available; reduce {reduce}")


def check_inputs(model: onnx.ModelProto, where: str) -> None:
    """Before seeded inputs are drawn: their float64 draw and float32 copy must fit
    (``where`` names the key that sets the input's size)."""
    inits = {i.name for i in model.graph.initializer}
    sizes = [s for vi in model.graph.input if vi.name not in inits
             for s in [_size(vi)] if s is not None]
    need = 3 * sum(s.bytes for s in sizes)
    have = available_bytes()
    if need > have:
        largest = max(sizes, key=lambda s: s.bytes)
        raise UserError(f"{where}: input '{largest.name}' {list(largest.shape)} alone is "
                        f"{_gib(largest.bytes)}; drawing a seeded input needs about "
                        f"{_gib(need)}, more than the {_gib(have)} available")
