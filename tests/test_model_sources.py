"""Models from where they live: PyTorch (torch.onnx) and scikit-learn (skl2onnx), checked
against their framework; zoo models at batch > 1, with per-image throughput."""

from __future__ import annotations

import json

import joblib
import numpy as np
import onnx
import pytest
import torch

from pipeline import onnx_io
from pipeline.model_source import with_batch
from pipeline.zoo import ZOO
from tests import torch_nets
from tests.conftest import error_lines, run_cli

SMALL = {"mobilenet_v2": {"image_size": 32}, "resnet18": {"image_size": 32},
         "resnet50": {"image_size": 32}, "yolov5s": {"image_size": 64},
         "yolov5n": {"image_size": 64}, "mobilenet_v1": {"image_size": 32},
         "inception_v1": {"image_size": 64}, "vgg16": {"image_size": 32},
         "bert_encoder": {"seq_len": 8}}


def _torch(tmp_path, *overrides: str, stages: str = "[export]"):
    return run_cli("model=torch", *overrides, f"stages.order={stages}", "run.cache=false",
                   f"hydra.run.dir={tmp_path}")


def test_a_torchvision_style_resnet_goes_through_all_stages_equal_to_pytorch(tmp_path):
    proc = _torch(tmp_path, "model.module=tests.torch_nets:small_resnet",
                  "model.input_shape=[1,3,64,64]", "data.calibration_size=8",
                  "data.eval_size=8", stages="[export,optimize,quantize,compile,simulate]")
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "export" / "model.json").read_text())["export"]
    assert record["exporter"] == "dynamo" and record["opset"] == 18
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["export_max_abs_error"] < 1e-4 and metrics["npu_ops"] > 20
    assert metrics["latency_ms"] > 0 and metrics["output_cosine"] > 0.99
    # an input the export never saw: ONNX Runtime and PyTorch agree
    x = np.random.default_rng(7).standard_normal((1, 3, 64, 64)).astype(np.float32)
    sess = onnx_io.session(onnx.load(tmp_path / "export" / "model.onnx"))
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
    with torch.no_grad():
        want = torch_nets.small_resnet().eval()(torch.from_numpy(x)).numpy()
    assert np.max(np.abs(got - want)) < 1e-4 * max(1.0, float(np.max(np.abs(want))))


def test_weights_load_and_torchscript_runs_on_request(tmp_path):
    weights = tmp_path / "w.pt"
    torch.save(torch_nets.small_resnet(seed=3).state_dict(), weights)
    run_dir = tmp_path / "run"
    proc = _torch(run_dir, "model.module=tests.torch_nets:small_resnet",
                  f"model.weights={weights}", "model.exporter=torchscript", "model.opset=17",
                  "model.input_shape=[2,3,32,32]")
    assert proc.returncode == 0, proc.stderr
    record = json.loads((run_dir / "export" / "model.json").read_text())["export"]
    assert record["exporter"] == "torchscript" and record["opset"] == 17
    x = np.random.default_rng(1).random((2, 3, 32, 32)).astype(np.float32)
    sess = onnx_io.session(onnx.load(run_dir / "export" / "model.onnx"))
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
    with torch.no_grad():
        seeded = torch_nets.small_resnet(seed=3).eval()(torch.from_numpy(x)).numpy()
        default = torch_nets.small_resnet(seed=0).eval()(torch.from_numpy(x)).numpy()
    assert np.allclose(got, seeded, atol=1e-4) and not np.allclose(got, default, atol=1e-2)


SHAPE = "model.input_shape=[1,3,16,16]"


@pytest.mark.parametrize(("overrides", "expected"), [
    (["model.module=tests.torch_nets:gated", SHAPE],
     "model.module: data-dependent control flow at torch_nets.py:"),
    (["model.module=tests.torch_nets:with_opaque_layer", SHAPE],
     "cannot export tests.torch_nets:with_opaque_layer at layer '2.1' (Opaque)"),
    (["model.module=tests.torch_nets:not_a_module", SHAPE], "returned int, not a torch.nn.Module"),
    (["model.module=tests.absent:net", SHAPE], "model.module: cannot import 'tests.absent'"),
    (["model.module=tests.torch_nets", SHAPE], "model.module: model=torch needs model.module="),
    (["model.module=tests.torch_nets:small_resnet", "+model.kwargs.depth=3", SHAPE],
     "model.kwargs: tests.torch_nets:small_resnet:"),
    (["model.module=tests.torch_nets:small_resnet", "model.weights=/nonexistent.pt", SHAPE],
     "model.weights: no such file '/nonexistent.pt'"),
    (["model.module=tests.torch_nets:small_resnet", "model.input_shape=[1,5,16,16]"],
     "model.input_shape: tests.torch_nets:small_resnet fails on an input of shape [1, 5, 16, 16]"),
    (["model.module=tests.torch_nets:small_resnet"], "model.input_shape: model=torch needs"),
])
def test_torch_export_errors_are_one_line_naming_the_cause(tmp_path, overrides, expected):
    proc = _torch(tmp_path, *overrides)
    assert proc.returncode == 2, proc.stderr
    (line,) = error_lines(proc)
    assert expected in line
    assert not (tmp_path / "export" / "model.onnx").exists()


def test_a_scikit_learn_pipeline_goes_through_all_stages_with_its_own_accuracy(tmp_path):
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from pipeline.datasets import digits

    x_train, y_train, x_test, y_test = digits.split()
    estimator = make_pipeline(StandardScaler(), MLPClassifier((32,), max_iter=300,
                                                              random_state=0))
    estimator.fit(x_train, y_train)
    joblib.dump(estimator, tmp_path / "digits.joblib")
    run_dir = tmp_path / "run"
    proc = run_cli("model=sklearn", f"model.path={tmp_path / 'digits.joblib'}", "data=digits",
                   "run.cache=false", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["export_max_abs_error"] < 1e-5
    # the float figure is scikit-learn's own score on the same held-out split
    assert metrics["accuracy_top1_float"] == pytest.approx(estimator.score(x_test, y_test))
    assert abs(metrics["accuracy_top1"] - metrics["accuracy_top1_float"]) < 0.02
    assert metrics["npu_ops"] >= 4 and metrics["cpu_ops"] == 0  # Scaler became Sub and Mul
    model = onnx.load(run_dir / "export" / "model.onnx")
    assert [o.name for o in model.graph.output] == ["probabilities"]


@pytest.mark.parametrize(("content", "expected"), [
    (None, "model.path: no such file"),
    (b"not a pickle", "is not a pickled estimator"),
    ([1, 2, 3], "holds a list, not a fitted estimator"),
])
def test_sklearn_bad_files_are_one_line(tmp_path, content, expected):
    path = tmp_path / "model.joblib"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        joblib.dump(content, path)
    proc = run_cli("model=sklearn", f"model.path={path}", "stages.order=[export]",
                   f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert expected in line


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_zoo_model_at_batch_2_computes_each_image_as_batch_1_does(name):
    single = ZOO[name](seed=0, opset=17, **SMALL[name])
    batched = with_batch(ZOO[name](seed=0, opset=17, **SMALL[name]), 2)
    onnx.checker.check_model(batched, full_check=True)
    one, two = onnx_io.session(single), onnx_io.session(batched)
    feeds = [onnx_io.seeded_feeds(one, s) for s in (1, 2)]
    stacked = {k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]}
    together = two.run(None, stacked)
    for i, feed in enumerate(feeds):
        for a, b in zip(one.run(None, feed), together, strict=True):
            assert np.allclose(a[0], b[i], rtol=1e-4, atol=1e-5)


def test_per_image_throughput_rises_with_batch_on_rk3588(tmp_path):
    rows = []
    for batch in (1, 2, 8):
        proc = run_cli("model=resnet18", f"model.batch={batch}", "quant=fp16",
                       "data.eval_size=2", "data.calibration_size=2", "simulate.plots=false",
                       f"hydra.run.dir={tmp_path / str(batch)}")
        assert proc.returncode == 0, proc.stderr
        rows.append(json.loads((tmp_path / str(batch) / "metrics.json").read_text()))
    assert [r["batch"] for r in rows] == [1, 2, 8]
    ips = [r["throughput_ips"] for r in rows]
    assert ips[0] < ips[1] < ips[2]
    assert all(r["throughput_ips"] == pytest.approx(r["throughput_fps"] * r["batch"])
               for r in rows)
    per_image = [r["energy_mj_per_image"] for r in rows]
    assert per_image[0] > per_image[2]


def test_batch_is_a_zoo_option(tmp_path, light_model):
    proc = run_cli("model=onnx", f"model.path={light_model('squeezenet')}", "model.batch=4",
                   "stages.order=[export]", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2
    assert "model.batch: batch is a zoo option" in error_lines(proc)[0]


def test_logistic_regression_becomes_standard_onnx_with_sklearns_accuracy(tmp_path):
    """skl2onnx writes StandardScaler + LogisticRegression as ai.onnx.ml Scaler,
    LinearClassifier and Normalizer: npuflow rewrites them as Sub/Mul, MatMul/Add/Softmax
    and Abs/ReduceSum/Div, which NPUs list. (onnxruntime's int8 quantizer cannot take the
    scaler's per-feature Mul, so this runs at fp16.)"""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from pipeline.datasets import digits

    x_train, y_train, x_test, y_test = digits.split()
    estimator = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))
    estimator.fit(x_train, y_train)
    joblib.dump(estimator, tmp_path / "lr.joblib")
    run_dir = tmp_path / "run"
    proc = run_cli("model=sklearn", f"model.path={tmp_path / 'lr.joblib'}", "data=digits",
                   "quant=fp16", "run.cache=false", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr
    model = onnx.load(run_dir / "export" / "model.onnx")
    assert {n.domain for n in model.graph.node} == {""}
    assert {"MatMul", "Softmax", "ReduceSum"} <= {n.op_type for n in model.graph.node}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["export_max_abs_error"] < 1e-5
    assert metrics["accuracy_top1_float"] == pytest.approx(estimator.score(x_test, y_test))
    assert metrics["npu_ops"] > metrics["cpu_ops"]
