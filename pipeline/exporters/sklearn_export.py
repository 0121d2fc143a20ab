"""``model=sklearn``: a fitted scikit-learn estimator or pipeline (joblib / pickle file),
converted with skl2onnx and checked against the estimator's own predictions.

A classifier keeps one output, its class probabilities: skl2onnx also emits the label
(an ArgMax over them, int64) and, by default, a list of dicts (ZipMap), neither of which an
NPU computes; the host takes the argmax. The check compares the probabilities with
``predict_proba`` and their argmax with ``predict`` on the seeded input. ``ai.onnx.ml`` ops
with an exact standard form are rewritten to it (``_standard_ops``).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from omegaconf import DictConfig

from pipeline.errors import UserError
from pipeline.exporters.verify import max_error, seeded_input
from pipeline.running import user_code


def _load(path: str | None):
    if not path:
        raise UserError("model.path: model=sklearn needs model.path=FILE (a joblib or pickle "
                        "file of a fitted estimator)")
    file = Path(path)
    if not file.is_file():
        raise UserError(f"model.path: no such file '{file}'")
    try:
        import joblib

        return joblib.load(file)
    except (pickle.UnpicklingError, EOFError, ValueError, KeyError, IndexError,
            AttributeError, ModuleNotFoundError) as exc:
        raise UserError(f"model.path: '{file}' is not a pickled estimator "
                        f"({type(exc).__name__}: {str(exc)[:120]})") from exc


def _check_estimator(estimator: Any, path: str) -> None:
    """A fitted classifier or regressor (or a pipeline ending in one): what npuflow compiles
    and checks against ``predict``. A clusterer, an outlier detector or a transformer has
    no output npuflow can check or score, and an unfitted estimator has no weights."""
    from sklearn.base import is_classifier, is_regressor
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    name = type(estimator).__name__
    if not hasattr(estimator, "predict"):
        raise UserError(f"model.path: '{path}' holds a {name}, not a fitted estimator")
    final = _final(estimator)
    if not (is_classifier(final) or is_regressor(final)):
        try:
            from sklearn.utils import get_tags

            kind = (get_tags(final).estimator_type or "transformer").replace("_", " ")
        except (ImportError, TypeError, AttributeError):
            kind = "estimator"
        raise UserError(f"model.path: '{path}' holds a {type(final).__name__}, a {kind}; "
                        "model=sklearn takes a classifier or a regressor")
    try:
        check_is_fitted(estimator)
    except NotFittedError as exc:
        raise UserError(f"model.path: '{path}' holds a {name} that is not fitted (call fit "
                        "before saving it)") from exc
    except TypeError:
        pass  # not a scikit-learn estimator check_is_fitted knows; the export says


def _final(estimator):
    return estimator.steps[-1][1] if hasattr(estimator, "steps") else estimator


def _only(model: onnx.ModelProto, output: str) -> onnx.ModelProto:
    """Keep one graph output and the nodes it needs."""
    g = model.graph
    needed, keep = {output}, []
    for node in reversed(list(g.node)):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(i for i in node.input if i)
    kept_outputs = [o for o in g.output if o.name == output]
    del g.node[:], g.output[:]
    g.node.extend(reversed(keep))
    g.output.extend(kept_outputs)
    used = {i for n in g.node for i in n.input}
    inits = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(inits)
    used_domains = {n.domain for n in g.node} | {""}
    imports = [o for o in model.opset_import if o.domain in used_domains]
    del model.opset_import[:]
    model.opset_import.extend(imports)
    return model


def _scaler(node: onnx.NodeProto, attrs: dict) -> tuple[list, list]:
    """Scaler is exactly (x - offset) * scale."""
    from onnx import helper, numpy_helper

    base = node.output[0]
    offset = np.asarray(attrs.get("offset", [0.0]), np.float32)
    scale = np.asarray(attrs.get("scale", [1.0]), np.float32)
    return ([helper.make_node("Sub", [node.input[0], f"{base}_offset"], [f"{base}_centred"],
                              name=f"{node.name}_sub"),
             helper.make_node("Mul", [f"{base}_centred", f"{base}_scale"], [base],
                              name=f"{node.name}_mul")],
            [numpy_helper.from_array(offset, f"{base}_offset"),
             numpy_helper.from_array(scale, f"{base}_scale")])


POST_TRANSFORMS = {b"NONE": None, b"SOFTMAX": "Softmax", b"LOGISTIC": "Sigmoid"}


def _linear_classifier(node: onnx.NodeProto, attrs: dict) -> tuple[list, list] | None:
    """LinearClassifier's scores are x @ W.T + b, then its post-transform (Softmax or
    Sigmoid); its label output is their argmax, which the exporter dropped."""
    from onnx import helper, numpy_helper

    post = attrs.get("post_transform", b"NONE")
    if post not in POST_TRANSFORMS or len(node.output) < 2:
        return None
    intercepts = np.asarray(attrs["intercepts"], np.float32)
    weights = np.asarray(attrs["coefficients"], np.float32).reshape(len(intercepts), -1)
    scores, base = node.output[1], node.name or node.output[1]
    raw = scores if POST_TRANSFORMS[post] is None else f"{scores}_raw"
    nodes = [helper.make_node("MatMul", [node.input[0], f"{base}_weights"], [f"{base}_mm"],
                              name=f"{base}_matmul"),
             helper.make_node("Add", [f"{base}_mm", f"{base}_bias"], [raw], name=f"{base}_add")]
    if POST_TRANSFORMS[post]:
        nodes.append(helper.make_node(POST_TRANSFORMS[post], [raw], [scores],
                                      name=f"{base}_{POST_TRANSFORMS[post].lower()}",
                                      **({"axis": -1} if post == b"SOFTMAX" else {})))
    return nodes, [numpy_helper.from_array(np.ascontiguousarray(weights.T), f"{base}_weights"),
                   numpy_helper.from_array(intercepts, f"{base}_bias")]


def _l1_normalizer(node: onnx.NodeProto, attrs: dict) -> tuple[list, list] | None:
    """Normalizer L1 divides each row by the sum of its absolute values."""
    from onnx import helper, numpy_helper

    if attrs.get("norm") != b"L1":
        return None
    base = node.output[0]
    return ([helper.make_node("Abs", [node.input[0]], [f"{base}_abs"], name=f"{base}_abs"),
             helper.make_node("ReduceSum", [f"{base}_abs", f"{base}_axes"], [f"{base}_sum"],
                              name=f"{base}_sum", keepdims=1),
             helper.make_node("Div", [node.input[0], f"{base}_sum"], [base],
                              name=f"{base}_div")],
            [numpy_helper.from_array(np.array([-1], np.int64), f"{base}_axes")])


REWRITES = {"Scaler": _scaler, "LinearClassifier": _linear_classifier,
            "Normalizer": _l1_normalizer}


def _standard_ops(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """The ``ai.onnx.ml`` ops with an exact standard-ONNX form (Scaler, LinearClassifier,
    L1 Normalizer) rewritten to it: the ops NPU support lists name, and ONNX shape inference
    follows them (it stopped at Scaler, leaving every later tensor without a static shape).
    Others (trees, SVMs) stay and run on the CPU. One import per domain, the standard one
    always (onnxruntime's quantizer requires it)."""
    from onnx import helper

    g = model.graph
    nodes = []
    for node in g.node:
        rewrite = REWRITES.get(node.op_type) if node.domain == "ai.onnx.ml" else None
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        done = rewrite(node, attrs) if rewrite else None
        if done is None:
            nodes.append(node)
            continue
        nodes += done[0]
        g.initializer.extend(done[1])
    del g.node[:]
    g.node.extend(nodes)
    versions = {"": max(opset, 13)}  # ReduceSum takes its axes as an input from opset 13
    for o in model.opset_import:
        domain = "" if o.domain == "ai.onnx" else o.domain
        versions[domain] = max(versions.get(domain, 0), o.version)
    if not any(n.domain == "ai.onnx.ml" for n in g.node):
        versions.pop("ai.onnx.ml", None)
    del model.opset_import[:]
    model.opset_import.extend(helper.make_opsetid(d, v) for d, v in versions.items())
    return model


def export(cfg: DictConfig) -> tuple[onnx.ModelProto, dict[str, Any]]:
    try:
        import sklearn
        from skl2onnx import to_onnx
        from skl2onnx.common.data_types import FloatTensorType
    except ImportError as exc:
        raise UserError("model=sklearn needs pip install 'npuflow[sklearn]'") from exc
    estimator = _load(cfg.path)
    _check_estimator(estimator, cfg.path)
    features = getattr(estimator, "n_features_in_", None)
    shape = list(cfg.input_shape) if cfg.input_shape is not None else (
        [1, int(features)] if features else None)
    if shape is None:
        raise UserError("model.input_shape: the estimator does not say how many features it "
                        "takes; set model.input_shape=[1,N]")
    final = _final(estimator)
    classifier = hasattr(final, "predict_proba")
    options = {id(final): {"zipmap": False}} if classifier else None
    try:
        model = to_onnx(estimator, initial_types=[("input", FloatTensorType(shape))],
                        target_opset={"": cfg.opset, "ai.onnx.ml": 3}, options=options)
    except Exception as exc:  # skl2onnx raises bare RuntimeErrors for unsupported estimators
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"model.path: skl2onnx cannot convert {type(final).__name__}: "
                        f"{first[:200]}") from exc
    x = seeded_input(shape, cfg.seed)
    if classifier:
        model = _only(model, model.graph.output[-1].name)
    model = _standard_ops(model, cfg.opset)
    name = type(estimator).__name__
    if classifier:
        proba = user_code.call("model.path", f"{name}.predict_proba", estimator.predict_proba, x)
        error = max_error(model, x, [proba], f"model.path '{cfg.path}'")
        labels = np.asarray(getattr(final, "classes_", np.arange(proba.shape[1])))
        predicted = user_code.call("model.path", f"{name}.predict", estimator.predict, x)
        if not np.array_equal(labels[np.argmax(proba, axis=1)], predicted):
            raise UserError(f"model.path '{cfg.path}': the probabilities' argmax is not what "
                            "predict returns")
    else:
        pred = np.asarray(user_code.call("model.path", f"{name}.predict", estimator.predict,
                                         x), dtype=np.float64).reshape(
            [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] or [-1])
        error = max_error(model, x, [pred], f"model.path '{cfg.path}'")
    return model, {"exporter": "skl2onnx", "framework": f"scikit-learn {sklearn.__version__}",
                   "estimator": type(estimator).__name__, "max_abs_error_vs_framework": error}
