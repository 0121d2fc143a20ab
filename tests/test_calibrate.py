"""npuflow-calibrate: recover a known profile from its own "measurements", stay in bounds,
and refuse bad input in one line with nothing written.

The synthetic truth is rk3588 (one core) with three assumptions changed; four small
networks, each leaning on one of them (convolutions, a chain of tiny kernels for the
dispatch cost, a SiLU map for the vector unit, a 16 MB FC for DRAM bandwidth), are
"measured" by the real npuflow CLI on the truth and calibrated from the unchanged prior.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import helper, numpy_helper

from pipeline.calibrate import fit as fit_module
from pipeline.calibrate.cli import main as calibrate_main
from pipeline.calibrate.layers import node_name
from pipeline.calibrate.measurements import read_measurements
from pipeline.errors import UserError
from tests.conftest import CONF, REPO, run_inprocess

TRUTH = {"dispatch_cycles": 2600, "dram.bandwidth_gbps": 9.5,
         "vector_unit.output_bytes_per_cycle": 1.2}
COMMON = ["data.calibration_size=4", "data.eval_size=4"]


def _networks(folder: Path) -> dict[str, Path]:
    rng = np.random.default_rng(0)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1,
                                       name)

    def save(name: str, nodes: list, inp: list[int], out: list[int], inits: list) -> Path:
        graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", 1, inp)],
                                  [helper.make_tensor_value_info("y", 1, out)], inits)
        path = folder / f"{name}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        return path

    chain = [helper.make_node("Conv", ["x" if i == 0 else f"c{i - 1}", f"w{i}"],
                              ["y" if i == 11 else f"c{i}"]) for i in range(12)]
    return {
        "convs": save("convs", [
            helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1] * 4),
            helper.make_node("Relu", ["a"], ["b"]),
            helper.make_node("Conv", ["b", "w2"], ["y"], pads=[1] * 4)],
            [1, 32, 56, 56], [1, 64, 56, 56], [w("w1", 64, 32, 3, 3), w("w2", 64, 64, 3, 3)]),
        "chain": save("chain", chain, [1, 8, 4, 4], [1, 8, 4, 4],
                      [w(f"w{i}", 8, 8, 1, 1) for i in range(12)]),
        "silu": save("silu", [helper.make_node("Sigmoid", ["x"], ["s"]),
                              helper.make_node("Mul", ["x", "s"], ["y"])],
                     [1, 64, 112, 112], [1, 64, 112, 112], []),
        "fc": save("fc", [helper.make_node("Gemm", ["x", "wf"], ["y"], transB=1)],
                   [1, 2048], [1, 2048], [w("wf", 2048, 2048)]),
        # a fifth configuration: four parameters leave one row for each leave-one-out fit
        "pointwise": save("pointwise", [helper.make_node("Conv", ["x", "wp"], ["y"])],
                          [1, 128, 28, 28], [1, 128, 28, 28], [w("wp", 128, 128, 1, 1)]),
    }


def _profile(conf: Path, name: str, values: dict, bounds: dict | None = None,
             spreads: dict | None = None) -> None:
    """rk3588 on one core with ``values``; flat priors unless ``spreads`` names some."""
    text = (CONF / "hardware" / "rk3588.yaml").read_text().replace("name: rk3588",
                                                                    f"name: {name}")
    text = re.sub(r", spread: [0-9.]+", "", text)
    for key, spread in (spreads or {}).items():
        text = re.sub(rf"(\{{key: {re.escape(key)}, low: [0-9.]+, high: [0-9.]+)",
                      rf"\1, spread: {spread}", text)
    text = text.replace("cores: 3", "cores: 1")
    # the FC's weights at the tile rate, so that it measures dram.bandwidth_gbps
    text, found = re.subn(r"stream_gbps: [0-9.]+", "stream_gbps: 0", text, count=1)
    assert found, "rk3588.yaml no longer has dram.stream_gbps"
    for pattern, value in ((r"^dispatch_cycles: [0-9.]+", values["dispatch_cycles"]),
                           (r"^dram: \{bandwidth_gbps: [0-9.]+", values["dram.bandwidth_gbps"]),
                           (r"output_bytes_per_cycle: [0-9.]+(?=[,}])",
                            values["vector_unit.output_bytes_per_cycle"])):
        text, found = re.subn(pattern, lambda m, v=value: m[0].rsplit(" ", 1)[0] + f" {v}",
                              text, count=1, flags=re.M)
        assert found, f"rk3588.yaml no longer has {pattern}"  # the fixture must bite
    for key, (low, high) in (bounds or {}).items():
        text = text.replace(f"  - {{key: {key}, low:", f"  - {{key: {key}, low: {low}, "
                            f"high: {high}}}  # was: {{key: {key}, low:", 1)
    (conf / "hardware").mkdir(parents=True, exist_ok=True)
    (conf / "hardware" / f"{name}.yaml").write_text(text)


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """Networks, the truth and prior profiles, and measurements made on the truth."""
    root = tmp_path_factory.mktemp("board")
    conf, cache = root / "conf", root / "cache"
    nets = _networks(root)
    _profile(conf, "truth", TRUTH)
    _profile(conf, "prior", {"dispatch_cycles": 5000, "dram.bandwidth_gbps": 17.0,
                             "vector_unit.output_bytes_per_cycle": 2.18})
    rows = []
    for name, path in nets.items():
        code, lines, _ = run_inprocess(
            "--config-dir", str(conf), "hardware=truth", "model=onnx", f"model.path={path}",
            f"hydra.run.dir={root / name}", f"run.cache_dir={cache}", *COMMON)
        assert code == 0, lines
        latency = json.loads((root / name / "metrics.json").read_text())["latency_ms"]
        rows.append({"model": str(path), "overrides": "", "latency_ms": repr(latency)})
    measurements = root / "board.csv"
    _write_csv(measurements, rows)
    return {"root": root, "conf": conf, "cache": cache, "csv": measurements, "rows": rows}


def _write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["model", "overrides", "latency_ms"])
        writer.writeheader()
        writer.writerows(rows)


def _calibrate(board: dict, profile: str, measurements: Path, report: Path):
    return run_inprocess(f"hardware={profile}", f"measurements={measurements}",
                         "--config-dir", str(board["conf"]), "--report-dir", str(report),
                         f"run.cache_dir={board['cache']}", *COMMON, main=calibrate_main)


def test_calibration_recovers_the_truth_and_reports_leave_one_out(board):
    code, lines, _ = _calibrate(board, "prior", board["csv"], board["root"] / "report")
    assert code == 0, lines
    fit = json.loads((board["root"] / "report" / "fit.json").read_text())
    for key, truth in TRUTH.items():
        assert fit["fitted"][key] == pytest.approx(truth, rel=0.05), key
    assert len(fit["leave_one_out"]) == 5 and all(v > 0 for v in fit["leave_one_out"])
    measured = [float(r["latency_ms"]) for r in board["rows"]]
    before = max(abs(np.log(p / m)) for p, m in zip(fit["before"], measured, strict=True))
    after = max(abs(np.log(p / m)) for p, m in zip(fit["after"], measured, strict=True))
    assert after < 0.02 < before
    calibrated = (board["conf"] / "hardware" / "prior_calibrated.yaml").read_text()
    assert "name: prior_calibrated" in calibrated
    assert "CALIBRATED by npuflow-calibrate" in calibrated
    assert "dispatch_cycles: 2" in calibrated  # the fitted value, rounded like the field
    report = (board["root"] / "report" / "report.md").read_text()
    assert "leave-one-out" in report and (board["root"] / "report" / "ratios.png").is_file()
    assert (board["conf"] / "hardware" / "prior.yaml").read_text().count("dispatch_cycles: 5000")
    # the calibrated profile is a profile: npuflow runs it and predicts the measurement
    code, lines, _ = run_inprocess(
        "--config-dir", str(board["conf"]), "hardware=prior_calibrated", "model=onnx",
        f"model.path={board['rows'][1]['model']}", f"hydra.run.dir={board['root'] / 'check'}",
        f"run.cache_dir={board['cache']}", *COMMON)
    assert code == 0, lines
    got = json.loads((board["root"] / "check" / "metrics.json").read_text())["latency_ms"]
    assert got == pytest.approx(float(board["rows"][1]["latency_ms"]), rel=0.02)


def test_a_fit_never_leaves_its_bounds(board):
    _profile(board["conf"], "narrow", {"dispatch_cycles": 5000, "dram.bandwidth_gbps": 17.0,
                                       "vector_unit.output_bytes_per_cycle": 2.18},
             bounds={"vector_unit.output_bytes_per_cycle": (1.5, 8)})  # truth 1.2 below
    code, lines, _ = _calibrate(board, "narrow", board["csv"], board["root"] / "narrow")
    assert code == 0, lines
    fit = json.loads((board["root"] / "narrow" / "fit.json").read_text())
    assert 1.5 <= fit["fitted"]["vector_unit.output_bytes_per_cycle"] <= 8  # trf's box
    assert 500 <= fit["fitted"]["dispatch_cycles"] <= 50000
    assert 4 <= fit["fitted"]["dram.bandwidth_gbps"] <= 34
    report = (board["root"] / "narrow" / "report.md").read_text()
    assert "| `vector_unit.output_bytes_per_cycle` | 2.18 |" in report and "[1.5, 8]" in report


def test_a_trusted_prior_holds_its_parameter_and_the_others_absorb_the_data(board):
    """A spread of 1.02 on the dispatch cost: the fit keeps it near the profile's 5000
    (the truth is 2600) and still moves the parameters left free."""
    _profile(board["conf"], "trusting", {"dispatch_cycles": 5000, "dram.bandwidth_gbps": 17.0,
                                         "vector_unit.output_bytes_per_cycle": 2.18},
             spreads={"dispatch_cycles": 1.02})
    code, lines, _ = _calibrate(board, "trusting", board["csv"], board["root"] / "trusting")
    assert code == 0, lines
    fit = json.loads((board["root"] / "trusting" / "fit.json").read_text())
    assert fit["fitted"]["dispatch_cycles"] == pytest.approx(5000, rel=0.1)
    assert fit["fitted"]["dram.bandwidth_gbps"] < 14  # moved towards the truth (9.5)
    report = (board["root"] / "trusting" / "report.md").read_text()
    assert "| `dispatch_cycles` | 5000 | x1.02 |" in report
    assert "| `vector_unit.output_bytes_per_cycle` | 2.18 | flat |" in report


BAD_ROWS = {
    "unknown model": ({"model": "no_such_net", "overrides": "", "latency_ms": "1"}, "row 2"),
    "zero time": ({"model": "{net}", "overrides": "", "latency_ms": "0"}, "row 2"),
    "negative time": ({"model": "{net}", "overrides": "", "latency_ms": "-3"}, "row 2"),
    "not a time": ({"model": "{net}", "overrides": "", "latency_ms": "fast"}, "row 2"),
    "bad override": ({"model": "{net}", "overrides": "simulate.frames=0",
                      "latency_ms": "1"}, "row 2"),
    "fails to compile": ({"model": "{bad}", "overrides": "", "latency_ms": "1"}, "row 2"),
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_a_bad_row_is_one_line_naming_it_and_nothing_is_written(board, case, tmp_path):
    row, culprit = BAD_ROWS[case]
    bad = tmp_path / "custom.onnx"
    node = helper.make_node("FancyOp", ["x"], ["y"], domain="vendor.npu")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [1, 4])],
                              [helper.make_tensor_value_info("y", 1, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("vendor.npu", 1)]),
              bad)
    row = {k: v.format(net=board["rows"][0]["model"], bad=bad) for k, v in row.items()}
    measurements = tmp_path / "m.csv"
    _write_csv(measurements, [row, *board["rows"][1:]])
    code, lines, _ = _calibrate(board, "prior", measurements, tmp_path / "report")
    assert code == 2 and len(lines) == 1, lines
    assert str(measurements) in lines[0] and culprit in lines[0], lines[0]
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize(("edit", "culprit"), [
    (lambda s: s.replace("{key: dispatch_cycles, low: 500, high: 50000}",
                         "{key: dispatch_cycles, low: 500}"), "hardware.calibrate"),
    (lambda s: s.replace("low: 500, high: 50000", "low: 500, high: 50000, spread: 1"),
     "hardware.calibrate[0].spread"),
    (lambda s: s.replace("{key: dispatch_cycles,", "{key: dispatch_cyclez,"),
     "hardware.calibrate[0]"),
    (lambda s: s.replace("low: 500, high: 50000", "low: 6000, high: 50000"),
     "hardware.calibrate[0]"),
])
def test_a_bad_calibrate_list_is_one_line_naming_the_key(board, edit, culprit, tmp_path):
    text = (board["conf"] / "hardware" / "prior.yaml").read_text()
    conf = tmp_path / "conf" / "hardware"
    conf.mkdir(parents=True)
    (conf / "broken.yaml").write_text(edit(text).replace("name: prior", "name: broken"))
    code, lines, _ = run_inprocess(
        "hardware=broken", f"measurements={board['csv']}", "--config-dir",
        str(tmp_path / "conf"), "--report-dir", str(tmp_path / "r"), *COMMON,
        main=calibrate_main)
    assert code == 2 and len(lines) == 1 and culprit in lines[0], lines
    assert not (tmp_path / "r").exists() and not (conf / "broken_calibrated.yaml").exists()


def test_fewer_rows_than_free_parameters_is_refused(board, tmp_path):
    measurements = tmp_path / "m.csv"
    _write_csv(measurements, board["rows"][:2])
    code, lines, _ = _calibrate(board, "prior", measurements, tmp_path / "report")
    free = len(yaml.safe_load((CONF / "hardware" / "rk3588.yaml").read_text())["calibrate"])
    assert code == 2 and f"2 row(s) cannot determine {free} free parameters" in lines[0], lines
    assert not (tmp_path / "report").exists()


def _layers_csv(board: dict, path: Path, full_names: bool = True) -> None:
    """The truth's own kernel times as a profiler would report them: one line per kernel,
    named by its first ONNX node (every other one in RKNN's ``OpType:node`` form)."""
    lines = []
    for i, (name, row) in enumerate(zip(("convs", "chain", "silu", "fc", "pointwise"),
                                        board["rows"], strict=True)):
        plan = json.loads((board["root"] / name / "compile" / "plan.json").read_text())
        for j, k in enumerate(plan["kernels"]):
            layer = k["ops"][0]
            if full_names and (i + j) % 2:
                layer = f"{k['op_types'][0]}:{layer}"
            lines.append({"model": row["model"], "overrides": "", "layer": layer,
                          "time_us": repr(k["cost"]["total_cycles"] / 1000.0)})
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["model", "overrides", "layer", "time_us"])
        writer.writeheader()
        writer.writerows(lines)


def test_per_layer_times_join_the_fit_and_are_reported(board, tmp_path):
    layers = tmp_path / "layers.csv"
    _layers_csv(board, layers)
    report = tmp_path / "report"
    code, lines, _ = run_inprocess(
        "hardware=prior", f"measurements={board['csv']}", f"layers={layers}",
        "--config-dir", str(board["conf"]), "--report-dir", str(report),
        f"run.cache_dir={board['cache']}", *COMMON, main=calibrate_main)
    assert code == 0, lines
    fit = json.loads((report / "fit.json").read_text())
    for key, truth in TRUTH.items():
        assert fit["fitted"][key] == pytest.approx(truth, rel=0.05), key
    assert len(fit["layers"]) == 5
    for row in fit["layers"]:
        assert row["kernels"] >= 1 and row["unmatched_count"] == 0
        assert row["rms_after"] < 0.02 < row["rms_before"], row
    assert "Per-layer times" in (report / "report.md").read_text()


def _first_time(text: str, value: str) -> str:
    """The layers file with the first row's time_us replaced."""
    header, first, *rest = text.split("\n")
    return "\n".join([header, first.rsplit(",", 1)[0] + f",{value}", *rest])


@pytest.mark.parametrize(("edit", "culprit"), [
    (lambda t: _first_time(t, "-5"), "line 2: time_us must be a positive time"),
    (lambda t: t.replace(".onnx,", ".onnx,hardware.cores=2 ", 1), "line 2: no measurements row"),
    (lambda t: t.split("\n")[0] + "\n", "no layer rows"),
    (lambda t: t.replace("layer", "node", 1), "missing column(s) layer"),
])
def test_a_bad_layers_file_is_one_line_naming_the_line(board, edit, culprit, tmp_path):
    layers = tmp_path / "layers.csv"
    _layers_csv(board, layers, full_names=False)
    layers.write_text(edit(layers.read_text()))
    code, lines, _ = run_inprocess(
        "hardware=prior", f"measurements={board['csv']}", f"layers={layers}",
        "--config-dir", str(board["conf"]), "--report-dir", str(tmp_path / "r"),
        f"run.cache_dir={board['cache']}", *COMMON, main=calibrate_main)
    assert code == 2 and len(lines) == 1 and culprit in lines[0], lines
    assert str(layers) in lines[0] and not (tmp_path / "r").exists()


_HEADER = ("ID OpType DataType Target InputShape OutputShape Cycles(DDR/NPU/Total) Time(us) "
           "MacUsage(%) WorkLoad(0/1/2) RW(KB) FullName")
_ROWS = [  # RKNN-Toolkit2 2.x's layer table, as posted in THU-MIG/yolov10 issue 115
    "1 InputOperator UINT8 CPU \\ (1,3,64,64) 0/0/0 12 \\ 0.0%/0.0%/0.0% 0 InputOperator:images",
    "2 ConvRelu INT8 NPU (1,3,64,64),(16,3,3,3),(16) (1,16,64,64) 7083/12800/12800 178 "
    "4.49/0.00/0.00 100.0%/0.0%/0.0% 104 Conv:/model.0/conv/Conv",
    "3 ConvExSwish INT8 NPU (1,16,64,64),(32,16,3,3),(32) (1,32,32,32) 21923/51200/51200 302 "
    "21.19/0.00/0.00 100.0%/0.0%/0.0% 433 Conv:/model.1/conv/Conv",
]
RKNN_TABLE = "\n".join([
    "D RKNN: [05:07:06.566] " + "    ".join(_HEADER.split()),
    *("D RKNN: [05:07:06.566] " + "   ".join(r.split()) for r in _ROWS[:2]),
    " |  " + "  ".join(_ROWS[2].split()),  # the console form of the same table
    "D RKNN: [05:07:06.566] Total Operator Elapsed Per Frame Time(us): 492", ""])


def test_rknn_layer_tables_become_layer_rows(tmp_path):
    dump = tmp_path / "perf.txt"
    dump.write_text(RKNN_TABLE)
    proc = subprocess.run([sys.executable, "-m", "pipeline.calibrate.layers", str(dump),
                           "yolov5s", "hardware.cores=1"], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [(r["layer"], r["time_us"]) for r in rows] == [
        ("InputOperator:images", "12"), ("Conv:/model.0/conv/Conv", "178"),
        ("Conv:/model.1/conv/Conv", "302")]
    assert rows[0]["model"] == "yolov5s" and rows[0]["overrides"] == "hardware.cores=1"
    assert node_name("Conv:/model.0/conv/Conv") == "/model.0/conv/Conv"
    empty = tmp_path / "empty.txt"
    empty.write_text("no table here\n")
    bad = subprocess.run([sys.executable, "-m", "pipeline.calibrate.layers", str(empty), "m"],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "no RKNN layer table found" in bad.stderr


def test_repeated_rows_count_once_for_the_fit_and_leave_one_out(board, tmp_path,
                                                                  monkeypatch):
    """Three measurements of one network determine one value: with too few distinct
    configurations the fit is refused, and a repeat never stays in the fit that predicts
    its twin (the figure would be in-sample)."""
    measurements = tmp_path / "m.csv"
    _write_csv(measurements, [board["rows"][0]] * 3 + [board["rows"][1]])
    code, lines, _ = _calibrate(board, "prior", measurements, tmp_path / "report")
    assert code == 2 and "2 distinct configuration(s)" in lines[0], lines
    seen: list[list[int]] = []

    def fake_fit(predict, rows, measured, free, prior, layers, groups):
        seen.append(list(rows))
        return fit_module.FitResult(prior, 0.0, 1)

    groups = ["a", "a", "b", "c", "d"]
    free = [object()] * 3
    monkeypatch.setattr(fit_module, "fit", fake_fit)
    loo = fit_module.leave_one_out(lambda i, p: 1.0, [1.0] * 5, free, (), groups=groups)
    assert loo == [1.0] * 5
    assert seen[0] == seen[1] == [2, 3, 4]  # the twin left out with its row
    assert fit_module.leave_one_out(lambda i, p: 1.0, [1.0] * 5, free[:1] * 4, (),
                                    groups=groups) is None  # 4 groups for 4 parameters


def test_a_spreadsheets_csv_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "board.csv"
    path.write_text("\ufeffmodel , overrides,latency_ms\nresnet18,,2.5\n", encoding="utf-8")
    rows = read_measurements(path, ["resnet18"])
    assert [(r.model, r.latency_ms) for r in rows] == [("resnet18", 2.5)]
    path.write_bytes("model,overrides,latency_ms\n".encode("utf-16"))
    with pytest.raises(UserError, match="not UTF-8 text"):
        read_measurements(path, ["resnet18"])


def test_an_unwritable_output_folder_stops_before_the_fit(board, tmp_path):
    code, lines, _ = run_inprocess(
        "hardware=prior", f"measurements={board['csv']}", "--config-dir", str(board["conf"]),
        "--report-dir", "/proc/npuflow-report", *COMMON, main=calibrate_main)
    assert code == 2 and len(lines) == 1 and "--report-dir" in lines[0], lines
    assert "cannot write in '/proc'" in lines[0]
