"""A digits classifier with real trained weights: scikit-learn MLP, exported by skl2onnx.

It gives npuflow real accuracy figures (int8 vs fp16 vs fp32 top-1 on a held-out split)
without downloading anything. Training is deterministic (fixed seed, single thread) and
takes a few seconds; the exported ONNX is cached by a key of everything that affects it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import onnx

from pipeline.datasets import digits
from pipeline.errors import UserError


def _train_and_export(seed: int, opset: int, hidden: tuple[int, ...]) -> onnx.ModelProto:
    try:
        from skl2onnx import to_onnx
        from sklearn.neural_network import MLPClassifier
        from threadpoolctl import threadpool_limits
    except ImportError as exc:
        raise UserError(
            "model=digits_mlp needs scikit-learn and skl2onnx: pip install 'npuflow[sklearn]'"
        ) from exc
    x_tr, y_tr, _, _ = digits.split(seed)
    clf = MLPClassifier(hidden_layer_sizes=hidden, random_state=seed, max_iter=400)
    # one BLAS thread: its sums' order, so the weights, change with the thread count (a
    # joblib or Ray worker gets fewer threads than the main process)
    with threadpool_limits(limits=1):
        clf.fit(x_tr, y_tr)
    model = to_onnx(
        clf,
        x_tr[:1],
        options={id(clf): {"zipmap": False}},
        target_opset={"": opset, "ai.onnx.ml": 3},
    )
    # Keep only the class probabilities: the label branch (ArgMax + ai.onnx.ml lookup) is
    # post-processing, not part of the network an NPU would run.
    extractor = onnx.utils.Extractor(model)
    model = extractor.extract_model([model.graph.input[0].name], ["probabilities"])
    del model.opset_import[:]
    model.opset_import.append(onnx.helper.make_opsetid("", opset))
    model.graph.name = "digits_mlp"
    # skl2onnx names nodes after tensors of other ops (a Softmax called "Relu2"); reports
    # and quant.keep_float address nodes by name, so name each after its op: gemm1, relu1...
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
        node.name = f"{node.op_type.lower()}{counts[node.op_type]}"
    return model


def digits_mlp(seed: int, opset: int, cache_dir: str, hidden: list[int] | None = None
               ) -> onnx.ModelProto:
    import sklearn

    layers = tuple(hidden or (128, 64))
    key = json.dumps([seed, opset, layers, sklearn.__version__, digits.HELD_OUT_FRACTION,
                      "op-names", "one-thread"])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    path = Path(cache_dir) / "zoo" / f"digits_mlp-{digest}.onnx"
    if path.exists():
        return onnx.load(path)
    model = _train_and_export(seed, opset, layers)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    onnx.save(model, tmp)
    tmp.replace(path)
    return model
