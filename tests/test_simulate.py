"""Simulate: the timeline obeys the physics and moves the way the seeds saw."""

from __future__ import annotations

import csv
import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from onnx import helper, numpy_helper

from hardware.cost import bytes_per_cycle, gemm_bytes_per_cycle
from hardware.profile import load_profile
from ops.load import from_onnx
from pipeline.compiler.driver import compile_graph
from pipeline.compiler.plan import Plan
from pipeline.model_source import fix_input_shapes
from pipeline.simulator.metrics import latency_metrics
from pipeline.simulator.replay import FrameCosts, build
from pipeline.simulator.report import LAYER_COLUMNS
from pipeline.simulator.timeline import Task, longest_path, schedule
from pipeline.zoo import ZOO
from tests.conftest import CONF, run_cli

COMPILE = OmegaConf.load(CONF / "compile" / "default.yaml")
PROFILES = ("rk3588", "tpu_v1", "edge_tpu", "ethos_u55_256", "nvdla_small", "nvdla_full")


def _profile(name):
    return load_profile(CONF / "hardware" / f"{name}.yaml")


NO_HOST_WORK = FrameCosts(0, 0)


def _simulate(graph, profile, frames=1, depth=1, costs=NO_HOST_WORK, **compile_cfg):
    plan = Plan.from_json(compile_graph(graph, profile, OmegaConf.merge(COMPILE, compile_cfg),
                                        "int8"))
    tasks = build(plan, profile, frames, depth, costs)
    span = schedule(tasks)
    return plan, tasks, span


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("zoo"))
    out = {}
    for name, fn in ZOO.items():
        kwargs = {"cache_dir": cache} if name == "digits_mlp" else {}
        if name == "yolov5s":
            kwargs["image_size"] = 320
        model = fn(seed=0, opset=17, **kwargs)
        if name == "digits_mlp":  # as its model config does: batch 1, static
            model = fix_input_shapes(model, [1, 64])
        out[name] = from_onnx(model)
    return out


def _kernel_bound(k, profile):
    """A kernel's physical lower bound: its MACs at peak, its compulsory bytes at DRAM speed."""
    if k.target != "npu":
        return 0
    peak = max(profile.peak_macs_per_cycle.values())
    return max(k.macs / peak, k.cost.compulsory_dram_bytes / _dram_rate(k, profile))


def _dram_rate(k, profile) -> float:
    """The kernel's DRAM bytes per cycle: a matrix-vector product's at the profile's
    stream rate (``dram.stream_gbps``), everything else's at its tile rate."""
    return gemm_bytes_per_cycle(k.gemm.m, profile) if k.gemm else bytes_per_cycle(profile)


@pytest.mark.parametrize("profile_name", PROFILES)
def test_latency_never_beats_the_critical_path_of_kernel_bounds(graphs, profile_name):
    profile = _profile(profile_name)
    for name, graph in graphs.items():
        plan, tasks, span = _simulate(graph, profile)
        bounds = [_kernel_bound(k, profile) for k in plan.kernels]
        deps = [k.deps for k in plan.kernels]
        assert span >= longest_path(bounds, deps), (name, profile_name)
        for k in plan.kernels:
            c = k.cost
            if k.target == "npu" and k.macs:
                achieved = k.macs / c.total_cycles
                assert achieved <= max(profile.peak_macs_per_cycle.values())
                # under the roofline
                assert c.total_cycles >= c.dram_bytes / _dram_rate(k, profile) - 1
        metrics = latency_metrics(plan, tasks, span, profile)
        assert 0 <= metrics["mac_utilization"] <= 1 and 0 <= metrics["sram_hit_rate"] <= 1


def test_single_buffering_loses_to_double_buffering(graphs):
    rk = _profile("rk3588")
    single = dataclasses.replace(rk, dma=dataclasses.replace(rk.dma, double_buffering=False))
    double = dataclasses.replace(rk, dma=dataclasses.replace(rk.dma, double_buffering=True))
    _, _, db = _simulate(graphs["resnet18"], double)
    _, _, sb = _simulate(graphs["resnet18"], single)
    assert sb > 1.1 * db


def test_dispatch_overhead_is_paid_per_kernel_launch(graphs):
    rk = _profile("rk3588")
    free = dataclasses.replace(rk, dispatch_cycles=0)
    plan, _, with_dispatch = _simulate(graphs["mobilenet_v2"], rk, fusion=False)
    _, _, without = _simulate(graphs["mobilenet_v2"], free, fusion=False)
    launches = sum(1 for k in plan.kernels if k.target == "npu"
                   and k.cost.overhead_cycles)
    assert launches > 20
    assert with_dispatch - without == pytest.approx(launches * rk.dispatch_cycles, rel=0.02)
    fused_plan, _, fused = _simulate(graphs["mobilenet_v2"], rk)
    assert len(fused_plan.kernels) < len(plan.kernels) and fused < with_dispatch


def _two_branch_graph():
    """x -> conv (array) and x -> sigmoid chain (vector), joined by Add."""
    w = numpy_helper.from_array(np.zeros((64, 64, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["x"], ["s1"], name="sig1"),
             helper.make_node("Tanh", ["s1"], ["s2"], name="tanh1"),
             helper.make_node("Sigmoid", ["s2"], ["s3"], name="sig2"),
             helper.make_node("Add", ["a", "s3"], ["y"], name="join")]
    shape = [1, 64, 56, 56]
    graph = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", 1, shape)],
                              [helper.make_tensor_value_info("y", 1, shape)], [w])
    return from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_independent_branches_overlap_on_different_units():
    _, tasks, span = _simulate(_two_branch_graph(), _profile("rk3588"), fusion=False)
    by = {t.name: t for t in tasks}
    assert by["conv"].resource == "npu.array" and by["sig1"].resource == "npu.vector"
    assert by["sig1"].start < by["conv"].end  # the vector branch runs during the conv
    serial = sum(t.duration for t in tasks)
    assert span < serial
    assert by["join"].start == max(by["conv"].end, by["sig2"].end)


def test_a_producer_consumer_queue_nearly_doubles_throughput(graphs):
    rk = _profile("rk3588")
    _, _, latency = _simulate(graphs["mobilenet_v2"], rk)
    costs = FrameCosts(preprocess_cycles=latency, postprocess_cycles=0)
    _, _, sequential = _simulate(graphs["mobilenet_v2"], rk, frames=8, depth=1, costs=costs)
    _, _, queued = _simulate(graphs["mobilenet_v2"], rk, frames=8, depth=3, costs=costs)
    speedup = sequential / queued
    assert 1.6 < speedup <= 2.0


def test_scheduler_serialises_a_resource_and_reports_the_critical_path():
    from pipeline.simulator.timeline import critical_path

    tasks = [Task("a", "npu", 10), Task("b", "cpu", 5), Task("c", "npu", 3, [1])]
    assert schedule(tasks) == 13 and tasks[2].start == 10
    assert [tasks[i].name for i in critical_path(tasks)] == ["a", "c"]


def test_default_run_writes_every_artifact(tmp_path):
    proc = run_cli(f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    sim = tmp_path / "simulate"
    with open(sim / "layers.csv") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == LAYER_COLUMNS
    plan = json.loads((tmp_path / "compile" / "plan.json").read_text())
    assert len(rows) == len(plan["kernels"])
    for png in ("timeline.png", "roofline.png", "layers.png"):
        assert (sim / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("latency_ms", "cycles_total", "throughput_fps", "mac_utilization",
                "sram_hit_rate", "dram_bytes", "energy_mj", "avg_power_w", "peak_sram_bytes",
                "kernels", "npu_ops", "cpu_ops", "fallback_ms"):
        assert key in metrics, key
    assert metrics["latency_ms"] > 0  # rk3588 runs at 1 GHz: 1 ms = 1e6 cycles
    assert metrics["cycles_total"] == round(metrics["latency_ms"] * 1e6)
    again = tmp_path / "again"
    assert run_cli(f"hydra.run.dir={again}").returncode == 0
    assert (again / "metrics.json").read_bytes() == (tmp_path / "metrics.json").read_bytes()
    assert (again / "simulate" / "timeline.png").read_bytes() == (sim / "timeline.png"
                                                                  ).read_bytes()


def test_cold_start_adds_the_one_time_load_of_cached_weights(graphs):
    # caches parameters on chip; its one-segment rule is set aside: the raw scikit-learn graph
    # opens with a float Cast that the optimize stage removes and this test does not run
    tpu = dataclasses.replace(_profile("edge_tpu"), single_npu_segment=False)
    plan, tasks, span = _simulate(graphs["digits_mlp"], tpu)
    metrics = latency_metrics(plan, tasks, span, tpu)
    mem = plan.memory
    assert mem.cached_weight_bytes == mem.weight_bytes > 0  # 17 k params fit
    load_ms = mem.weight_bytes / (tpu.dram.bandwidth_gbps * 1e6)
    setup_ms = tpu.cold_start.setup_us * 1e-3
    assert metrics["cold_start_ms"] == pytest.approx(metrics["latency_ms"] + load_ms + setup_ms)
    # rk3588 streams every weight every inference: the first one pays only the driver's
    # setup and each NPU kernel's command upload
    rk = _profile("rk3588")
    plan, tasks, span = _simulate(graphs["resnet18"], rk)
    assert plan.memory.cached_weight_bytes == 0
    npu = sum(1 for k in plan.kernels if k.target == "npu")
    upload_ms = npu * rk.cold_start.command_bytes_per_kernel / (rk.dram.bandwidth_gbps * 1e6)
    rk_metrics = latency_metrics(plan, tasks, span, rk)
    assert rk_metrics["cold_start_ms"] == pytest.approx(
        rk_metrics["latency_ms"] + upload_ms + rk.cold_start.setup_us * 1e-3)
    assert rk_metrics["cold_start_ms"] > rk_metrics["latency_ms"]


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "hardware").glob("*.yaml")))
def test_every_profile_pays_more_for_the_first_inference(graphs, name):
    """Weights start off-chip on every shipped NPU: the first inference pays their cache
    fill or at least the driver's setup and the commands' upload."""
    profile = _profile(name)
    plan, tasks, span = _simulate(graphs["digits_mlp"], profile)
    metrics = latency_metrics(plan, tasks, span, profile)
    assert metrics["cold_start_ms"] > metrics["latency_ms"]


def test_graph_io_is_not_fallback_and_the_legend_lists_what_is_drawn(graphs, tmp_path):
    """An all-NPU graph has no fallback time: its input's upload and conversion are the
    graph's own I/O (graph_io_ms); a graph with a CPU kernel has both. The timeline's
    legend names exactly the categories it draws."""
    import matplotlib.pyplot as plt

    from pipeline.simulator import report

    rk = _profile("rk3588")
    plan, tasks, span = _simulate(graphs["mobilenet_v2"], rk)
    metrics = latency_metrics(plan, tasks, span, rk)
    assert all(k.target == "npu" for k in plan.kernels)
    assert metrics["fallback_ms"] == 0 and metrics["graph_io_ms"] > 0
    assert {t.category for t in tasks if t.name.startswith(("convert:", "link:"))} == \
        {"graph_io"}
    tpu = _profile("edge_tpu")
    mixed, mixed_tasks, mixed_span = _simulate(graphs["bert_encoder"], tpu)
    assert any(k.target == "cpu" for k in mixed.kernels)
    assert latency_metrics(mixed, mixed_tasks, mixed_span, tpu)["fallback_ms"] > 0
    drawn: list[list[str]] = []
    real_legend = plt.Axes.legend

    def spy(self, handles, labels, **kwargs):
        drawn.append(list(labels))
        return real_legend(self, handles, labels, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt.Axes, "legend", spy)
        report.plot_timeline(tasks, tmp_path / "t.png", rk.frequency_mhz, "t")
    assert set(drawn[0]) == {t.category for t in tasks if t.duration}


@pytest.mark.parametrize("profile_name", ["rk3588", "edge_tpu", "ethos_u55_256", "nvdla_full"])
def test_roofline_points_sit_under_their_own_units_roofs(graphs, profile_name):
    """Every NPU kernel is under its unit's roofs (a vector kernel is held to the vector
    lanes, not the MAC array), and a kernel labelled bandwidth-bound sits left of its
    unit's ridge; one right of it is bound by exposed DMA latency and says so."""
    from pipeline.simulator.report import roofline_points

    profile = _profile(profile_name)
    units = set()
    for name in ("mobilenet_v2", "bert_encoder", "yolov5s", "resnet18"):
        plan, _, _ = _simulate(graphs[name], profile)
        points, roofs, bw = roofline_points(plan, profile)
        assert points
        for p in points:
            units.add(p.unit)
            assert p.achieved <= roofs[p.unit] * (1 + 1e-9), (name, p)
            assert p.bandwidth >= bw  # a weight stream's roof is never under the tiles'
            assert p.achieved <= p.intensity * p.bandwidth * (1 + 1e-9), (name, p)
            ridge = roofs[p.unit] / p.bandwidth
            if p.label == "memory (bandwidth)":
                assert p.intensity < ridge, (name, p)
            if p.label == "memory (DMA latency)":
                assert p.intensity >= ridge, (name, p)
    # nvdla_full runs depthwise on its vector unit: held to the lanes, not the array
    assert units == ({"array", "vector"} if profile_name == "nvdla_full" else {"array"})


def test_a_compiler_estimate_s_cycles_leave_out_the_graph_s_hand_over(graphs):
    """``cycles_excluding_io`` is the makespan without the application's hand-over of the
    graph's input and output (what Vela's cycles count): on an all-NPU chain, whose
    hand-over is serial, exactly the makespan less graph_io; on the Edge TPU's BERT layer,
    whose CPU fallback overlaps nothing of it, never more than the makespan."""
    from pipeline.simulator.metrics import inference_metrics

    rk = _profile("rk3588")
    plan = Plan.from_json(compile_graph(graphs["mobilenet_v2"], rk, COMPILE, "int8"))
    _, span, metrics = inference_metrics(plan, rk)
    io_cycles = round(metrics["graph_io_ms"] * rk.frequency_mhz * 1e3)
    assert io_cycles > 0 and metrics["cycles_excluding_io"] == span - io_cycles
    tpu = _profile("edge_tpu")
    mixed = Plan.from_json(compile_graph(graphs["bert_encoder"], tpu, COMPILE, "int8"))
    tasks, span, metrics = inference_metrics(mixed, tpu)
    assert metrics["cycles_excluding_io"] < span == metrics["cycles_total"]
    assert all(t.end <= span for t in tasks)  # the run's own schedule is untouched


def _scan_schedule(tasks: list[Task]) -> list[tuple[int, int, int | None]]:
    """The list scheduler written plainly: every task scans its resource's busy intervals
    from the first (the reference the bisecting scheduler must equal)."""
    busy: dict[str, list[tuple[int, int, int]]] = {}
    out = []
    for i, task in enumerate(tasks):
        ready, why = 0, None
        for d in task.deps:
            if out[d][1] > ready:
                ready, why = out[d][1], d
        start, blocker = ready, None
        for lo, hi, idx in sorted(busy.get(task.resource, [])):
            if hi <= start:
                continue
            if lo >= start + task.duration:
                break
            start, blocker = hi, idx
        out.append((start, start + task.duration, blocker if start > ready else why))
        if task.duration:
            busy.setdefault(task.resource, []).append((start, start + task.duration, i))
    return out


@given(st.lists(st.tuples(st.sampled_from(["npu", "cpu", "link"]),
                          st.sampled_from([0, 1, 3, 40, 500]),
                          st.lists(st.integers(0, 10**6), max_size=3)),
                min_size=1, max_size=120))
@settings(max_examples=150, deadline=None)
def test_the_scheduler_equals_the_plain_scan_on_any_task_list(spec):
    tasks = [Task(f"t{i}", resource, duration, sorted({d % i for d in deps}) if i else [])
             for i, (resource, duration, deps) in enumerate(spec)]
    expected = _scan_schedule(tasks)
    makespan = schedule(tasks)
    assert [(t.start, t.end, t.waited_on) for t in tasks] == expected
    assert makespan == max(end for _, end, _ in expected)
