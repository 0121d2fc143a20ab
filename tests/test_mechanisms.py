"""The mechanisms held-out networks exposed, each checked against an independent form of
the same work: Vela's zero-dilated kernel for a wide dilation, an explicit whole-map
depthwise convolution for a spatial mean, Vela's write-back floor by its own formula,
in-place concatenation, the Shared_Sram arena; the rk3576 profile against RKNN-Toolkit2's
own estimate of its probes; and the books (fit and check pairs) the bands come from."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf
from onnx import TensorProto, helper, numpy_helper

from hardware.depthwise import engine_cycles
from hardware.profile import load_profile
from ops.graph import from_onnx
from ops.work import GemmShape
from pipeline.compiler.driver import compile_graph
from tests.conftest import CONF, REPO
from tests.conftest import run_inprocess as npuflow

COMPILE = OmegaConf.load(CONF / "compile" / "default.yaml")
PUBLISHED = yaml.safe_load((REPO / "benchmarks" / "silicon" / "published.yaml").read_text())


def _profile(name: str):
    return load_profile(CONF / "hardware" / f"{name}.yaml")


def _int8(nodes: list, x_shape: list[int], y_name: str, inits: list) -> object:
    """A QDQ int8 graph around ``nodes`` (every activation and weight quantized), as the
    compiler sees a quantized model."""
    import onnx
    from onnx import shape_inference

    graph = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, x_shape)], [helper.make_tensor_value_info(
            y_name, TensorProto.FLOAT, None)], inits)
    model = shape_inference.infer_shapes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]))
    onnx.checker.check_model(model)
    return from_onnx(model)


def _plan(graph, profile) -> dict:
    return compile_graph(graph, profile, COMPILE, "int8", "int8")


def _conv(kernel: int, dilation: int, channels: int = 16, side: int = 32) -> object:
    w = numpy_helper.from_array(np.ones((channels, channels, kernel, kernel), np.float32), "w")
    pad = (kernel - 1) * dilation // 2
    return _int8([helper.make_node("Conv", ["x", "w"], ["y"], name="conv",
                                   dilations=[dilation, dilation], pads=[pad] * 4)],
                 [1, channels, side, side], "y", [w])


def test_a_wide_dilation_runs_as_vela_s_zero_dilated_kernel():
    """3x3 at dilation 4 is computed as 5x5 at hardware dilation 2 (Vela's
    fixup_dilation_gt2): the same array cycles as that convolution written out, on the NPU
    where the old dilation_max: 2 rule sent it to the CPU."""
    profile = _profile("ethos_u55_256")
    dilated = _plan(_conv(3, 4), profile)["kernels"][0]
    written_out = _plan(_conv(5, 2), profile)["kernels"][0]
    assert dilated["target"] == "npu"
    assert dilated["cost"]["compute_cycles"] == written_out["cost"]["compute_cycles"]
    assert dilated["macs"] * 25 == written_out["macs"] * 9  # useful MACs stay 9 taps'
    huge = _plan(_conv(3, 40), profile)["kernels"][0]  # dilated height 81 > Vela's 64
    assert huge["target"] == "cpu"


def test_the_depthwise_write_back_floor_is_vela_s_formula():
    """Vela: per kernel step of 4 taps and 8 channels, max(cycles_wb = 32, 4 x micro-blocks)
    cycles; a 2x2 output map (one micro-block) pays 32, not 4."""
    mode = _profile("ethos_u55_256").mac_array.depthwise
    tiny = GemmShape(m=4, k=9, n=1, groups=16, width=2)  # 2x2 output, 3x3 taps, 16 channels
    assert engine_cycles(tiny, mode, 1.0) == 2 * math.ceil(9 / 4) * 32
    big = GemmShape(m=32 * 32, k=9, n=1, groups=16, width=32)
    assert engine_cycles(big, mode, 1.0) == 2 * math.ceil(9 / 4) * 4 * 16 * 16


def test_a_spatial_mean_costs_the_whole_map_depthwise_convolution():
    """Vela runs MEAN over H, W as a depthwise convolution whose kernel is the map; npuflow
    the same: equal compute cycles to that convolution written out (valid, 1x1 output)."""
    profile = _profile("ethos_u55_256")
    mean = _int8([helper.make_node("ReduceMean", ["x"], ["y"], name="mean", axes=[2, 3])],
                 [1, 24, 12, 12], "y", [])
    w = numpy_helper.from_array(np.ones((24, 1, 12, 12), np.float32), "w")
    conv = _int8([helper.make_node("Conv", ["x", "w"], ["y"], name="dw", group=24)],
                 [1, 24, 12, 12], "y", [w])
    got = _plan(mean, profile)["kernels"][0]
    want = _plan(conv, profile)["kernels"][0]
    assert got["target"] == "npu" and got["cost"]["unit"] == want["cost"]["unit"]
    assert got["cost"]["compute_cycles"] == want["cost"]["compute_cycles"]
    rk = _plan(mean, _profile("rk3588"))["kernels"][0]  # RKNN: a vector pass
    assert rk["cost"]["unit"] != want["cost"]["unit"]


def _concat_net() -> object:
    w = numpy_helper.from_array(np.ones((8, 8, 1, 1), np.float32), "w")
    w2 = numpy_helper.from_array(np.ones((8, 16, 1, 1), np.float32), "w2")
    return _int8([helper.make_node("Conv", ["x", "w"], ["a"], name="a"),
                  helper.make_node("Conv", ["x", "w"], ["b"], name="b"),
                  helper.make_node("Concat", ["a", "b"], ["c"], name="cat", axis=1),
                  helper.make_node("Conv", ["c", "w2"], ["y"], name="after")],
                 [1, 8, 16, 16], "y", [w, w2])


def test_concatenation_in_place_costs_nothing_where_the_profile_says():
    by_profile = {}
    for name in ("ethos_u55_256", "rk3588"):
        kernels = _plan(_concat_net(), _profile(name))["kernels"]
        by_profile[name] = next(k for k in kernels if k["op_types"] == ["Concat"])
    assert by_profile["ethos_u55_256"]["cost"]["total_cycles"] == 0
    assert by_profile["rk3588"]["cost"]["total_cycles"] > 0


def test_shared_sram_holds_the_whole_arena_and_dedicated_sram_spills():
    """A 512 KB feature map: in Vela's Shared_Sram (ethos_u55_256) the arena is all in
    SRAM whatever its size; the U85's 384 KB cache (Dedicated_Sram_384KB) spills it."""
    w = numpy_helper.from_array(np.ones((32, 32, 1, 1), np.float32), "w")
    net = _int8([helper.make_node("Conv", ["x", "w"], ["a"], name="a"),
                 helper.make_node("Relu", ["a"], ["r"], name="r"),
                 helper.make_node("Conv", ["r", "w"], ["y"], name="b")],
                [1, 32, 128, 128], "y", [w])
    shared = _plan(net, _profile("ethos_u55_256"))["memory"]
    dedicated = _plan(net, _profile("ethos_u85_256"))["memory"]
    assert not shared["spilled_to_dram"] and shared["sram_arena_peak_bytes"] >= 512 * 1024
    assert dedicated["spilled_to_dram"]


def test_the_rk3576_profile_reproduces_rknn_s_estimate_of_its_probes():
    """The numbers the profile was written from (benchmarks/rknn_layers.py on RKNN-Toolkit2
    2.5.0): npuflow's compute cycles of each probe on one rk3576 core are RKNN's NPU cycles
    (the array, the output stage, the depthwise engine) but for the systolic fill and drain
    of each fold, which RKNN does not count (5% on the deep 1x1, as on the rk3588)."""
    rows = json.loads((REPO / "benchmarks" / "results" / "rknn_layers.json").read_text())
    rknn = {r["probe"]: r["npu_cycles"] for r in rows if r["target"] == "rk3576"}
    profile = dataclasses.replace(_profile("rk3576"), cores=1)  # RKNN's probes: one core
    specs = {"deep_1x1": (128, 128, 1, 12, 160, 1), "thin_1x1": (16, 32, 1, 240, 240, 1),
             "dw_3x3": (48, 48, 3, 120, 120, 48)}
    for probe, (cin, cout, k, h, w, group) in specs.items():
        weight = numpy_helper.from_array(np.ones((cout, cin // group, k, k), np.float32), "w")
        net = _int8([helper.make_node("Conv", ["x", "w"], ["y"], name="c", group=group,
                                      pads=[(k - 1) // 2] * 4)], [1, cin, h, w], "y", [weight])
        kernel = _plan(net, profile)["kernels"][0]
        assert rknn[probe] <= kernel["cost"]["compute_cycles"] <= 1.06 * rknn[probe], probe


def test_every_pair_says_if_it_was_fitted_and_what_kind_of_figure_it_is():
    pairs = PUBLISHED["pairs"]
    assert all(p["role"] in ("fit", "check") and p["kind"] in ("board", "vendor_estimate")
               for p in pairs)
    assert all(p["kind"] == "vendor_estimate" for p in pairs if p["source"].startswith("vela"))
    assert all("fit_because" in p for p in pairs if p["role"] == "fit")
    import sys
    sys.path.insert(0, str(REPO / "benchmarks"))
    from rknn_rates import fit_set

    fitted = fit_set()
    assert ("yolov5s", "rk3588") in fitted and not any(n.startswith("yolox") for n, _ in fitted)


def test_a_profile_s_confidence_band_is_reported_with_what_it_rests_on(tmp_path):
    conf = tmp_path / "conf" / "hardware"
    conf.mkdir(parents=True)
    (conf / "banded.yaml").write_text(
        "defaults: [rk3588, _self_]\nname: banded\n"
        "confidence: {ratio_low: 0.8, ratio_high: 1.25, pairs: 7, kind: board, "
        "based_on: 7 check pairs}\n")
    (conf / "rk3588.yaml").write_text((CONF / "hardware" / "rk3588.yaml").read_text())
    code, lines, _ = npuflow("--config-dir", str(tmp_path / "conf"), "hardware=banded",
                             f"hydra.run.dir={tmp_path / 'run'}", "run.cache=false",
                             "model=resnet18", "model.params.image_size=64",
                             "data.calibration_size=2", "data.eval_size=2")
    assert code == 0, lines
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["latency_ms_low"] == pytest.approx(m["latency_ms"] / 1.25)
    assert m["latency_ms_high"] == pytest.approx(m["latency_ms"] / 0.8)
    assert m["latency_band_pairs"] == 7 and m["latency_band_kind"] == "board"
    assert "7 check pairs" in (tmp_path / "run" / "report.html").read_text()


def test_a_band_needs_both_ends_in_order(tmp_path):
    conf = tmp_path / "conf" / "hardware"
    conf.mkdir(parents=True)
    (conf / "bad.yaml").write_text((CONF / "hardware" / "rk3588.yaml").read_text().replace(
        "name: rk3588", "name: bad") + "\nconfidence: {ratio_low: 1.3, ratio_high: 0.9, "
        "pairs: 3}\n")
    code, lines, _ = npuflow("--config-dir", str(tmp_path / "conf"), "hardware=bad",
                             f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 2 and "confidence" in lines[0], lines
