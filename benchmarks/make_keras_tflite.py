"""Four more networks for vela_compare.py: common embedded architectures, seeded, as int8
TFLite for Vela and float ONNX for npuflow.

    python benchmarks/make_keras_tflite.py   # needs tensorflow-cpu==2.21.0 and tf2onnx

Keras builds each architecture with weights from one seed (untrained: Vela's schedule
depends on the architecture, its weight compression a little on the values): MobileNetV2
x0.35 and MobileNetV3-Small x0.75 at 96x96 (``tf.keras.applications``, weights=None: inverted
residuals, ReLU6, HardSwish, squeeze-excite multiplies), a CIFAR-style CNN (3x3 convs, max
pooling, a 4096 -> 128 fully connected layer) and a small U-Net (nearest-neighbour resize
and channel concatenation). Per network it writes the full-int8 TFLite file (32 seeded
inputs calibrate it; int8 in and out, as MLPerf Tiny submissions are) and converts the
float TFLite file to ONNX with tf2onnx (tflite2onnx 0.4.1 cannot parse TensorFlow 2.21's
files of more than ~1 MB, nor HARD_SWISH). Two runs write the same bytes. The files are
committed, so vela_compare.py needs neither TensorFlow nor tf2onnx. These networks were
added after the three Ethos-U profiles were fixed, as a check on networks they were not
written from.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import tensorflow as tf
import tf2onnx
from make_mlperf_tiny_tflite import int8_tflite

OUT = Path(__file__).resolve().parent / "models" / "keras_seeded"
layers = tf.keras.layers


def cifar_cnn() -> tf.keras.Model:
    x = inputs = layers.Input((32, 32, 3), batch_size=1)
    for filters in (32, 32, "pool", 64, 64, "pool"):
        x = layers.MaxPool2D()(x) if filters == "pool" else \
            layers.ReLU()(layers.Conv2D(filters, 3, padding="same")(x))
    x = layers.ReLU()(layers.Dense(128)(layers.Reshape((8 * 8 * 64,))(x)))
    return tf.keras.Model(inputs, layers.Softmax()(layers.Dense(10)(x)))


def unet() -> tf.keras.Model:
    x = inputs = layers.Input((64, 64, 3), batch_size=1)
    skips = []
    for filters in (8, 16, 32):
        x = layers.ReLU()(layers.Conv2D(filters, 3, padding="same")(x))
        skips.append(x)
        x = layers.MaxPool2D()(x)
    x = layers.ReLU()(layers.Conv2D(64, 3, padding="same")(x))
    for filters, skip in zip((32, 16, 8), reversed(skips), strict=True):
        x = layers.Resizing(x.shape[1] * 2, x.shape[2] * 2, interpolation="nearest")(x)
        x = layers.ReLU()(layers.Conv2D(filters, 3, padding="same")(
            layers.Concatenate()([x, skip])))
    return tf.keras.Model(inputs, layers.Conv2D(2, 1)(x))


def application(build: Callable[..., tf.keras.Model], **kwargs) -> Callable[[], tf.keras.Model]:
    def model() -> tf.keras.Model:
        inner = build(input_shape=(96, 96, 3), weights=None, **kwargs)
        inputs = layers.Input((96, 96, 3), batch_size=1)
        return tf.keras.Model(inputs, inner(inputs))
    return model


NETWORKS = {
    "cifar_cnn": cifar_cnn,
    "mobilenet_v2_035_96": application(tf.keras.applications.MobileNetV2, alpha=0.35,
                                       classes=2),
    "mobilenet_v3s_075_96": application(tf.keras.applications.MobileNetV3Small, alpha=0.75,
                                        classes=10, include_preprocessing=False),
    "unet_64": unet,
}


def canonical_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """tf2onnx numbers the names it makes up (``conv__1034:0``) from a counter, and lists
    initializers in an order, that differ run to run; renumber the names in node order
    and sort the initializers, so two runs write the same bytes."""
    names: dict[str, str] = {}
    seen: dict[str, int] = {}

    def rename(name: str) -> str:
        stem, port = re.fullmatch(r"(.*?)(:\d+)?", name).groups()
        if not re.search(r"__\d+", stem):
            return name
        if stem not in names:
            base = re.sub(r"__\d+", "", stem)
            seen[base] = seen.get(base, -1) + 1
            names[stem] = f"{base}__{seen[base]}"
        return names[stem] + (port or "")

    graph = model.graph
    for node in graph.node:
        node.input[:] = [rename(n) for n in node.input]
        node.output[:] = [rename(n) for n in node.output]
        node.name = rename(node.name)
    for item in [*graph.input, *graph.output, *graph.initializer, *graph.value_info]:
        item.name = rename(item.name)
    for field in (graph.initializer, graph.value_info):
        ordered = sorted(field, key=lambda item: item.name)
        del field[:]
        field.extend(ordered)
    return model


def write(name: str, model: tf.keras.Model, seed: int) -> None:
    rng = np.random.default_rng(seed)
    (OUT / f"{name}_int8.tflite").write_bytes(
        int8_tflite(model, lambda shape: rng.random(shape, np.float32)))
    with tempfile.TemporaryDirectory() as tmp:
        float_file = Path(tmp) / f"{name}_fp32.tflite"
        float_file.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
        model_proto, _ = tf2onnx.convert.from_tflite(str(float_file), opset=17)
    onnx.save(canonical_names(model_proto), OUT / f"{name}_fp32.onnx")
    print(f"wrote {OUT / name}_{{int8.tflite,fp32.onnx}}")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for seed, (name, build) in enumerate(NETWORKS.items()):
        tf.keras.utils.set_random_seed(seed)
        write(name, build(), seed)


if __name__ == "__main__":
    main()
