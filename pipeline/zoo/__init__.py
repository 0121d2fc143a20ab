"""The built-in model zoo: name -> builder(seed, opset, **params) -> ModelProto."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import onnx

from pipeline.zoo.classic import inception_v1, mobilenet_v1, vgg16
from pipeline.zoo.cnn import mobilenet_v2, resnet18, resnet50, resnet152
from pipeline.zoo.digits import digits_mlp
from pipeline.zoo.inception import inception_v4
from pipeline.zoo.resnet_v2 import resnet50_v2
from pipeline.zoo.tinyvit import tinyvit_sam
from pipeline.zoo.transformer import bert_encoder
from pipeline.zoo.yolo import yolov5, yolov5s
from pipeline.zoo.yolo11 import yolo11
from pipeline.zoo.yolov6 import yolov6
from pipeline.zoo.yolov7 import yolov7_tiny
from pipeline.zoo.yolov8 import yolov8
from pipeline.zoo.yolov10 import yolov10
from pipeline.zoo.yolox import yolox

ZOO: dict[str, Callable[..., onnx.ModelProto]] = {
    "mobilenet_v2": mobilenet_v2,
    "resnet18": resnet18,
    "resnet50": resnet50,
    "resnet152": resnet152,
    "resnet50_v2": resnet50_v2,
    "yolov5s": yolov5s,
    "yolov5n": partial(yolov5, depth_multiple=0.33, width_multiple=0.25, name="yolov5n"),
    "yolov5m": partial(yolov5, depth_multiple=0.67, width_multiple=0.75, name="yolov5m"),
    "yolov5s_relu": partial(yolov5, depth_multiple=0.33, width_multiple=0.50, act="relu",
                            name="yolov5s_relu"),
    "yolov8n": yolov8,
    "yolov8s": partial(yolov8, depth_multiple=0.33, width_multiple=0.50, name="yolov8s"),
    "yolov8m": partial(yolov8, depth_multiple=0.67, width_multiple=0.75, max_channels=768,
                       name="yolov8m"),
    "yolov10n": yolov10,
    "yolov10s": partial(yolov10, width_multiple=0.50, cib_backbone=True, name="yolov10s"),
    "yolo11n": yolo11,
    "yolo11s": partial(yolo11, width_multiple=0.50, name="yolo11s"),
    "yolo11m": partial(yolo11, width_multiple=1.00, max_channels=512, c3k=True,
                       name="yolo11m"),
    "yolov6n": yolov6,
    "yolov6s": partial(yolov6, width=0.50, name="yolov6s"),
    "yolov7_tiny": yolov7_tiny,
    "yolox_s": yolox,
    "yolox_m": partial(yolox, depth=0.67, width=0.75, name="yolox_m"),
    "mobilenet_v1": mobilenet_v1,
    "inception_v1": inception_v1,
    "inception_v4": inception_v4,
    "vgg16": vgg16,
    "bert_encoder": bert_encoder,
    "mobilesam_encoder": tinyvit_sam,
    "digits_mlp": digits_mlp,
}
NEEDS_CACHE = {"digits_mlp"}
