"""MLPerf Tiny's two other reference architectures as TFLite files, for vela_compare.py.

    python benchmarks/make_mlperf_tiny_tflite.py     # needs tensorflow-cpu (see below)

The trained files of MLPerf Tiny's keyword spotting (DS-CNN) and visual wake words
(MobileNetV1 x0.25) references are not shipped with this project; their architectures are
public (mlcommons/tiny, Apache-2.0: ``benchmark/training/keyword_spotting`` builds DS-CNN
after Zhang et al., "Hello Edge", 2017; ``v0.1/benchmarks/visual_wake_words/vww_model.py``
builds MobileNetV1 at 96x96 with 8 first filters). This script builds both in Keras with
seeded weights (He-normal, fixed BatchNorm statistics) and writes, per network, the float
TFLite file (converted to ONNX by ``tflite2onnx`` for npuflow) and the int8 file (full
integer quantization on 32 seeded inputs, int8 in and out, the MLPerf Tiny submission's
form) for Vela. Untrained weights change Vela's weight compression, not its schedule; both
tools see the same architecture. Run once in a venv with ``tensorflow-cpu==2.21.0``; the
files are committed, so the benchmark itself does not need TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorflow as tf

OUT = Path(__file__).resolve().parent / "models" / "mlperf_tiny"
layers = tf.keras.layers


def conv_bn_relu(x, filters: int, kernel, strides=1, depthwise: bool = False):
    if depthwise:
        x = layers.DepthwiseConv2D(kernel, strides=strides, padding="same")(x)
    else:
        x = layers.Conv2D(filters, kernel, strides=strides, padding="same")(x)
    return layers.ReLU()(layers.BatchNormalization()(x))


def flat(x):
    """Flatten with a static shape (Keras 3's Flatten exports a SHAPE op tflite2onnx lacks)."""
    return layers.Reshape((int(np.prod(x.shape[1:])),))(x)


def ds_cnn() -> tf.keras.Model:
    """KWS reference: 49x10 MFCC, a 10x4 stride-2 conv of 64, four depthwise-separable
    blocks of 64, 25x5 average pool, 12 classes."""
    inputs = layers.Input((49, 10, 1), batch_size=1)
    x = conv_bn_relu(inputs, 64, (10, 4), strides=2)
    for _ in range(4):
        x = conv_bn_relu(x, 64, 3, depthwise=True)
        x = conv_bn_relu(x, 64, 1)
    x = layers.AveragePooling2D(pool_size=(25, 5))(x)
    outputs = layers.Dense(12, activation="softmax")(flat(x))
    return tf.keras.Model(inputs, outputs)


def mobilenet_v1_025() -> tf.keras.Model:
    """VWW reference: 96x96x3, MobileNetV1 with 8 first filters (alpha 0.25), 2 classes."""
    inputs = layers.Input((96, 96, 3), batch_size=1)
    x = conv_bn_relu(inputs, 8, 3, strides=2)
    filters = 8
    for strides, grow in [(1, 2), (2, 2), (1, 1), (2, 2), (1, 1), (2, 2), (1, 1), (1, 1),
                          (1, 1), (1, 1), (1, 1), (2, 2), (1, 1)]:
        x = conv_bn_relu(x, filters, 3, strides=strides, depthwise=True)
        filters *= grow
        x = conv_bn_relu(x, filters, 1)
    x = layers.AveragePooling2D(pool_size=x.shape[1:3])(x)
    outputs = layers.Dense(2, activation="softmax")(flat(x))
    return tf.keras.Model(inputs, outputs)


def seeded(model: tf.keras.Model, seed: int) -> tf.keras.Model:
    """He-normal weights and BatchNorm statistics from one seed: the same file every run."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        weights = layer.get_weights()
        if not weights:
            continue
        if isinstance(layer, layers.BatchNormalization):
            gamma, beta, mean, var = weights
            layer.set_weights([rng.uniform(0.5, 1.5, gamma.shape).astype(np.float32),
                               rng.normal(0, 0.1, beta.shape).astype(np.float32),
                               rng.normal(0, 0.1, mean.shape).astype(np.float32),
                               rng.uniform(0.5, 1.5, var.shape).astype(np.float32)])
            continue
        kernel, *rest = weights
        fan_in = int(np.prod(kernel.shape[:-1])) if kernel.ndim > 2 else kernel.shape[0]
        if isinstance(layer, layers.DepthwiseConv2D):
            fan_in = int(np.prod(kernel.shape[:2]))
        new = [rng.normal(0, np.sqrt(2 / fan_in), kernel.shape).astype(np.float32)]
        new += [rng.normal(0, 0.05, b.shape).astype(np.float32) for b in rest]
        layer.set_weights(new)
    return model


def int8_tflite(model: tf.keras.Model, sample: Callable[[tuple[int, ...]], np.ndarray]
                ) -> bytes:
    """Full integer quantization as MLPerf Tiny submissions do it: 32 calibration inputs
    drawn by ``sample(shape)``, int8 in and out."""
    shape = (1, *model.input_shape[1:])
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([sample(shape)] for _ in range(32))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    return converter.convert()


def write(name: str, model: tf.keras.Model, seed: int) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}_fp32.tflite").write_bytes(
        tf.lite.TFLiteConverter.from_keras_model(model).convert())
    rng = np.random.default_rng(seed)
    (OUT / f"{name}_int8.tflite").write_bytes(
        int8_tflite(model, lambda shape: rng.normal(0, 1, shape).astype(np.float32)))
    print(f"wrote {OUT / name}_{{fp32,int8}}.tflite")


def main() -> None:
    tf.keras.utils.set_random_seed(0)
    write("kws_ds_cnn", seeded(ds_cnn(), 1), 1)
    write("vww_mobilenet_v1_025", seeded(mobilenet_v1_025(), 2), 2)


if __name__ == "__main__":
    main()
