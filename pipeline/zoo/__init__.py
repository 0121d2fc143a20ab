"""The built-in model zoo: name -> builder(seed, opset, **params) -> ModelProto."""

from __future__ import annotations

from collections.abc import Callable

import onnx

from pipeline.zoo.cnn import mobilenet_v2, resnet18, resnet50
from pipeline.zoo.digits import digits_mlp
from pipeline.zoo.transformer import bert_encoder
from pipeline.zoo.yolo import yolov5s

ZOO: dict[str, Callable[..., onnx.ModelProto]] = {
    "mobilenet_v2": mobilenet_v2,
    "resnet18": resnet18,
    "resnet50": resnet50,
    "yolov5s": yolov5s,
    "bert_encoder": bert_encoder,
    "digits_mlp": digits_mlp,
}
NEEDS_CACHE = {"digits_mlp"}
