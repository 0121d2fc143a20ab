"""Quantization judged on trained networks and labelled data: PaddleOCR's classifier and
recogniser (rapidocr-onnxruntime's wheel) on rendered text lines, labelled data sources,
the eval metric component, automatic mixed precision and the per-layer analysis."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from omegaconf import OmegaConf

from pipeline.datasets import text_lines
from pipeline.datasets.images import preprocess_image
from tests.conftest import error_lines, run_cli

LINES = ("data.resize_mode=pad", "data.mean=[0.5,0.5,0.5]", "data.std=[0.5,0.5,0.5]")
TO_QUANTIZE = "stages.order=[export,optimize,quantize]"


@pytest.fixture(scope="module")
def cls_lines(tmp_path_factory) -> Path:
    return text_lines.write("cls", tmp_path_factory.mktemp("cls"), 120, seed=1)


@pytest.fixture(scope="module")
def rec_lines(tmp_path_factory) -> Path:
    return text_lines.write("rec", tmp_path_factory.mktemp("rec"), 64, seed=2)


def _run(run_dir: Path, *overrides: str) -> dict:
    proc = run_cli(*overrides, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((run_dir / "quantize" / "accuracy.json").read_text())


def test_rendered_lines_are_seeded_and_labelled(tmp_path):
    a = text_lines.write("cls", tmp_path / "a", 12, seed=5)
    b = text_lines.write("cls", tmp_path / "b", 12, seed=5)
    files = sorted(p.relative_to(a) for p in a.rglob("*.png"))
    assert files == sorted(p.relative_to(b) for p in b.rglob("*.png"))
    assert {f.parts[0] for f in files} == {"0", "180"}
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    rows = list(csv.reader(text_lines.write("rec", tmp_path / "r", 5, seed=5).read_text()
                           .splitlines()))
    assert rows[0] == ["path", "label"] and all(r[1].strip() for r in rows[1:])


def test_classifier_fp32_and_int8_on_an_image_folder(tmp_path, cls_lines):
    acc = _run(tmp_path, "model=ppocr_cls", "data=image_folder", f"data.path={cls_lines}",
               *LINES, "quant=int8", TO_QUANTIZE)
    assert acc["eval_metric"] == "top_k" and acc["eval_samples"] == 120 - 64
    assert acc["accuracy_top1_float"] >= 0.85  # PaddleOCR's classifier reads the lines
    assert abs(acc["accuracy_top1"] - acc["accuracy_top1_float"]) <= 0.1
    assert "accuracy_top5" not in acc  # two classes: top-5 would always be 1


def test_recogniser_ctc_accuracy_reads_the_character_list_from_the_model(tmp_path,
                                                                         rec_lines):
    acc = _run(tmp_path, "model=ppocr_rec", "data=image_list", f"data.path={rec_lines}",
               "data.calibration_size=16", *LINES, "eval=ctc", "quant=fp16", TO_QUANTIZE)
    assert acc["eval_objective"] == "line_accuracy"
    assert acc["line_accuracy_float"] >= 0.85 and acc["char_accuracy_float"] >= 0.97
    assert acc["line_accuracy"] >= acc["line_accuracy_float"] - 0.05  # fp16 keeps it


def test_ctc_decoding_merges_repeats_and_drops_blanks():
    from pipeline.metrics.ctc import CTCGreedy, edit_distance

    metric = CTCGreedy(metadata={"character": "a\nb"}, space=True)  # blank a b ' '
    steps = [1, 1, 0, 1, 2, 3, 2]  # a a _ a b ' ' b -> "aab b"
    probs = np.eye(4, dtype=np.float32)[steps][None]
    assert metric.decode(probs) == "aab b"
    scores = metric([probs, probs], np.array(["aab b", "aab"], dtype=object))
    assert scores["line_accuracy"] == 0.5
    assert scores["char_accuracy"] == pytest.approx(1 - 2 / 8)
    assert edit_distance("kitten", "sitting") == 3


def test_pad_keeps_the_aspect_ratio_and_fills_with_pad_value(tmp_path):
    from PIL import Image

    Image.new("RGB", (40, 20), (255, 255, 255)).save(tmp_path / "wide.png")
    cfg = OmegaConf.create({"resize_mode": "pad", "resize": None, "scale": 1 / 255,
                            "mean": [0.5] * 3, "std": [0.5] * 3, "pad_value": -7.0,
                            "channel_order": "RGB", "layout": "NCHW"})
    x = preprocess_image(tmp_path / "wide.png", cfg, (1, 3, 48, 192))[0]
    assert np.allclose(x[:, :, :96], 1.0) and np.allclose(x[:, :, 96:], -7.0)
    cfg.resize_mode = "stretch"
    assert np.allclose(preprocess_image(tmp_path / "wide.png", cfg, (1, 3, 48, 192)), 1.0)
    Image.new("RGB", (400, 20), (0, 0, 0)).save(tmp_path / "long.png")  # wider than 192
    cfg.resize_mode = "pad"
    assert np.allclose(preprocess_image(tmp_path / "long.png", cfg, (1, 3, 48, 192)), -1.0)


def test_automatic_mixed_precision_never_ends_below_plain_int8(tmp_path, cls_lines):
    run = tmp_path / "run"
    proc = run_cli("model=ppocr_cls", "data=image_folder", f"data.path={cls_lines}", *LINES,
                   "quant=int8", "quant.auto.enabled=true", "quant.auto.target.max_drop=0",
                   "quant.auto.target.min_output_cosine=0.99999", "quant.auto.max_trials=5",
                   "quant.auto.samples=16", "quant.calibration.method=percentile",
                   "quant.calibration.percentile=99", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    acc = json.loads((run / "quantize" / "accuracy.json").read_text())
    curve = json.loads((run / "quantize" / "auto_curve.json").read_text())
    kept = [p for p in curve if p["kept"]]
    assert curve[0]["trial"] == 0 and len(curve) - 1 == acc["auto"]["trials"] <= 5
    cosines = [p["output_cosine"] for p in kept if p["action"] == "float"]
    assert cosines == sorted(cosines) and len(set(cosines)) == len(cosines)  # each step helps
    assert acc["output_cosine"] >= curve[0]["output_cosine"]  # never below plain int8
    assert acc["auto"]["float_layers"] == kept[-1]["layers"]
    assert acc["auto"]["stop"].startswith(("target met", "budget", "no candidate"))
    costed = json.loads((run / "compile" / "auto_curve.json").read_text())
    assert [p["trial"] for p in costed] == [p["trial"] for p in kept]
    metrics = json.loads((run / "metrics.json").read_text())
    assert costed[-1]["latency_ms"] == pytest.approx(metrics["latency_ms"], rel=1e-9)
    assert metrics["auto_int8_latency_ms"] == costed[0]["latency_ms"]
    assert (run / "compile" / "auto_curve.png").read_bytes()[:4] == b"\x89PNG"


def test_per_layer_rows_are_layers_with_isolated_figures(tmp_path):
    proc = run_cli("model=digits_mlp", "data=digits", "quant=int8", "quant.analysis.isolated=true",
                   "quant.analysis.jump_cosine=0.99999", TO_QUANTIZE, f"hydra.run.dir={tmp_path}",
                   f"run.cache_dir={tmp_path / 'cache'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "quantize" / "layers.csv").read_text().splitlines()))
    assert [r["op"] for r in rows] == ["Gemm (+Relu)", "Gemm (+Relu)", "Gemm (+Softmax)"]
    ops = {n.name: n.op_type for n in onnx.load(tmp_path / "optimize" / "model.onnx").graph.node}
    assert all(ops[r["layer"]] == r["op"].split()[0] for r in rows)  # a row is named by its op
    for r in rows:
        assert r["isolated_cosine"] and r["isolated_output_cosine"] and r["isolated_drop_points"]
        assert 0.99 < float(r["isolated_cosine"]) <= 1.0
    # 8 samples: the objective moves in 12.5-point steps; the confidence drop tells the
    # three layers apart even where no answer flips
    assert all(float(r["isolated_drop_points"]) % 12.5 == 0 for r in rows)
    assert len({r["isolated_confidence_drop_points"] for r in rows}) == len(rows)
    assert any(float(r["isolated_confidence_drop_points"]) > 0 for r in rows)
    assert "drops below 0.99999:" in proc.stdout + proc.stderr  # as configured, not rounded


def test_image_list_maps_class_names_and_refuses_text_labels_for_top_k(tmp_path, cls_lines):
    listing = tmp_path / "list.csv"
    rows = [(str(p), "upright" if p.parent.name == "0" else "flipped")
            for p in sorted(cls_lines.rglob("*.png"))[:80]]
    with open(listing, "w", newline="") as f:
        csv.writer(f).writerows([("path", "label"), *rows])
    common = ("model=ppocr_cls", "data=image_list", f"data.path={listing}", *LINES,
              "data.calibration_size=16", "quant=none", TO_QUANTIZE)
    acc = _run(tmp_path / "named", *common, "data.classes=[upright,flipped]")
    assert acc["accuracy_top1_float"] >= 0.85
    proc = run_cli(*common, f"hydra.run.dir={tmp_path / 'text'}")
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "labels are text" in line and "data.classes" in line


def _bad(tmp_path: Path, *overrides: str) -> str:
    cache = tmp_path / "cache"
    proc = run_cli("model=ppocr_cls", *LINES, "quant=int8", TO_QUANTIZE,
                   f"hydra.run.dir={tmp_path / 'run'}", f"run.cache_dir={cache}", *overrides)
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert not (tmp_path / "run" / "quantize").exists()
    assert not list((cache / "stages" / "quantize").glob("*/COMPLETE"))
    return line


def test_an_empty_class_folder_stops_at_the_door(tmp_path, cls_lines):
    data = tmp_path / "data"
    shutil.copytree(cls_lines, data)
    (data / "90").mkdir()
    line = _bad(tmp_path, "data=image_folder", f"data.path={data}")
    assert "class folder '90' has no images" in line
    assert line.startswith("npuflow: error: override 'data.path=")  # where the value came from
    assert not (tmp_path / "run" / "export").exists()  # before any stage ran


def test_a_label_csv_naming_a_missing_file_stops_at_the_door(tmp_path, cls_lines):
    listing = tmp_path / "list.csv"
    listing.write_text(f"path,label\n{next(cls_lines.rglob('*.png'))},0\nnowhere.png,1\n")
    line = _bad(tmp_path, "data=image_list", f"data.path={listing}")
    assert "line 3: no such file 'nowhere.png'" in line


def test_labels_beyond_the_model_output_stop_with_one_line(tmp_path, cls_lines):
    data = tmp_path / "data"
    shutil.copytree(cls_lines, data)
    shutil.copytree(data / "180", data / "270")  # a third class for a 2-class model
    line = _bad(tmp_path, "data=image_folder", f"data.path={data}")
    assert "label 2 does not match the model's output of 2 classes" in line


def test_a_metric_that_does_not_import_stops_at_the_door(tmp_path, cls_lines):
    line = _bad(tmp_path, "data=image_folder", f"data.path={cls_lines}",
                "eval.metric._target_=my_pkg.metrics.f1")
    assert "eval.metric._target_: cannot import 'my_pkg.metrics.f1'" in line
    assert not (tmp_path / "run" / "export").exists()


def test_a_user_metric_plugs_in_without_touching_the_stage(tmp_path, cls_lines):
    acc = _run(tmp_path, "model=ppocr_cls", "data=image_folder", f"data.path={cls_lines}",
               *LINES, "quant=none", TO_QUANTIZE, "eval.name=balanced",
               "eval.metric._target_=tests.custom_metrics.balanced_accuracy",
               "eval.objective=balanced_accuracy", "~eval.metric.k")
    assert acc["eval_metric"] == "balanced" and 0.85 <= acc["balanced_accuracy_float"] <= 1


def test_edited_data_is_not_served_from_the_cache(tmp_path, cls_lines):
    data = tmp_path / "data"
    shutil.copytree(cls_lines, data)
    common = ("model=ppocr_cls", "data=image_folder", f"data.path={data}", *LINES,
              "quant=none", TO_QUANTIZE, f"run.cache_dir={tmp_path / 'cache'}")
    _run(tmp_path / "a", *common)
    victim = sorted((data / "0").iterdir())[0]
    shutil.copy(sorted((data / "180").iterdir())[0], victim)  # one image changed
    _run(tmp_path / "b", *common)
    assert json.loads((tmp_path / "b" / "cache.json").read_text())["quantize"] == "miss"
    _run(tmp_path / "c", *common)
    assert json.loads((tmp_path / "c" / "cache.json").read_text())["quantize"] == "hit"
