"""The mechanisms that make whole networks agree with boards and with Vela: DRAM latency
only where bytes move, depthwise in the MAC engine's channel mode, weights cached where
they fit, epilogue capabilities, int8 elementwise rescaling, pooling rules, multi-core
splits, and one cost per kernel from placement to simulate."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from onnx import helper, numpy_helper

from hardware.compression import entropy_bytes
from hardware.cost import (
    array_compute,
    auto_tiling,
    bytes_per_cycle,
    gemm_bytes_per_cycle,
    latency_cycles,
    npu_kernel_cost,
)
from hardware.depthwise import engine_cycles
from hardware.memory import OperandBytes, Tiling, gemm_traffic
from hardware.profile import DepthwiseMode, ProfileError, load_profile, profile_from_config
from hardware.systolic import compute_cycles
from ops.load import from_onnx
from ops.work import ARRAY, VECTOR, GemmShape, Work
from pipeline.compiler.costing import CostContext, core_shares, npu_cost
from pipeline.compiler.driver import compile_graph
from pipeline.compiler.plan import Plan
from pipeline.running.runner import run_pipeline
from pipeline.simulator.replay import FrameCosts, build
from pipeline.simulator.timeline import schedule
from pipeline.zoo import ZOO
from pipeline.zoo.builder import GraphBuilder
from tests.conftest import CONF, REPO, compose_config

COMPILE_CFG = OmegaConf.load(CONF / "compile" / "default.yaml")
MLPERF = REPO / "benchmarks" / "models" / "mlperf_tiny"
PUBLISHED = OmegaConf.load(REPO / "benchmarks" / "silicon" / "published.yaml")


def _profile(name: str):
    return load_profile(CONF / "hardware" / f"{name}.yaml")


def _compile(graph, profile, **overrides):
    return compile_graph(graph, profile, OmegaConf.merge(COMPILE_CFG, overrides), "int8")


@pytest.fixture(scope="module")
def resnet8_on_ethos(tmp_path_factory) -> dict:
    """MLPerf Tiny's trained ResNet-8, int8, compiled for the Ethos-U55 (run once)."""
    return _quantized_plan("pretrainedResnet", "ethos_u55_256",
                           tmp_path_factory.mktemp("resnet8"))


def _conv_work() -> Work:
    """A 64 -> 64 3x3 convolution at 80x80 as the array sees it (6400 x 576 x 64)."""
    g = GemmShape(6400, 576, 64)
    return Work(ARRAY, macs=g.macs, input_elems=g.m * 64, weight_elems=g.k * g.n,
                output_elems=g.m * g.n, gemm=g)


def _dw_work(channels=96, pixels=28 * 28, taps=9) -> Work:
    g = GemmShape(pixels, taps, 1, groups=channels)
    return Work(ARRAY, macs=g.macs, input_elems=channels * pixels, weight_elems=channels * taps,
                output_elems=channels * pixels, gemm=g)


# -- DRAM latency is paid only where bytes move --------------------------------------------

def test_operands_kept_in_sram_issue_no_bursts():
    g = GemmShape(3136, 576, 128)
    only_weights = gemm_traffic(g, Tiling(256, 32, 64),
                                OperandBytes(a=0, b=576 * 128, c=0, c_elems=3136 * 128))
    assert only_weights.a == only_weights.c == 0 and only_weights.streams == 1
    assert only_weights.bursts == math.ceil(576 / 64) * math.ceil(128 / 32) * \
        math.ceil(3136 / 256)  # weight tiles only, refetched per m-tile


def test_a_kernel_whose_operands_all_stay_on_chip_pays_no_dram_latency():
    slow = dataclasses.replace(_profile("edge_tpu"), dram=dataclasses.replace(
        _profile("edge_tpu").dram, latency_ns=1e6))  # 1 ms per burst
    for work, depthwise in ((_dw_work(), True), (_dw_work(), False)):
        cost = npu_kernel_cost(work, "int8", slow, a_in_dram=False, c_to_dram=False,
                               depthwise=depthwise, weight_bytes=0)
        assert cost.memory_cycles == 0 and cost.dram_bytes == 0
        assert cost.total_cycles < latency_cycles(slow)


def test_double_buffered_dma_exposes_one_latency_per_stream_not_per_tile():
    rk = _profile("rk3588")
    p = dataclasses.replace(rk, dma=dataclasses.replace(rk.dma, double_buffering=True))
    g = GemmShape(12544, 576, 128)
    work = Work(ARRAY, macs=g.macs, input_elems=g.m * g.k, weight_elems=g.k * g.n,
                output_elems=g.m * g.n, gemm=g)
    fine = npu_kernel_cost(work, "int8", p, tiling=Tiling(64, 32, 64))
    coarse = npu_kernel_cost(work, "int8", p, tiling=Tiling(12544, 128, 576))
    lat = latency_cycles(p)
    for cost in (fine, coarse):
        assert cost.memory_cycles == math.ceil(cost.dram_bytes / bytes_per_cycle(p) + 3 * lat)
    single = dataclasses.replace(p, dma=dataclasses.replace(p.dma, double_buffering=False))
    assert npu_kernel_cost(work, "int8", single, tiling=Tiling(64, 32, 64)).memory_cycles > \
        fine.memory_cycles + 100 * lat  # a single buffer waits for every burst


def _stem_conv_model(cin: int):
    w = numpy_helper.from_array(np.ones((16, cin, 3, 3), np.float32) * 0.01, "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="stem", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes, "stem", [helper.make_tensor_value_info("x", 1, [1, cin, 32, 32])],
        [helper.make_tensor_value_info("y", 1, [1, 16, 32, 32])], [w])
    return from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("name", ["rk3588", "edge_tpu", "ethos_u55_256"])
def test_a_graph_input_is_read_from_dram_at_the_size_the_host_wrote(name):
    """The array pads 3 image channels to the profile's alignment, but the image in DRAM
    (host memory, over the link on the Edge TPU) is the host's 3 channels."""
    p = dataclasses.replace(_profile(name), cores=1)
    assert p.channel_alignment > 3
    rgb = _compile(_stem_conv_model(3), p)["kernels"][0]
    padded = _compile(_stem_conv_model(p.channel_alignment), p)["kernels"][0]
    assert rgb["gemm"] == padded["gemm"]  # the same array work, weights and output ...
    assert padded["cost"]["compulsory_dram_bytes"] - rgb["cost"]["compulsory_dram_bytes"] \
        == (p.channel_alignment - 3) * 32 * 32  # ... but only 3 channels read
    assert rgb["cost"]["dram_bytes"] < padded["cost"]["dram_bytes"]


# -- depthwise in the MAC engine's channel-parallel mode ------------------------------------

@pytest.mark.parametrize(("profile", "block_width", "block_height"),
                         [("ethos_u55_256", 2, 2), ("ethos_u55_128", 2, 1),
                          ("ethos_u55_64", 1, 1), ("ethos_u65_256", 2, 2)])
@pytest.mark.parametrize(("channels", "height", "width", "kernel"),
                         [(8, 16, 16, 3), (96, 56, 56, 3), (40, 7, 9, 5), (64, 25, 5, 3),
                          (3, 1, 1, 1)])
def test_ethos_depthwise_engine_is_velas_micro_block_formula(
        profile, block_width, block_height, channels, height, width, kernel):
    """Vela 5.2.0 npu_performance._estimate_conv_cycles for ConvolutionDepthWise (output
    micro-blocks of the accelerator's ``ofm_ublock``: 2x2x8 on the U55-256 and U65-256,
    2x1x8 on the U55-128, 1x1x8 on the U55-64; per step of 4 taps max(cycles_wb = 32,
    4 cycles per micro-block, 8 for 16-bit activations)), written out again; odd maps
    (DS-CNN's 25x5) pay for partial micro-blocks, a 1x1 map the write-back."""
    xy_blocks = math.ceil(height / block_height) * math.ceil(width / block_width)
    steps = math.ceil(kernel * kernel / 4) * math.ceil(channels / 8)
    mode = _profile(profile).mac_array.depthwise
    g = GemmShape(height * width, kernel * kernel, 1, groups=channels, width=width)
    assert engine_cycles(g, mode, 1.0) == steps * max(32, 4 * xy_blocks)
    assert engine_cycles(g, mode, 0.5) == steps * max(32, 8 * xy_blocks)  # int16


@pytest.mark.parametrize("name", ["rk3588", "edge_tpu", "ethos_u55_256"])
def test_depthwise_engine_beats_a_gemm_per_channel_and_stays_on_the_array(name):
    p = _profile(name)
    work = _dw_work()
    engine = npu_kernel_cost(work, "int8", p, depthwise=True)
    per_channel = npu_kernel_cost(work, "int8", dataclasses.replace(
        p, mac_array=dataclasses.replace(p.mac_array, depthwise=DepthwiseMode("array"))),
        depthwise=True)
    assert engine.unit == "array"  # the engine is the MAC array in another mode
    assert engine.compute_cycles < per_channel.compute_cycles
    peak = p.mac_array.rows * p.mac_array.cols
    assert engine.total_cycles >= work.macs / peak


def test_a_depthwise_engine_wider_than_the_array_is_refused():
    raw = OmegaConf.load(CONF / "hardware" / "ethos_u55_256.yaml")
    raw.mac_array.depthwise.channels = 64  # 64 x 8 x 4 taps / 4 cycles = 512 > 256 MACs
    raw.mac_array.depthwise.pixels = 8
    with pytest.raises(ProfileError, match=r"mac_array\.depthwise"):
        profile_from_config(raw)


# -- the output stage: how fast results leave the array ------------------------------------

@pytest.mark.parametrize(("pixels", "cin", "cout", "rknn"),
                         [(240 * 240, 16, 32, 230_400), (120 * 120, 12, 96, 172_800),
                          (120 * 120, 48, 12, 57_600), (480 * 480, 24, 1, 921_600)])
def test_rk3588_thin_layers_drain_at_rknns_output_stage_rate(pixels, cin, cout, rknn):
    """RKNN-Toolkit2 2.5.0's rk3588 NPU-cycle estimates for PP-OCRv4 det layers (1x1
    convolutions and the last 2x2 / 2 ConvTranspose, which ops/conv.py lowers to one tap per
    output pixel): every one is ceil(Cout / 32) x 4 cycles per pixel, far above the array's
    own time."""
    p = _profile("rk3588")
    assert array_compute(GemmShape(pixels, cin, cout), p, "int8").cycles == rknn


@pytest.mark.parametrize(("channels", "side", "kernel", "rknn"),
                         [(16, 240, 3, 518_400), (48, 120, 3, 129_600), (96, 60, 3, 64_800)])
def test_rk3588_depthwise_engine_is_rknns_estimate(channels, side, kernel, rknn):
    """RKNN-Toolkit2 2.5.0 (PP-OCRv4 det, rk3588): ceil(C / 64) x taps cycles per pixel."""
    mode = _profile("rk3588").mac_array.depthwise
    g = GemmShape(side * side, kernel * kernel, 1, groups=channels, width=side)
    assert engine_cycles(g, mode, 1.0) == rknn


@pytest.mark.parametrize(("name", "precision", "slowdown"),
                         [("rk3588", "fp16", 1), ("ethos_u55_256", "int16", 2)])
def test_a_depthwise_engine_keeps_its_rate_only_at_the_precisions_it_lists(name, precision,
                                                                           slowdown):
    """RKNN's rk3588 estimate runs fp16 depthwise at the int8 rate though the array halves
    fp16 (``depthwise.full_rate``); Vela's Ethos-U model doubles int16 depthwise."""
    p = _profile(name)
    work = _dw_work()
    int8 = npu_kernel_cost(work, "int8", p, depthwise=True).compute_cycles
    other = npu_kernel_cost(work, precision, p, depthwise=True).compute_cycles
    assert other == slowdown * int8
    assert getattr(p.mac_array.throughput, precision) < p.mac_array.throughput.int8


@pytest.mark.parametrize("name", ["rk3588", "edge_tpu", "ethos_u55_256"])
def test_the_output_stage_never_lowers_the_arrays_time_and_spares_deep_layers(name):
    p = _profile(name)
    deep, thin = GemmShape(15 * 15, 384, 384), GemmShape(240 * 240, 16, 32)
    arr = p.mac_array
    for g in (deep, thin):
        assert array_compute(g, p, "int8").cycles >= compute_cycles(
            g, arr.rows, arr.cols, arr.dataflow, arr.throughput.int8).cycles
    assert array_compute(deep, p, "int8") == compute_cycles(
        deep, arr.rows, arr.cols, arr.dataflow, arr.throughput.int8)
    off = dataclasses.replace(p, mac_array=dataclasses.replace(arr, output_per_cycle=0.0))
    assert array_compute(thin, off, "int8") == compute_cycles(
        thin, arr.rows, arr.cols, arr.dataflow, arr.throughput.int8)


def _one_conv(cin: int, cout: int, side: int, k: int, stride: int = 1, pad: int | None = None):
    g = GraphBuilder("one_conv", 0, 17)
    g.output(g.conv(g.input("x", (1, cin, side, side)), cout, k, stride, pad))
    return from_onnx(g.build())


@pytest.mark.parametrize(("cin", "cout", "side", "k", "stride", "rknn"),
                         [(3, 32, 640, 6, 2, 3_686_400), (16, 16, 160, 3, 1, 230_400),
                          (48, 96, 160, 3, 1, 1_382_400), (64, 64, 80, 3, 1, 230_400)])
def test_rk3588_reads_every_kernel_tap_as_a_whole_channel_atom(cin, cout, side, k, stride, rknn):
    """RKNN-Toolkit2 2.5.0's rk3588 estimates (yolov5s' 6x6 stem, yolov8n's 16-channel and
    yolov5m's 48-channel 3x3 layers, a 64-channel one): taps x ceil(Cin / 32) x ceil(Cout /
    32) cycles per output pixel. The compiled kernel costs that plus the systolic fill and
    drain of each fold (SCALE-Sim's, 2% at most here), while an array without channel atoms
    (im2col) packs the taps and is faster on thin inputs; the tensors moved are the same."""
    p = dataclasses.replace(_profile("rk3588"), cores=1)
    graph = _one_conv(cin, cout, side, k, stride, pad=2 if k == 6 else None)
    atoms = _compile(graph, p)["kernels"][0]["cost"]
    im2col = _compile(graph, dataclasses.replace(
        p, mac_array=dataclasses.replace(p.mac_array, tap_channels=0)))["kernels"][0]["cost"]
    assert atoms["compute_cycles"] == pytest.approx(rknn, rel=0.02)
    assert atoms["compute_cycles"] >= rknn
    assert (im2col["compute_cycles"] < atoms["compute_cycles"]) == (cin % 32 != 0)
    assert im2col["compulsory_dram_bytes"] == atoms["compulsory_dram_bytes"]


# -- weights: cached on chip where they fit, streamed (compressed) where not ----------------

def test_edge_tpu_caches_parameters_that_fit_and_streams_the_rest_in_order():
    p = _profile("edge_tpu")
    small = _compile(from_onnx(ZOO["mobilenet_v2"](seed=0, opset=17)), p)["memory"]
    assert small["streamed_weight_bytes"] == 0
    assert small["cached_weight_bytes"] == small["weight_bytes"] > 3_000_000
    big = _compile(from_onnx(ZOO["vgg16"](seed=0, opset=17)), p)
    mem = big["memory"]
    assert 0 < mem["cached_weight_bytes"] <= p.weights.cache_kb * 1024
    assert mem["cached_weight_bytes"] + mem["streamed_weight_bytes"] == mem["weight_bytes"]
    streamed = [k["cost"]["weight_dram_bytes"] > 0 for k in big["kernels"]
                if k["target"] == "npu" and k["macs"]]
    assert streamed == sorted(streamed)  # a cached prefix, then the streamed rest


def test_weight_policy_what_ifs():
    """(An unknown policy is refused at the door: tests/test_bad_inputs.py.)"""
    graph = from_onnx(ZOO["mobilenet_v2"](seed=0, opset=17))
    tpu = _profile("edge_tpu")
    streamed = _compile(graph, tpu, memory={"weights": "streamed"})
    assert streamed["memory"]["cached_weight_bytes"] == 0
    resident = _compile(graph, _profile("rk3588"), memory={"weights": "resident"})
    assert resident["memory"]["streamed_weight_bytes"] == 0
    assert streamed["placement"]["greedy_cycles"] > _compile(graph, tpu)["placement"][
        "greedy_cycles"]  # streaming 3.5 MB over the link costs


def test_weights_are_streamed_every_inference_without_a_cache():
    plan = _compile(from_onnx(ZOO["mobilenet_v2"](seed=0, opset=17)), _profile("rk3588"))
    mem = plan["memory"]
    assert mem["cached_weight_bytes"] == 0
    assert mem["streamed_weight_bytes"] == mem["weight_bytes"]
    assert mem["weight_dram_traffic_bytes"] >= mem["weight_bytes"]  # every byte, every time


def test_entropy_coding_shrinks_peaked_weights_and_never_grows_a_stream():
    rng = np.random.default_rng(0)
    uniform = rng.integers(-128, 128, 100_000).astype(np.int8)
    peaked = np.clip(np.round(rng.normal(0, 4, 100_000)), -128, 127).astype(np.int8)
    assert entropy_bytes(uniform) == pytest.approx(uniform.nbytes, rel=0.01)
    assert entropy_bytes(uniform) <= uniform.nbytes
    gaussian_bits = 0.5 * math.log2(2 * math.pi * math.e * 4**2)  # ~4.05 bits per weight
    assert entropy_bytes(peaked) == pytest.approx(gaussian_bits * peaked.size / 8, rel=0.02)
    assert entropy_bytes(np.zeros(1000, np.float32)) == 4000  # float weights: raw


def test_trained_int8_weights_stream_compressed_on_ethos(resnet8_on_ethos, tmp_path):
    packed = resnet8_on_ethos["memory"]
    raw = _quantized_plan("pretrainedResnet", "ethos_u55_256", tmp_path,
                          "hardware.weights.compression=none")["memory"]
    assert packed["cached_weight_bytes"] == 0
    assert packed["streamed_weight_bytes"] == packed["weight_bytes"]
    assert 0.5 * raw["weight_dram_traffic_bytes"] < packed["weight_dram_traffic_bytes"] \
        < raw["weight_dram_traffic_bytes"]


# -- what the output stage does for free ------------------------------------------------

def _conv_act_model(act: str):
    w = numpy_helper.from_array(np.ones((16, 16, 3, 3), np.float32) * 0.01, "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    if act == "silu":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
                  helper.make_node("Mul", ["c", "s"], ["y"], name="mul")]
    else:
        nodes += [helper.make_node("Relu", ["c"], ["y"], name="relu")]
    shape = [1, 16, 32, 32]
    graph = helper.make_graph(nodes, act, [helper.make_tensor_value_info("x", 1, shape)],
                              [helper.make_tensor_value_info("y", 1, shape)], [w])
    return from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _epilogue(profile, **changes):
    return dataclasses.replace(profile, epilogue=dataclasses.replace(profile.epilogue,
                                                                     **changes))


def test_silu_costs_a_pass_of_its_own_where_the_epilogue_lacks_it():
    rk = dataclasses.replace(_epilogue(_profile("rk3588"), lut_activations=[]), cores=1)
    relu = _compile(_conv_act_model("relu"), rk)
    silu = _compile(_conv_act_model("silu"), rk)
    assert [k["op_types"] for k in relu["kernels"]] == [["Conv", "Relu"]]
    assert len(silu["kernels"]) > 1 and silu["kernels"][0]["op_types"] == ["Conv"]
    assert silu["placement"]["greedy_cycles"] > relu["placement"]["greedy_cycles"]
    free = _compile(_conv_act_model("silu"), _epilogue(
        rk, activations=[*rk.epilogue.activations, "Silu"]))
    assert [k["op_types"] for k in free["kernels"]] == [["Conv", "Sigmoid", "Mul"]]
    assert free["placement"]["greedy_cycles"] == relu["placement"]["greedy_cycles"]


@pytest.mark.parametrize("name", ["rk3588", "rk3568"])
def test_a_lut_activation_fuses_and_costs_its_outputs_at_the_tables_rate(name):
    """RKNN compiles Conv + SiLU as one ConvExSwish layer; the board pays for the table:
    the fused kernel costs the ReLU convolution plus ceil(outputs / rate), one cost from
    placement to the plan."""
    rk = dataclasses.replace(_profile(name), cores=1)  # SiLU's ops do not split
    assert "Silu" in rk.epilogue.lut_activations
    relu = _compile(_conv_act_model("relu"), rk)
    silu = _compile(_conv_act_model("silu"), rk)
    assert [k["op_types"] for k in silu["kernels"]] == [["Conv", "Sigmoid", "Mul"]]
    table = math.ceil(16 * 32 * 32 / rk.epilogue.lut_elements_per_cycle)
    cost, base = silu["kernels"][0]["cost"], relu["kernels"][0]["cost"]
    assert cost["compute_cycles"] == base["compute_cycles"] + table
    assert cost["total_cycles"] == base["total_cycles"] + table
    assert silu["placement"]["greedy_cycles"] == relu["placement"]["greedy_cycles"] + table


@pytest.mark.parametrize("rate", [100.0, 0.05])
def test_an_overlapped_table_shows_only_what_it_takes_beyond_the_array(rate):
    """rk3576: the table works on results as they leave the array (epilogue.lut_overlap),
    so a fused SiLU costs max(array, table), not their sum: nothing where the array is the
    slower (a fast table), the excess where the table is (a slow one); the plan's
    placement and its kernels carry the same figure."""
    rk = _epilogue(dataclasses.replace(_profile("rk3576"), cores=1),
                   lut_elements_per_cycle=rate)
    assert rk.epilogue.lut_overlap and "Silu" in rk.epilogue.lut_activations
    relu = _compile(_conv_act_model("relu"), rk)["kernels"][0]["cost"]
    plan = _compile(_conv_act_model("silu"), rk)
    silu = plan["kernels"][0]["cost"]
    table = math.ceil(16 * 32 * 32 / rate)
    extra = max(0, table - relu["compute_cycles"])
    assert silu["compute_cycles"] == max(relu["compute_cycles"], table)
    assert silu["lut_cycles"] == extra
    assert silu["total_cycles"] == max(relu["total_cycles"], silu["compute_cycles"]
                                       + silu["overhead_cycles"])
    assert (extra == 0) == (rate == 100.0)  # both sides of the max are exercised
    added = _compile(_conv_act_model("silu"), _epilogue(rk, lut_overlap=False))
    assert added["kernels"][0]["cost"]["total_cycles"] == relu["total_cycles"] + table


def _softmax_model(shape=(1, 2, 40, 40)):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1)]
    graph = helper.make_graph(nodes, "softmax", [helper.make_tensor_value_info("x", 1, shape)],
                              [helper.make_tensor_value_info("y", 1, shape)])
    return from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_a_host_softmax_pays_each_exp_its_runtime_evaluates_one_at_a_time():
    """rk3568: RKNN runs Softmax on the A55 host (exSoftmax13), whose fallback kernel takes
    host.transcendental_ns per element beyond the vectorised arithmetic; the NPU's ReLU
    pays nothing of it, and the key at 0 is the roofline alone."""
    rk = _profile("rk3568")
    assert rk.host.transcendental_ns > 0 and "Softmax" not in rk.ops
    zero = dataclasses.replace(rk, host=dataclasses.replace(rk.host, transcendental_ns=0.0))
    with_key, without = (
        {k["name"]: k for k in _compile(_softmax_model(), p)["kernels"]} for p in (rk, zero))
    assert with_key["softmax"]["target"] == "cpu" and with_key["relu"]["target"] == "npu"
    assert with_key["relu"]["cost"] == without["relu"]["cost"]
    exps = 2 * 40 * 40 * rk.host.transcendental_ns * 1e-9 * rk.frequency_mhz * 1e6
    host, roofline = with_key["softmax"]["cost"], without["softmax"]["cost"]
    assert host["compute_cycles"] == pytest.approx(roofline["compute_cycles"] + exps, abs=2)
    assert host["total_cycles"] == max(host["compute_cycles"], roofline["memory_cycles"])
    assert host["total_cycles"] > 10 * roofline["total_cycles"]  # the exps dominate


def test_the_rk3562_runs_softmax_on_its_npu_where_the_rk3568_falls_back_to_its_host():
    """RKNN-Toolkit2's rk3562 builds keep Softmax on the NPU (exSoftmax13, exSDPAttention)
    where its rk3568 builds place it on the CPU: the rk3562 profile, which derives from the
    rk3568's, adds it back, and its host's time per exp is then never paid."""
    placed = {name: {k["name"]: k for k in _compile(_softmax_model(), _profile(name))[
        "kernels"]} for name in ("rk3562", "rk3568")}
    assert placed["rk3568"]["softmax"]["target"] == "cpu"
    assert placed["rk3562"]["softmax"]["target"] == "npu"
    assert placed["rk3562"]["softmax"]["cost"]["unit"] != "host"


def test_vector_passes_retire_at_most_the_profiles_output_bytes_per_cycle():
    """A standalone elementwise pass on the RKNPU runs at the rate its output leaves it,
    whatever its operations per element; a 16-bit element leaves at an int8 element's rate
    where the cap counts elements (the RKNPU's, NVDLA's SDP), at half of it where it counts
    bytes; the DRAM traffic is the elements' bytes either way."""
    rk = _profile("rk3588")
    rate = rk.vector_unit.output_bytes_per_cycle
    assert rate > 0 and rk.vector_unit.output_counts == "element"
    by_byte = dataclasses.replace(rk, vector_unit=dataclasses.replace(
        rk.vector_unit, output_counts="byte"))
    for op_ops in (3, 6):  # an int8 Mul and Add (ops per element)
        add = Work(VECTOR, input_elems=2 * 409600, output_elems=409600,
                   vector_ops=op_ops * 409600)
        int8, fp16 = (npu_kernel_cost(add, p, rk) for p in ("int8", "fp16"))
        assert int8.compute_cycles == fp16.compute_cycles == math.ceil(409600 / rate)
        assert fp16.dram_bytes == 2 * int8.dram_bytes
        assert npu_kernel_cost(add, "fp16", by_byte).compute_cycles == \
            math.ceil(2 * 409600 / rate)
        assert npu_kernel_cost(add, "int8", by_byte).compute_cycles == int8.compute_cycles
    uncapped = dataclasses.replace(rk, vector_unit=dataclasses.replace(
        rk.vector_unit, output_bytes_per_cycle=0.0))
    assert npu_kernel_cost(add, "int8", uncapped).compute_cycles == \
        math.ceil(6 * 409600 / rk.vector_unit.lanes)


def test_residual_add_is_an_int8_elementwise_pass_where_the_output_stage_cannot_add(
        resnet8_on_ethos):
    plan = resnet8_on_ethos
    adds = [k for k in plan["kernels"] if k["op_types"][0] == "Add"]
    assert len(adds) == 3 and all(k["unit"] == "vector" for k in adds)
    # 6 operations per int8 element on 8 lanes, for 32x32x16, 16x16x32 and 8x8x64 outputs;
    # Vela 5.2.0 reports the same three Adds at 12288, 6144 and 3072 cycles
    assert sorted(k["cost"]["compute_cycles"] for k in adds) == [3072, 6144, 12288]
    rk_plan = _compile(from_onnx(ZOO["resnet18"](seed=0, opset=17)), _profile("rk3588"))
    assert not [k for k in rk_plan["kernels"] if k["op_types"][0] == "Add"]  # fused


def test_unpadded_large_average_pool_stays_on_the_ethos_npu(resnet8_on_ethos):
    plan = resnet8_on_ethos
    pool = next(k for k in plan["kernels"] if k["op_types"] == ["AveragePool"])
    assert pool["target"] == "npu"
    padded = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[9, 9],
                              pads=[4, 4, 4, 4], name="pool")
    graph = helper.make_graph([padded], "p", [helper.make_tensor_value_info("x", 1,
                                                                             [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", 1, [1, 8, 16, 16])])
    g = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    kernel = _compile(g, _profile("ethos_u55_256"))["kernels"][0]
    assert kernel["target"] == "cpu"
    assert any(c["rule"] == "padded_kernel" and not c["passed"] for c in kernel["checks"])


# -- multi-core -----------------------------------------------------------------------

@pytest.mark.parametrize("model", ["mobilenet_v2", "resnet18", "yolov5n"])
def test_more_cores_never_slow_a_network(model):
    graph = from_onnx(ZOO[model](seed=0, opset=17))
    rk = _profile("rk3588")
    cycles = [_compile(graph, dataclasses.replace(rk, cores=n))["placement"]["greedy_cycles"]
              for n in (1, 2, 3)]
    assert cycles[0] >= cycles[1] >= cycles[2]
    assert cycles[2] < cycles[0]  # convolutions do split


def test_only_the_profiles_multicore_ops_split():
    """A SiLU pass of its own stays on one core (Sigmoid and Mul are not among RKNPU's
    multi-core ops); fused into the convolution it runs in every core's output stage."""
    graph = _conv_act_model("silu")
    rk = dataclasses.replace(_profile("rk3588"), cores=3)
    apart = _compile(graph, _epilogue(rk, lut_activations=[]))
    by_op = {k["op_types"][0]: k["cores"] for k in apart["kernels"]}
    assert by_op["Conv"] == 3 and by_op.get("Sigmoid", by_op.get("Mul")) == 1
    fused = _compile(graph, rk)["kernels"]
    assert [(k["op_types"], k["cores"]) for k in fused] == [(["Conv", "Sigmoid", "Mul"], 3)]


def _buffering(p, double: bool):
    return dataclasses.replace(p, dma=dataclasses.replace(p.dma, double_buffering=double))


def test_rknpu_loads_every_layers_operands_then_computes_unless_its_dma_is_double_buffered():
    """Board time is RKNN's DDR + NPU cycles summed per layer on the RK3588 and RK3566/68
    (profiles' based_on): the array, the depthwise engine and a standalone vector pass add
    their memory time to their compute; double-buffered, each overlaps the two."""
    rk = _profile("rk3588")
    assert not rk.dma.double_buffering and not _profile("rk3568").dma.double_buffering
    conv = _conv_work()
    sigmoid = Work(VECTOR, macs=0, input_elems=409600, weight_elems=0,
                   output_elems=409600, vector_ops=4 * 409600)
    for work, depthwise in ((conv, False), (_dw_work(), True), (sigmoid, False)):
        single = npu_kernel_cost(work, "int8", rk, depthwise=depthwise)
        double = npu_kernel_cost(work, "int8", _buffering(rk, True), depthwise=depthwise)
        assert single.total_cycles >= single.compute_cycles + single.memory_cycles
        assert double.total_cycles < single.total_cycles
        assert double.total_cycles - double.overhead_cycles < \
            double.compute_cycles + double.memory_cycles


def test_the_rk3562_overlaps_a_convolutions_load_with_its_compute_but_not_its_table():
    """The RK3562's boards take less than RKNN's DDR + NPU summed where the RK3566/68's take
    more (rk3562.yaml's based_on): its DMA overlaps the array's compute like the RK3576's,
    while its lookup table still adds its time after the array's, as the RK3566/68's does."""
    conv = _conv_work()
    cost = {name: npu_kernel_cost(conv, "int8", _profile(name)) for name in ("rk3562", "rk3568")}
    both = {name: (c.compute_cycles, c.memory_cycles) for name, c in cost.items()}
    run = {name: c.total_cycles - c.overhead_cycles for name, c in cost.items()}
    assert max(both["rk3562"]) <= run["rk3562"] < sum(both["rk3562"])  # a pipeline's fill
    assert run["rk3568"] >= sum(both["rk3568"])
    assert cost["rk3562"].compute_cycles == cost["rk3568"].compute_cycles  # the same array
    assert not _profile("rk3562").epilogue.lut_overlap


@given(m=st.integers(64, 20000), k=st.integers(16, 2304), n=st.integers(16, 512),
       cores=st.integers(2, 4), bw=st.sampled_from([2.0, 8.0, 17.0, 64.0]))
@example(m=64, k=16, n=81, cores=4, bw=2.0)  # a core's 16 rows stream, the whole 64 tile
@settings(max_examples=40, deadline=None)
def test_single_buffered_cores_share_the_port_by_the_asymptotic_bound(m, k, n, cores, bw):
    """A split kernel on single-buffered cores takes max(one core alone, the port busy
    with all cores' bytes): never less than all bytes / bandwidth or its share of the MACs
    / peak, never more than every core fetching in lockstep, never slower than one core."""
    one = dataclasses.replace(_profile("rk3588"), cores=1,
                              dram=dataclasses.replace(_profile("rk3588").dram,
                                                       bandwidth_gbps=bw))
    many = dataclasses.replace(one, cores=cores)
    g = GemmShape(m, k, n)
    work = Work(ARRAY, macs=g.macs, input_elems=g.m * g.k, weight_elems=g.k * g.n,
                output_elems=g.m * g.n, gemm=g)
    ctx = CostContext()
    alone, _, _ = npu_cost(work, "k", ["Conv"], "int8", one, ctx, False)
    split, _, used = npu_cost(work, "k", ["Conv"], "int8", many, ctx, False)
    assert split.total_cycles <= alone.total_cycles
    if used == 1:
        return
    # a matrix-vector product's bytes move at the profile's stream rate, others' at its tile
    # rate; a core's share of rows may be one (Hypothesis found m=64, k=16, n=81 on four
    # cores: 16 rows a core stream where the whole 64 tile)
    fastest_rate = max(gemm_bytes_per_cycle(s.gemm.m, many)
                       for s in core_shares(work, cores, False))
    assert split.total_cycles >= split.dram_bytes / fastest_rate
    assert split.total_cycles >= work.macs / (cores * 1024)
    port = _shared_port(many)
    lockstep = [npu_kernel_cost(share, "int8", port, auto_tiling(share, "int8", port).tiling)
                for share in core_shares(work, cores, False)]
    fastest = min(lockstep, key=lambda c: c.total_cycles)
    # out of step is faster than lockstep, unless the port itself is the bound: every
    # core's bytes plus the dispatch (Hypothesis found m=64, k=16, n=16 on four cores)
    assert split.total_cycles < fastest.total_cycles or \
        split.total_cycles == fastest.memory_cycles + fastest.overhead_cycles


def _shared_port(p):
    return dataclasses.replace(p, dram=dataclasses.replace(
        p.dram, bandwidth_gbps=p.dram.bandwidth_gbps / p.cores,
        stream_gbps=p.dram.stream_gbps / p.cores))


# -- one cost per kernel --------------------------------------------------------------------

@pytest.mark.parametrize(("model", "profile"), [("mobilenet_v2", "edge_tpu"),
                                                 ("resnet18", "ethos_u55_256"),
                                                 ("yolov5n", "rk3588")])
def test_placement_estimate_is_the_plans_cost_and_bounds_the_simulated_latency(model, profile):
    p = _profile(profile)
    plan = _compile(from_onnx(ZOO[model](seed=0, opset=17)), p)
    serial = sum(k["cost"]["total_cycles"] for k in plan["kernels"]) + \
        sum(t["cycles"] for t in plan["transfers"])
    assert plan["placement"]["greedy_cycles"] == plan["placement"]["optimal_cycles"] == serial
    makespan = schedule(build(Plan.from_json(plan), p, 1, 1, FrameCosts(0, 0)))
    assert 0.5 * serial <= makespan <= serial


# -- whole networks against Arm's Vela ------------------------------------------------------

def _quantized_plan(stem: str, profile: str, tmp_path: Path, *extra: str) -> dict:
    cfg = compose_config(*extra, "model=onnx", f"model.path={MLPERF / (stem + '.onnx')}",
                         f"hardware={profile}", "quant=int8", "data.calibration_size=4",
                         "data.eval_size=4", "quant.analysis.layers=false",
                         f"run.cache_dir={tmp_path / 'cache'}")
    out = tmp_path / f"{stem}{len(extra)}"
    run_pipeline(cfg, out)
    return json.loads((out / "compile" / "plan.json").read_text())


@pytest.mark.parametrize("pair", [p for p in PUBLISHED.pairs if p.source == "vela"],
                         ids=lambda p: p.network)
def test_mlperf_tiny_cycles_within_1_5x_of_vela(pair, tmp_path):
    cfg = compose_config("model=tflite", f"model.path={MLPERF.parent / pair.tflite_file}",
                         *pair.overrides, "data.calibration_size=4", "data.eval_size=4",
                         "quant.analysis.layers=false", f"run.cache_dir={tmp_path}")
    metrics = run_pipeline(cfg, tmp_path / "run")
    assert 1 / 1.5 <= metrics["cycles_excluding_io"] / pair.cycles <= 1.5
    assert metrics["cpu_ops"] == 0  # Vela keeps every op of both networks on the NPU


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 512), st.integers(1, 64), st.sampled_from([1, 4, 9, 25]),
       st.sampled_from(["rk3588", "edge_tpu", "ethos_u55_256"]), st.floats(0.05, 64))
def test_depthwise_never_beats_peak_or_bandwidth(channels, side, taps, name, bw):
    p = _profile(name)
    p = dataclasses.replace(p, dram=dataclasses.replace(p.dram, bandwidth_gbps=bw))
    work = _dw_work(channels, side * side, taps)
    cost = npu_kernel_cost(work, "int8", p, depthwise=True)
    assert cost.total_cycles >= work.macs / (p.mac_array.rows * p.mac_array.cols)
    assert cost.total_cycles >= cost.compulsory_dram_bytes / bytes_per_cycle(p)
