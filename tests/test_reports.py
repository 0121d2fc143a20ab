"""What a performance engineer opens: trace.json, model.annotated.onnx, report.html (the
pages rendered in a real headless Chromium)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from pipeline import onnx_io
from tests.conftest import REPO, run_cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = REPO / "test-artifacts"  # kept by CI: the rendered pages' screenshots


@pytest.fixture(scope="module")
def edge_run(tmp_path_factory) -> Path:
    """BERT on edge_tpu: NPU and CPU kernels, hand-overs, quantized layers."""
    run = tmp_path_factory.mktemp("edge") / "run"
    proc = run_cli("model=bert_encoder", "model.params.seq_len=16", "hardware=edge_tpu",
                   "data.calibration_size=4", "data.eval_size=4", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr
    return run


def _labelled(task: str, labels: dict[str, str]) -> str:
    """A timeline task's name with its kernel's node name replaced by the kernel's label."""
    for name, label in labels.items():
        if task == name or task.endswith(":" + name):
            return task[:len(task) - len(name)] + label
    return task


def test_trace_slices_are_the_timeline(edge_run):
    trace = json.loads((edge_run / "simulate" / "trace.json").read_text())
    timeline = json.loads((edge_run / "simulate" / "timeline.json").read_text())
    plan = json.loads((edge_run / "compile" / "plan.json").read_text())
    mhz = trace["otherData"]["frequency_mhz"]
    single = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    drawn = sorted((t for t in timeline if t["end"] > t["start"]), key=lambda t: t["start"])
    assert len(single) == len(drawn)
    assert [e["ts"] for e in single] == sorted(e["ts"] for e in single)
    labels = {k["name"]: k["label"] for k in plan["kernels"]}
    shown = {_labelled(t["name"], labels): t for t in drawn}
    for e in single:
        t = shown[e["name"]]
        assert e["ts"] == pytest.approx(t["start"] / mhz)
        assert e["dur"] == pytest.approx((t["end"] - t["start"]) / mhz)
        assert e["args"]["critical"] == t["critical"]
    kernels = {k["label"]: k for k in plan["kernels"]}
    for e in single:
        if e["name"] in kernels:
            k = kernels[e["name"]]
            assert e["args"]["ops"] == k["op_types"] and e["args"]["target"] == k["target"]
            assert e["args"]["cycles"] == k["cost"]["total_cycles"]
            assert e["args"]["kernel"] == k["name"]
    # optimize turns BERT's 3-D MatMul+Add into Reshape-Gemm-Reshape and names the last
    # Reshape after the Add's tensor, "add_1_out"; every slice says the op it holds
    reshapes = [e["name"] for e in single if e["args"].get("ops") == ["Reshape"]]
    assert reshapes and all("reshape" in n.lower() for n in reshapes)
    names = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {lane for pid, lane in names if pid == 1} == {t["resource"] for t in drawn}
    frames = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 2]
    assert len({e["name"].split(":")[0] for e in frames if e["name"].startswith("f")}) >= 2


def test_annotated_model_says_where_each_node_runs_and_why(edge_run):
    plan = json.loads((edge_run / "compile" / "plan.json").read_text())
    annotated = onnx.load(edge_run / "compile" / "model.annotated.onnx")
    onnx.checker.check_model(annotated, full_check=True)
    props = {n.name: {p.key: p.value for p in n.metadata_props} for n in annotated.graph.node}
    cpu = 0
    for k in plan["kernels"]:
        for node in k["ops"]:
            assert props[node]["npuflow.target"] == k["target"]
            assert props[node]["npuflow.cycles"] == str(k["cost"]["total_cycles"])
            if k["target"] == "cpu":
                cpu += 1
                first = next(c for c in k["checks"] if not c["passed"])
                assert props[node]["npuflow.failed_rule"].startswith(first["text"])
    assert cpu > 0
    compiled = onnx.load(edge_run / "quantize" / "model.onnx")
    a, b = onnx_io.session(compiled), onnx_io.session(annotated)
    feed = onnx_io.seeded_feeds(a, 0)
    assert all(np.array_equal(x, y) for x, y in zip(a.run(None, feed), b.run(None, feed),
                                                      strict=True))


def _render(page: Path, name: str) -> str:
    """The page's DOM after its scripts ran in headless Chromium; a screenshot kept."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync"]
    profile = page.parent / f".chromium-{name}"
    dom = subprocess.run([CHROMIUM, *flags, f"--user-data-dir={profile}",
                          "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    ARTIFACTS.mkdir(exist_ok=True)
    subprocess.run([CHROMIUM, *flags, f"--user-data-dir={profile}-shot",
                    "--window-size=1280,2400", f"--screenshot={ARTIFACTS / f'{name}.png'}",
                    page.as_uri()], capture_output=True, timeout=120)
    assert (ARTIFACTS / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    return dom


def _body(dom: str) -> dict[str, str]:
    tag = re.search(r"<body([^>]*)>", dom)
    assert tag, dom[:500]
    return dict(re.findall(r'data-(\w+)="([^"]*)"', tag.group(1)))


needs_browser = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="no chromium here (.ci/run installs it; this test runs in CI)")


@needs_browser
def test_run_page_renders_in_chromium_with_tables_and_images(edge_run):
    assert CHROMIUM, "CI must install chromium (.ci/run)"
    plan = json.loads((edge_run / "compile" / "plan.json").read_text())
    dom = _render(edge_run / "report.html", "run_report")
    body = _body(dom)
    assert body["ready"] == "yes" and body["errors"] == "0"
    loaded, total = map(int, body["images"].split("/"))
    assert loaded == total >= 3  # timeline, roofline, layers (+ quantization)
    placement = re.search(r'<table id="placement".*?</table>', dom, re.S).group(0)
    assert placement.count("<tr") - 1 == len(plan["kernels"])
    assert placement.count('class="cpu"') == sum(k["target"] == "cpu" for k in plan["kernels"])
    assert re.search(r'<table id="kernels".*?<tbody>(.*?)</tbody>', dom, re.S).group(1).count(
        "<tr") == len(plan["kernels"])
    _keep_plots(edge_run, "run_report")


def _keep_plots(run: Path, name: str) -> None:
    """The page's plots beside its screenshot in CI's artifacts, to be looked at."""
    folder = ARTIFACTS / f"{name}_plots"
    folder.mkdir(parents=True, exist_ok=True)
    for png in run.rglob("*.png"):
        shutil.copyfile(png, folder / f"{png.parent.name}_{png.name}")


@needs_browser
def test_sweep_page_links_every_job_and_renders(tmp_path):
    assert CHROMIUM, "CI must install chromium (.ci/run)"
    sweep = tmp_path / "sweep"
    proc = run_cli("-m", "model=digits_mlp", "hardware=rk3588,edge_tpu", "quant=fp16",
                   f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr
    dom = _render(sweep / "report.html", "sweep_report")
    body = _body(dom)
    assert body["ready"] == "yes" and body["errors"] == "0" and body["images"] == "1/1"
    links = re.findall(r'<a href="(\d+/report.html)">', dom)
    assert sorted(links) == ["0/report.html", "1/report.html"]
    assert all((sweep / link).is_file() for link in links)
    _keep_plots(sweep, "sweep_report")


def test_the_sustained_run_is_its_own_counter_track(tmp_path):
    proc = run_cli("simulate.sustained.seconds=20", "data.calibration_size=4",
                   "data.eval_size=4", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    trace = json.loads((tmp_path / "simulate" / "trace.json").read_text())
    rows = (tmp_path / "simulate" / "sustained.csv").read_text().splitlines()[1:]
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    temperature = [e["args"]["temperature_c"] for e in counters if e["name"] == "temperature_c"]
    assert len(counters) == 4 * len(rows) and len(temperature) == len(rows)
    assert temperature == [float(r.split(",")[1]) for r in rows]
    assert temperature[-1] > temperature[0]  # it heats up


def test_exporters_long_kernel_names_fit_the_layers_plot(tmp_path):
    import warnings

    from pipeline.simulator.report import plot_layers, short_label
    scope = "functional_3_1/MobileNetV3Small_1/expanded_conv_{}/project/convolution__{}"
    names = [scope.format(i, 1000 + i) for i in range(12)] + ["conv_0"]
    labels = [short_label(n) for n in names]
    assert all(len(x) <= 48 for x in labels) and len(set(labels)) == len(names)
    assert labels[-1] == "conv_0" and labels[0].endswith("convolution__1000")
    rows = [{"kernel": n, "target": "npu", "total_cycles": 100 + i, "compute_cycles": 60,
             "overhead_cycles": 10} for i, n in enumerate(names)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "Tight layout not applied" included
        plot_layers(rows, tmp_path / "layers.png")
    assert (tmp_path / "layers.png").stat().st_size > 10_000
