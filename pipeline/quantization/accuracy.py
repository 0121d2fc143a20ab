"""How much accuracy quantization costs, end to end and layer by layer.

- End metrics: ``evaluation.py`` (the configured metric against labels, agreement and
  output cosine against the fp32 model).
- *Accumulated* per-layer errors (RKNN-Toolkit2's default): run the whole quantized model
  and compare every layer's dequantized output with the float model's, using
  onnxruntime's ``qdq_loss_debug`` to expose and match the same named tensors.
- *Isolated* per-layer errors: quantize one layer alone (everything else float) and
  compare its output; the same run gives the layer's effect on the model output, which
  ranks layers for mixed precision.
The first layer whose cosine drops below ``jump_cosine`` is the one to look at (the seeds'
debugging recipe).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import qdq_loss_debug as qdq

from pipeline import onnx_io
from pipeline.errors import UserError
from pipeline.quantization.layers import Layer
from pipeline.running.interrupt import worker_pool


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64, copy=False).ravel(), b.astype(np.float64, copy=False).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(np.dot(a, b) / (na * nb))


def sqnr_db(reference: np.ndarray, test: np.ndarray) -> float:
    reference = reference.astype(np.float64, copy=False)
    noise = np.sum((reference - test) ** 2)
    signal = np.sum(reference ** 2)
    return float(10 * np.log10(signal / noise)) if noise > 0 else float("inf")


def run_outputs(model: onnx.ModelProto | Path, feeds: list[dict]) -> list[np.ndarray]:
    proto = onnx.load(model) if isinstance(model, Path) else model
    sess = onnx_io.session(proto)
    return [outputs[0] for outputs in onnx_io.run_all(sess, feeds)]


def _without_weight_saves(path: Path) -> None:
    """Drop the saved outputs of DequantizeLinear nodes that read an initializer: the
    dequantized weights are the same every sample, no activation is matched with them, and
    they were ~100 MB of the ~240 MB a ResNet-50 QDQ run copied out per sample."""
    model = onnx.load(path)
    g = model.graph
    constants = {i.name for i in g.initializer}
    weights = {n.output[0] + qdq._TENSOR_SAVE_POSTFIX for n in g.node
               if n.op_type == "DequantizeLinear" and n.input[0] in constants}
    keep = [n for n in g.node if not (n.op_type == "Reshape" and n.output[0] in weights)]
    outputs = [o for o in g.output if o.name not in weights]
    del g.node[:], g.output[:]
    g.node.extend(keep)
    g.output.extend(outputs)
    onnx.save(model, path)


# onnxruntime 1.32's QDQ propagation, moving a graph output's Q/DQ pair past the Reshape
# that saves it, writes a QuantizeLinear whose output_dtype (opset >= 21) disagrees with its
# zero point, and the session fails; below opset 21 it is kept, as the results have always
# been computed with it
_PROPAGATION_FIXED_BELOW = 21


def _collect(augmented: Path, feeds: list[dict], tag: str) -> dict[str, list[np.ndarray]]:
    """Every saved tensor of every feed (onnxruntime's ``qdq_loss_debug.collect_activations``
    with npuflow's sessions: the feeds run on every core, and the transformer above is
    left out where it breaks)."""
    model = onnx.load(augmented)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    disabled = ("QDQPropagationTransformer",) if opset >= _PROPAGATION_FIXED_BELOW else ()
    where = f"quantize: the {tag} model"
    sess = onnx_io.session(augmented, where=where, disabled=disabled)
    names = [o.name for o in sess.get_outputs()]
    out: dict[str, list[np.ndarray]] = {}
    for outputs in onnx_io.run_all(sess, feeds, where):
        for name, value in zip(names, outputs, strict=True):
            if name.endswith(qdq._TENSOR_SAVE_POSTFIX):
                out.setdefault(name[: -len(qdq._TENSOR_SAVE_POSTFIX)], []).append(value)
    return out


def _activations(model_path: Path, feeds: list[dict], tmp: Path, tag: str) -> dict:
    augmented = tmp / f"{tag}_aug.onnx"
    qdq.modify_model_output_intermediate_tensors(str(model_path), str(augmented))
    if tag == "qdq":
        _without_weight_saves(augmented)
    try:
        return _collect(augmented, feeds, tag)
    except UserError as exc:
        raise UserError(f"{exc}; quant.per_channel=false or quant.keep_float=[...] around "
                        "that node may avoid it") from exc


def layer_errors(float_path: Path, qdq_path: Path, feeds: list[dict],
                 float_acts: dict | None = None) -> tuple[dict[str, dict], dict]:
    """Per float tensor: cosine, max abs error and SQNR of the quantized model's value."""
    with tempfile.TemporaryDirectory() as tmp, worker_pool(2) as pool:
        # the two models' loops are independent: one per core
        q_job = pool.submit(_activations, qdq_path, feeds, Path(tmp), "qdq")
        if float_acts is None:
            float_acts = _activations(float_path, feeds, Path(tmp), "float")
        q_acts = q_job.result()
    matched = qdq.create_activation_matching(q_acts, float_acts)
    names = [n for n, m in matched.items() if "float" in m and "post_qdq" in m]
    with worker_pool(onnx_io.parallel_workers()) as pool:  # numpy frees the GIL
        errors = dict(zip(names, pool.map(lambda n: _tensor_errors(matched[n]), names),
                          strict=True))
    return errors, float_acts


def _tensor_errors(match: dict) -> dict:
    ref = np.concatenate([x.ravel() for x in match["float"]])
    got = np.concatenate([x.ravel() for x in match["post_qdq"]])
    ref64, got64 = ref.astype(np.float64), got.astype(np.float64)  # one conversion, two uses
    return {"cosine": cosine(ref64, got64),
            "max_abs_error": float(np.max(np.abs(ref - got))) if ref.size else 0.0,
            "sqnr_db": sqnr_db(ref64, got64)}


LAYER_COLUMNS = ("layer", "op", "tensor", "cosine", "max_abs_error", "sqnr_db",
                 "isolated_cosine", "isolated_output_cosine", "isolated_drop_points",
                 "isolated_confidence_drop_points")


def by_layer(layers: list[Layer], errors: dict[str, dict], isolated: dict[str, dict]
             ) -> list[dict]:
    """One row per layer (``quantization/layers.py``) in graph order: its accumulated error
    in the final model (empty where a layer stayed float) and, when the isolated runs were
    made, its error quantized alone and the model's output cosine / objective drop then."""
    rows = []
    for layer in layers:
        alone = isolated.get(layer.name)
        row = {"layer": layer.name, "op": layer.op, "tensor": layer.tensor,
               **errors.get(layer.tensor, {"cosine": None, "max_abs_error": None,
                                           "sqnr_db": None}),
               "isolated_cosine": alone["cosine"] if alone else None,
               "isolated_output_cosine": alone["scores"]["output_cosine"] if alone else None,
               "isolated_drop_points": alone["drop_points"] if alone else None,
               "isolated_confidence_drop_points":
                   alone["confidence_drop_points"] if alone else None}
        rows.append(row)
    return rows


def first_jump(rows: list[dict], key: str, threshold: float) -> str | None:
    return next((r["layer"] for r in rows if r.get(key) is not None and r[key] < threshold),
                None)
