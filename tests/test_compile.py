"""The compiler: placement with reasons, fusion fallback, min-cut placement, tiling, memory."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from onnx import TensorProto, helper, numpy_helper

from hardware.profile import load_profile
from ops.load import from_onnx
from pipeline.compiler import memory_plan
from pipeline.compiler.driver import compile_graph
from pipeline.compiler.plan import PLAN_VERSION, Plan
from pipeline.compiler.report import compile_log
from pipeline.errors import UserError
from pipeline.zoo import ZOO
from tests.conftest import CONF, error_lines, run_cli
from tests.onnx_builders import if_model

COMPILE_CFG = OmegaConf.load(CONF / "compile" / "default.yaml")


def _profile(name):
    return load_profile(CONF / "hardware" / f"{name}.yaml")


def _compile(graph, profile, **overrides):
    cfg = OmegaConf.merge(COMPILE_CFG, OmegaConf.create(overrides))
    return compile_graph(graph, profile, cfg, "int8")


@pytest.fixture(scope="module")
def bert():
    return from_onnx(ZOO["bert_encoder"](seed=0, opset=17))


def _kernel(plan, name):
    return next(k for k in plan["kernels"] if k["name"] == name)


def test_gelu_falls_back_with_reasons_where_unsupported(bert):
    plan = _compile(bert, _profile("tpu_v1"))
    div = _kernel(plan, "div_1")
    assert div["target"] == "cpu" and div["fused_form_failed"]
    assert div["fused_failed_checks"][0]["detail"] == "'Gelu' not in list"
    log = compile_log(Plan.from_json(plan))
    entry = log.split("[INFO] Kernel 'div_1'")[1].split("[INFO]")[0]
    assert "Fused form Gelu (div_1+erf_1+add_7+mul_2+mul_3)" in entry
    assert "('Gelu' not in list): FAIL" in entry
    assert "Selected target: CPU_ELEMENTWISE" in entry
    assert "WARNING: layout conversion required (NHWC->NCHW)" in entry
    conversion = next(t for t in plan["transfers"] if t["to"] == div["id"])
    assert conversion["cycles"] > 0 and conversion["bytes"] == 128 * 3072


def test_gelu_stays_on_the_npu_where_supported(bert):
    # the rk3576 runs it as a layer of its own (RKNN's exGelu); the rk3588 in its Linear's
    # output stage (tests/test_transformer_ops.py)
    plan = _compile(bert, _profile("rk3576"))
    gelu = _kernel(plan, "div_1")
    assert gelu["target"] == "npu" and gelu["composite"] == "Gelu"
    assert gelu["ops"] == ["div_1", "erf_1", "add_7", "mul_2", "mul_3"]


def _island_graph(relu_elems: int):
    """conv -> Erf (CPU) -> Relu (NPU-able) -> Erf (CPU): an NPU island between CPU ops."""
    w = numpy_helper.from_array(np.zeros((8, 8, 1, 1), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Erf", ["c"], ["e1"], name="erf_a"),
             helper.make_node("Relu", ["e1"], ["r"], name="relu"),
             helper.make_node("Erf", ["r"], ["y"], name="erf_b")]
    side = int(np.sqrt(relu_elems // 8))
    shape = [1, 8, side, side]
    graph = helper.make_graph(nodes, "island", [helper.make_tensor_value_info("x", 1, shape)],
                              [helper.make_tensor_value_info("y", 1, shape)], [w])
    return from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_optimal_placement_moves_a_short_npu_island_to_the_cpu():
    profile = _profile("rk3588")
    profile = dataclasses.replace(profile, ops={k: v for k, v in profile.ops.items()
                                                if k != "Erf"})
    graph = _island_graph(8 * 32 * 32)
    greedy = _compile(graph, profile, placement="greedy", fusion=False)
    optimal = _compile(graph, profile, placement="optimal", fusion=False)
    assert _kernel(greedy, "relu")["target"] == "npu"
    assert _kernel(optimal, "relu")["target"] == "cpu"
    assert _kernel(optimal, "relu")["moved_by_optimizer"]
    assert optimal["placement"]["optimal_cycles"] < greedy["placement"]["greedy_cycles"]
    assert optimal["placement"]["moved"] >= 1


def test_a_one_segment_compiler_runs_everything_after_the_first_unsupported_op_on_the_host():
    """The Edge TPU's compiler partitions a model once: the Relu that reads the first Erf's
    result is supported but runs on the host, saying why; the Conv before it stays on the
    NPU. A profile without the rule runs the Relu on the NPU."""
    graph = _island_graph(8 * 32 * 32)
    edge = _profile("edge_tpu")
    assert edge.single_npu_segment and "Erf" not in edge.ops and "Relu" in edge.ops
    plan = _compile(graph, edge, placement="greedy", fusion=False)
    assert [_kernel(plan, k)["target"] for k in ("conv", "erf_a", "relu", "erf_b")] == \
        ["npu", "cpu", "cpu", "cpu"]
    entry = compile_log(Plan.from_json(plan)).split("[INFO] Kernel 'relu'")[1].split("[INFO]")[0]
    assert "after erf_a" in entry and "one segment" in entry
    free = _compile(graph, dataclasses.replace(edge, single_npu_segment=False),
                    placement="greedy", fusion=False)
    assert _kernel(free, "relu")["target"] == "npu"


def test_a_branch_that_never_reads_the_hosts_results_stays_in_the_segment():
    """Two heads on one input, the first ending in an op the Edge TPU cannot run: the
    second head, listed after it but reading nothing of it, stays on the NPU."""
    w = numpy_helper.from_array(np.zeros((8, 8, 1, 1), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="conv_a"),
             helper.make_node("Erf", ["a"], ["y1"], name="erf"),
             helper.make_node("Conv", ["x", "w"], ["b"], name="conv_b"),
             helper.make_node("Relu", ["b"], ["y2"], name="relu")]
    shape = [1, 8, 16, 16]
    outs = [helper.make_tensor_value_info(y, 1, shape) for y in ("y1", "y2")]
    graph = from_onnx(helper.make_model(helper.make_graph(
        nodes, "heads", [helper.make_tensor_value_info("x", 1, shape)], outs, [w]),
        opset_imports=[helper.make_opsetid("", 17)]))
    plan = _compile(graph, _profile("edge_tpu"), placement="greedy", fusion=False)
    assert [_kernel(plan, k)["target"] for k in ("conv_a", "erf", "conv_b", "relu")] == \
        ["npu", "cpu", "npu", "npu"]


def test_optimal_agrees_with_greedy_when_no_move_pays():
    graph = from_onnx(ZOO["mobilenet_v2"](seed=0, opset=17))
    plan = _compile(graph, _profile("ethos_u55_256"), placement="optimal")
    assert plan["placement"]["moved"] == 0
    assert plan["placement"]["optimal_cycles"] == plan["placement"]["greedy_cycles"]


def _fan_out_graph():
    """relu's output is read by three kernels and is itself a graph output: one net, four
    readers; sigmoid/tanh/abs join again in add and mul."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["r"], ["s"], name="sigmoid"),
             helper.make_node("Tanh", ["r"], ["t"], name="tanh"),
             helper.make_node("Abs", ["r"], ["a"], name="abs"),
             helper.make_node("Add", ["s", "t"], ["u"], name="add"),
             helper.make_node("Mul", ["u", "a"], ["y"], name="mul")]
    shape = [1, 8, 16, 16]
    graph = helper.make_graph(nodes, "fan_out", [helper.make_tensor_value_info("x", 1, shape)],
                              [helper.make_tensor_value_info("y", 1, shape),
                               helper.make_tensor_value_info("r", 1, shape)])
    return from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 2e5), st.floats(1.0, 2e5)), min_size=6, max_size=6),
       st.sampled_from(["rk3588", "edge_tpu", "tpu_v1"]))
def test_the_min_cut_is_the_cheapest_assignment_and_pays_a_net_once(prices, name):
    """Against brute force over every assignment (not against greedy, which it beats by
    construction): the min-cut's choice has the least sequential estimate, and a tensor
    read by several kernels on the far side is handed over once, as the plan moves it."""
    import itertools

    from pipeline.compiler.driver import _transfers, compile_decisions
    from pipeline.compiler.placement import (
        CPU,
        NPU,
        hand_over_cycles,
        optimal_targets,
        total_cycles,
    )

    graph, profile = _fan_out_graph(), _profile(name)
    cfg = OmegaConf.merge(COMPILE_CFG, OmegaConf.create({"fusion": False}))
    decisions, _ = compile_decisions(graph, profile, cfg, "fp16")
    assert [d.kernel.name for d in decisions] == ["relu", "sigmoid", "tanh", "abs", "add", "mul"]
    for d, (npu, cpu) in zip(decisions, prices, strict=True):
        d.npu_cycles, d.cpu_cycles = npu, cpu
    options = [(NPU, CPU) if d.npu_ok else (CPU,) for d in decisions]
    every = [total_cycles(decisions, graph, profile, list(a))
             for a in itertools.product(*options)]
    best = optimal_targets(decisions, graph, profile)
    assert total_cycles(decisions, graph, profile, best) == pytest.approx(min(every), rel=1e-9)
    # relu on the NPU, its three readers on the host: x comes in once, r goes out once
    # (to sigmoid, tanh, abs and the application alike)
    split = [NPU, CPU, CPU, CPU, CPU, CPU]
    kernels = sum(d.npu_cycles if t == NPU else d.cpu_cycles
                  for d, t in zip(decisions, split, strict=True))
    once = [hand_over_cycles(t, graph, profile, "fp16") for t in ("x", "r")]
    assert total_cycles(decisions, graph, profile, split) == pytest.approx(kernels + sum(once))
    plan = _transfers(decisions, [{"target": t, "precision": "fp16"} for t in split], graph,
                      profile)
    assert [(t["tensor"], t["direction"]) for t in plan] == [("x", "cpu->npu"),
                                                             ("r", "npu->cpu")]
    assert [t["cycles"] for t in plan] == [math.ceil(c) for c in once]


def test_the_classifier_tail_moves_to_the_cpu_when_dispatch_dominates():
    """ResNet-18's head (GAP + Gemm) is memory-bound and pays a 5 us launch per kernel on
    rk3588 with its weights at the tile rate; the min-cut moves it to the host, like the
    seeds' NMS tail. (At the profile's weight-stream rate the Gemm stays on the NPU.)"""
    graph = from_onnx(ZOO["resnet18"](seed=0, opset=17))
    rk = _profile("rk3588")
    tiles = dataclasses.replace(rk, dram=dataclasses.replace(rk.dram, stream_gbps=0.0))
    plan = _compile(graph, tiles, placement="optimal")
    moved = [k["name"] for k in plan["kernels"] if k["moved_by_optimizer"]]
    assert moved == ["globalaveragepool_1", "flatten_1", "gemm_1"]


def test_a_fused_kernel_that_fails_falls_back_unfused_not_whole():
    profile = _profile("rk3588")
    profile = dataclasses.replace(profile, ops={k: v for k, v in profile.ops.items()
                                                if k != "Clip"})
    graph = from_onnx(ZOO["mobilenet_v2"](seed=0, opset=17))
    plan = _compile(graph, profile)
    convs = [k for k in plan["kernels"] if k["op_types"][0] == "Conv"]
    assert all(k["target"] == "npu" for k in convs)
    clips = [k for k in plan["kernels"] if k["op_types"] == ["Clip"]]
    assert clips and all(k["target"] == "cpu" for k in clips)
    fused = _compile(graph, _profile("rk3588"))
    assert all(k["target"] == "npu" for k in fused["kernels"]
               if k["op_types"][:1] == ["Conv"])
    assert len(fused["kernels"]) < len(plan["kernels"])


def test_fusion_off_means_one_kernel_per_node():
    graph = from_onnx(ZOO["resnet18"](seed=0, opset=17))
    plan = _compile(graph, _profile("rk3588"), fusion=False)
    assert len(plan["kernels"]) == len(graph.nodes)


def test_fixed_tile_that_cannot_fit_names_the_kernel_and_bytes():
    graph = from_onnx(ZOO["resnet18"](seed=0, opset=17))
    with pytest.raises(UserError, match=r"kernel 'conv_1' needs \d+ bytes of SRAM"):
        _compile(graph, _profile("ethos_u55_256"),
                 tiling={"mode": "fixed", "tile_m": 4096, "tile_n": 64, "tile_k": 147})


def test_cli_fixed_tile_error_is_one_line(tmp_path):
    proc = run_cli("model=resnet18", "hardware=ethos_u55_256", "compile.tiling.mode=fixed",
                   "compile.tiling.tile_m=4096", "compile.tiling.tile_n=64",
                   "compile.tiling.tile_k=147", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "conv_1" in line and "bytes of SRAM" in line
    assert not (tmp_path / "compile").exists()


def test_plan_is_versioned_and_self_contained(tmp_path):
    proc = run_cli("model=mobilenet_v2", "stages.order=[export,optimize,quantize,compile]",
                   f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((tmp_path / "compile" / "plan.json").read_text())
    assert plan["version"] == PLAN_VERSION and plan["profile"] == "rk3588"
    ids = [k["id"] for k in plan["kernels"]]
    assert ids == list(range(len(ids)))
    for k in plan["kernels"]:
        assert all(d < k["id"] for d in k["deps"])
        assert k["cost"]["total_cycles"] >= k["cost"]["compute_cycles"]
        assert k["checks"]
    assert (tmp_path / "compile" / "compile.log").read_text().count("[INFO] Kernel") == len(ids)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["kernels"] == len(ids)
    import onnx

    quantized = onnx.load(tmp_path / "quantize" / "model.onnx")  # what compile received
    compute = [n for n in quantized.graph.node
               if n.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    assert metrics["npu_ops"] + metrics["cpu_ops"] == len(compute)


def test_depthwise_runs_where_the_profile_says():
    graph = from_onnx(ZOO["mobilenet_v2"](seed=0, opset=17))
    rk = _profile("rk3588")  # depthwise: engine (channel-parallel mode of the array)

    def with_unit(unit):
        mode = dataclasses.replace(rk.mac_array.depthwise, unit=unit)
        return _compile(graph, dataclasses.replace(
            rk, mac_array=dataclasses.replace(rk.mac_array, depthwise=mode)))

    dw = "conv_14"  # 192 channels: whole groups of the engine's 64
    engine, on_vector, on_array = with_unit("engine"), with_unit("vector"), with_unit("array")
    assert _kernel(engine, dw)["depthwise"] and not _kernel(engine, "conv_1")["depthwise"]
    assert _kernel(engine, dw)["cost"]["unit"] == "array"
    assert _kernel(engine, dw)["cost"]["mapping_efficiency"] > 0.9
    assert _kernel(on_vector, dw)["cost"]["unit"] == "vector"
    assert _kernel(on_array, dw)["cost"]["unit"] == "array"
    assert _kernel(on_array, dw)["cost"]["mapping_efficiency"] < 0.05
    assert _kernel(engine, dw)["cost"]["compute_cycles"] < \
        _kernel(on_array, dw)["cost"]["compute_cycles"]


# -- memory planner -------------------------------------------------------------------

buffers = st.lists(st.tuples(st.integers(1, 10_000), st.integers(0, 30), st.integers(0, 10),
                             st.booleans()), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(buffers, st.integers(1_000, 100_000))
def test_no_two_live_buffers_overlap_and_sram_respects_its_limit(specs, limit):
    bufs = [memory_plan.Buffer(f"t{i}", size, start, start + length, want_sram=want)
            for i, (size, start, length, want) in enumerate(specs)]
    memory_plan.plan(bufs, limit)
    for a in bufs:
        if a.memory == "sram":
            assert a.offset + a.size <= limit
        for b in bufs:
            if a is not b and a.memory == b.memory and a.overlaps_in_time(b):
                assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset
    for memory in ("sram", "dram"):
        assert memory_plan.arena_peak(bufs, memory) >= memory_plan.live_peak(bufs, memory)


@given(st.lists(st.integers(1, 10_000), min_size=2, max_size=30, unique=True), st.booleans())
def test_planner_reaches_the_live_lower_bound_on_a_monotone_chain(sizes, descending):
    """Chain: tensor i is produced by kernel i and read by kernel i + 1. Greedy by size is
    optimal when sizes are strictly monotone; on [2, 1, 1, 2] it needs 4 where 3 suffice
    (and ties can cost too), which is why memory.json reports the live lower bound beside
    the arena peak."""
    sizes = sorted(sizes, reverse=descending)
    bufs = [memory_plan.Buffer(f"t{i}", s, i, i + 1, want_sram=True)
            for i, s in enumerate(sizes)]
    memory_plan.plan(bufs, 10**9)
    assert memory_plan.arena_peak(bufs, "sram") == memory_plan.live_peak(bufs, "sram")


def test_sram_shortage_spills_and_is_reported():
    """A 512 KB SRAM whose feature maps get a budget (not Vela's Shared_Sram arena)."""
    graph = from_onnx(ZOO["mobilenet_v2"](seed=0, opset=17))
    profile = _profile("ethos_u55_256")
    profile = dataclasses.replace(profile, sram=dataclasses.replace(profile.sram,
                                                                    arena="budget"))
    plan = _compile(graph, profile)
    mem = plan["memory"]
    assert mem["spilled_to_dram"]
    assert mem["sram_arena_peak_bytes"] <= mem["activation_budget_bytes"]
    assert "spilled to DRAM" in compile_log(Plan.from_json(plan))


def test_control_flow_stops_in_one_line_and_leaves_nothing_half_written(tmp_path):
    if_model(tmp_path / "if.onnx")
    common = ("model=onnx", f"model.path={tmp_path / 'if.onnx'}", "quant=none",
              f"run.cache_dir={tmp_path / 'cache'}")
    proc = run_cli(*common, f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2, proc.stderr
    (line,) = error_lines(proc)
    assert "node 'branch_1' (If) is control flow" in line
    assert "compile.control_flow=host" in line and "Traceback" not in proc.stderr
    run = tmp_path / "run"
    assert (run / "quantize").is_dir()  # the stages before compile completed
    assert not (run / "compile").exists() and not (run / "metrics.json").exists()
    assert not list(run.glob(".compile.tmp-*"))
    assert not list((tmp_path / "cache" / "stages" / "compile").glob("*/COMPLETE"))

    proc = run_cli(*common, "compile.control_flow=host", f"hydra.run.dir={tmp_path / 'host'}")
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "host" / "metrics.json").read_text())
    assert metrics["uncosted_ops"] == ["branch_1"]
    assert "branch_1" in metrics["fallback_ops"]


def _hardswish_model(form: str) -> onnx.ModelProto:
    """Conv -> HardSwish written the way ``form`` exporters write it -> x*a+b (PP-OCRv4's
    learnable affine)."""
    f = np.float32
    consts = {"w": np.full((16, 16, 1, 1), 0.05, f), "three": f(3), "zero": f(0),
              "six": f(6), "sixth": f(1 / 6), "two": f(2), "a": f(1.5), "b": f(0.25)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv")]
    if form == "hardsigmoid":
        nodes += [helper.make_node("HardSigmoid", ["c"], ["g"], name="hs", alpha=1 / 6),
                  helper.make_node("Mul", ["c", "g"], ["h"], name="hs_mul")]
    else:
        offset = "two" if form == "not_hardswish" else "three"
        nodes.append(helper.make_node("Add", ["c", offset], ["p"], name="hs_add"))
        gated = "p"
        if form != "no_clip":
            nodes.append(helper.make_node("Clip", ["p", "zero", "six"], ["q"], name="hs_clip"))
            gated = "q"
        if form == "div_first":
            nodes += [helper.make_node("Div", [gated, "six"], ["r"], name="hs_div"),
                      helper.make_node("Mul", ["c", "r"], ["h"], name="hs_mul")]
        else:
            last = ("Mul", "sixth") if form == "no_clip" else ("Div", "six")
            nodes += [helper.make_node("Mul", ["c", gated], ["r"], name="hs_mul"),
                      helper.make_node(last[0], ["r", last[1]], ["h"], name="hs_div")]
    nodes += [helper.make_node("Mul", ["h", "a"], ["s"], name="lab_mul"),
              helper.make_node("Add", ["s", "b"], ["y"], name="lab_add")]
    graph = helper.make_graph(
        nodes, "hardswish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 32, 32])],
        [numpy_helper.from_array(np.asarray(v, f), n) for n, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _with(profile, chains=None, epilogue=None, lut=None):
    vector = profile.vector_unit if chains is None else \
        dataclasses.replace(profile.vector_unit, chains=chains)
    ep = profile.epilogue if epilogue is None else \
        dataclasses.replace(profile.epilogue, activations=epilogue)
    ep = ep if lut is None else dataclasses.replace(ep, lut_activations=lut)
    return dataclasses.replace(profile, vector_unit=vector, epilogue=ep)


@pytest.mark.parametrize("form", ["clip_div", "div_first", "no_clip", "hardsigmoid"])
def test_every_exported_hardswish_is_one_activation(form):
    """However the exporter wrote it, HardSwish is one activation: fused into the conv
    when the output stage applies it (free, or through its lookup table as RKNN's
    ConvHardSwish), else one vector pass (RKNN's replace_torch_hardswish2); the affine
    after it is one pass per op on RKNN."""
    import onnxruntime as ort
    model = _hardswish_model(form)
    x = np.random.default_rng(0).normal(0, 40, (1, 16, 32, 32)).astype(np.float32)
    c = np.einsum("oi,bihw->bohw", np.full((16, 16), 0.05, np.float32), x)
    y = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    gate = c + 3 if form == "no_clip" else np.clip(c + 3, 0, 6)  # int8's range clips it
    np.testing.assert_allclose(y, c * gate / 6 * 1.5 + 0.25, rtol=1e-4, atol=1e-4)
    graph, shipped = from_onnx(model), dataclasses.replace(_profile("rk3588"), cores=1)
    rk3588 = _with(shipped, lut=[])
    separate = _compile(graph, rk3588)["kernels"]
    assert [(k["composite"], len(k["op_types"])) for k in separate] == \
        [(None, 1), ("HardSwish", 2 if form == "hardsigmoid" else 4 - (form == "no_clip")),
         (None, 1), (None, 1)]
    assert all(k["unit"] == "vector" for k in separate[1:])
    chained = _compile(graph, _with(rk3588, chains=True))["kernels"]
    assert [k["op_types"] for k in chained[2:]] == [["Mul", "Add"]]
    free = _compile(graph, _with(rk3588, epilogue=["Relu", "HardSwish"]))["kernels"]
    table = _compile(graph, shipped)["kernels"]
    for fused in (free, table):
        assert fused[0]["op_types"][0] == "Conv" and len(fused[0]["op_types"]) > 2
        assert [k["op_types"] for k in fused[1:]] == [["Mul"], ["Add"]]
    assert free[0]["cost"]["lut_cycles"] == 0
    assert table[0]["cost"]["lut_cycles"] == \
        math.ceil(16 * 32 * 32 / shipped.epilogue.lut_elements_per_cycle)


def test_an_add_of_two_then_clip_is_not_hardswish():
    kernels = _compile(from_onnx(_hardswish_model("not_hardswish")),
                       _profile("rk3588"))["kernels"]
    assert not any(k["composite"] for k in kernels)


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["rk3588", "rk3568", "edge_tpu", "ethos_u55_256", "nvdla_full"]),
       st.sampled_from(["clip_div", "no_clip", "hardsigmoid"]))
def test_running_each_elementwise_op_alone_never_costs_less(name, form):
    """One pass per op moves every intermediate through DRAM: never cheaper than the chain
    in one pass, on any profile."""
    graph = from_onnx(_hardswish_model(form))
    cost = {chains: sum(k["cost"]["total_cycles"] for k in
                        _compile(graph, _with(_profile(name), chains=chains))["kernels"])
            for chains in (True, False)}
    assert cost[False] > cost[True]


@pytest.mark.parametrize("model,hardware,overrides", [
    ("mobilenet_v2", "rk3588", {}),
    ("bert_encoder", "edge_tpu", {"placement": "optimal"}),
    ("resnet18", "ethos_u55_256", {"tiling": {"mode": "fixed", "tile_m": 16, "tile_k": 64}}),
])
def test_compiling_never_changes_the_graph(model, hardware, overrides):
    """The compile stage shares one graph among a sweep's points (stages/compile.py); that
    is only sound if compiling leaves it exactly as it was and the second plan is the
    first's."""
    import pickle

    graph = from_onnx(ZOO[model](seed=0, opset=17))
    before = pickle.dumps(graph)
    first = _compile(graph, _profile(hardware), **overrides)
    assert pickle.dumps(graph) == before
    assert json.dumps(_compile(graph, _profile(hardware), **overrides), sort_keys=True) \
        == json.dumps(first, sort_keys=True)


def test_the_plan_round_trips_through_its_types_and_names_a_bad_field(tmp_path):
    """compile/plan.json is the typed Plan's JSON, field for field; a field that is
    misspelt, missing or of the wrong type is named with its path, and docs/plan.md is
    what the types generate."""
    import copy

    from pipeline.compiler.plan import markdown, read_plan

    written = _compile(from_onnx(ZOO["resnet18"](seed=0, opset=17)), _profile("edge_tpu"))
    typed = Plan.from_json(written)
    assert typed.to_json() == written
    assert typed.kernels[3].cost.total_cycles == written["kernels"][3]["cost"]["total_cycles"]
    typo = copy.deepcopy(written)
    typo["kernels"][2]["cost"]["total_cylces"] = typo["kernels"][2]["cost"].pop("total_cycles")
    with pytest.raises(ValueError, match=r"plan\.kernels\[2\]\.cost: unknown field "
                                         r"'total_cylces'"):
        Plan.from_json(typo)
    wrong = copy.deepcopy(written)
    wrong["transfers"][0]["from"] = "conv_1"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(wrong))
    with pytest.raises(UserError, match=r"plan\.transfers\[0\]\.from: expected int"):
        read_plan(path)
    old = {**written, "version": "npuflow.plan/2"}
    with pytest.raises(ValueError, match="compile again"):
        Plan.from_json(old)
    assert (CONF.parent / "docs" / "plan.md").read_text() == markdown()


def _downsample_block(shortcut_first: bool) -> onnx.ModelProto:
    """A ResNet downsample block: a 3x3 main path and a 1x1 shortcut meet in an Add. The
    two listings are the same network; exporters differ in which conv they list first."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w0", (16, 8, 3, 3)), ("w1", (16, 16, 3, 3)), ("ws", (16, 8, 1, 1)))]
    main = [helper.make_node("Conv", ["x", "w0"], ["m0"], name="main0", pads=[1] * 4),
            helper.make_node("Relu", ["m0"], ["r0"], name="relu0"),
            helper.make_node("Conv", ["r0", "w1"], ["m1"], name="main1", pads=[1] * 4)]
    short = [helper.make_node("Conv", ["x", "ws"], ["s"], name="shortcut")]
    add = [helper.make_node("Add", ["m1", "s"], ["y"], name="add"),
           helper.make_node("Relu", ["y"], ["out"], name="relu_out")]
    nodes = short + main + add if shortcut_first else main + short + add
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16, 32, 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_residual_add_fuses_into_the_main_path_however_the_block_is_listed():
    """The residual Add rides the deeper branch's conv (the shortcut is the operand read
    in), whichever conv the file lists first: the same network gives the same kernels and
    the same cost on a profile whose arena is in DRAM, where the operand read in costs."""
    plans = [_compile(from_onnx(_downsample_block(first)), _profile("rk3588"))
             for first in (True, False)]
    fused = [{k["name"]: k["ops"] for k in plan["kernels"]} for plan in plans]
    assert fused[0] == fused[1] and "add" in fused[0]["main1"]
    totals = {sum(k["cost"]["total_cycles"] for k in plan["kernels"]) for plan in plans}
    assert len(totals) == 1


@pytest.mark.parametrize("model,hardware", [("mobilenet_v2", "ethos_u55_256"),
                                            ("bert_encoder", "rk3588")])
def test_a_plan_read_from_its_file_is_the_plan_compile_remembered(tmp_path, model, hardware):
    """read_plan serves a plan compile remembered by the file's bytes; a fresh parse of
    the same bytes is the same Plan, and other bytes are parsed, not served."""
    from pipeline.artifacts import write_json
    from pipeline.compiler import plan as plan_module

    written = _compile(from_onnx(ZOO[model](seed=0, opset=17)), _profile(hardware))
    built = Plan.from_json(written)
    path = tmp_path / "plan.json"
    write_json(path, written)
    plan_module.remember_plan(path, built)
    assert plan_module.read_plan(path) is built
    plan_module._READ.clear()
    assert plan_module.read_plan(path) == built  # the file's own parse
    other = dict(written, graph="renamed")
    write_json(path, other)
    assert plan_module.read_plan(path).graph == "renamed"
    path.write_text("{not json")
    with pytest.raises(UserError, match=r"plan\.json"):
        plan_module.read_plan(path)
