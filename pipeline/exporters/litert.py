"""Running a TFLite file in LiteRT, the runtime that defines its integer arithmetic.

The interpreter runs with LiteRT's default kernels, one thread: what a user who runs the
file gets, and bit for bit what npuflow's ONNX gives in onnxruntime on MLPerf Tiny's files
and the seeded Keras networks (``benchmarks/models``). LiteRT's *reference* kernels
(``OpResolverType.BUILTIN_REF``, the arithmetic TFLite Micro and Ethos-U follow) round the
requantization twice and differ from both by one step per layer, 5 steps deep in ResNet-8
and 11 at its int8 softmax (``tests/test_tflite.py`` measures it), so they are not used
for the accuracy figures.

Feeds and outputs are in the ONNX view of the file (``tflite_onnx``): float values, rank-4
tensors NCHW. A quantized input is quantized with the file's own scale and zero point, as
the ONNX graph's first QuantizeLinear does; a quantized output is dequantized; NCHW is
transposed to the file's NHWC and back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import UserError

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


def _interpreter(path: Path, all_tensors: bool = False) -> Any:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as exc:
        raise UserError("model=tflite needs pip install 'npuflow[tflite]' (LiteRT)") from exc
    try:
        interpreter = Interpreter(model_path=str(path), num_threads=1,
                                  experimental_preserve_all_tensors=all_tensors)
        interpreter.allocate_tensors()
    except (ValueError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"model.path: LiteRT cannot load '{path}': {first}") from exc
    return interpreter


def _quantize(x: np.ndarray, detail: dict) -> np.ndarray:
    scale, zero = detail["quantization"]
    dtype = detail["dtype"]
    if dtype in (np.float32, np.float16) or not scale:
        return x.astype(dtype)
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale) + zero, info.min, info.max).astype(dtype)


def _dequantize(y: np.ndarray, detail: dict) -> np.ndarray:
    scale, zero = detail["quantization"]
    if y.dtype in (np.float32, np.float16) or not scale:
        return y.astype(np.float32)
    return ((y.astype(np.float32) - zero) * scale).astype(np.float32)


class Runner:
    """One interpreter for a file, run on ONNX-view feeds."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.interpreter = _interpreter(self.path)
        self.inputs = self.interpreter.get_input_details()
        self.outputs = self.interpreter.get_output_details()

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The file's outputs (real values, NCHW where rank 4) for ``feeds`` keyed by the
        ONNX input names (the file's input tensor names)."""
        for detail in self.inputs:
            x = feeds[detail["name"]] if detail["name"] in feeds else next(iter(feeds.values()))
            if x.ndim == 4:
                x = x.transpose(TO_NHWC)
            self.interpreter.set_tensor(detail["index"], _quantize(x, detail))
        self.interpreter.invoke()
        out = []
        for detail in self.outputs:
            y = _dequantize(self.interpreter.get_tensor(detail["index"]), detail)
            out.append(y.transpose(TO_NCHW) if y.ndim == 4 else y)
        return out

    def raw(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The file's outputs as it stores them (the integers of a quantized output)."""
        self.run(feeds)
        return [self.interpreter.get_tensor(d["index"]) for d in self.outputs]


def first_outputs(path: Path, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """The first output for every feed, as ``quantization.accuracy.run_outputs`` returns
    it for an ONNX model."""
    runner = Runner(path)
    return [runner.run(f)[0] for f in feeds]
