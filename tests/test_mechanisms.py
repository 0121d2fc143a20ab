"""The mechanisms held-out networks exposed, each checked against an independent form of
the same work: Vela's zero-dilated kernel for a wide dilation, an explicit whole-map
depthwise convolution for a spatial mean, Vela's write-back floor by its own formula,
in-place concatenation, the arena by memory mode; the rk3576 profile against RKNN-Toolkit2's
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
from hardware.profile import ProfileError, load_profile
from ops.load import from_onnx
from ops.registry import work_of
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


def _skip_concat_net() -> object:
    """A U-Net joint: ``a`` is concatenated and also pooled (a skip connection); ``b`` is
    computed for the Concat alone."""
    w = numpy_helper.from_array(np.ones((8, 8, 1, 1), np.float32), "w")
    w2 = numpy_helper.from_array(np.ones((8, 16, 1, 1), np.float32), "w2")
    return _int8([helper.make_node("Conv", ["x", "w"], ["a"], name="a"),
                  helper.make_node("MaxPool", ["a"], ["p"], name="pool", kernel_shape=[2, 2],
                                   strides=[2, 2]),
                  helper.make_node("Conv", ["x", "w"], ["b"], name="b"),
                  helper.make_node("Concat", ["a", "b"], ["c"], name="cat", axis=1),
                  helper.make_node("Conv", ["c", "w2"], ["y"], name="after")],
                 [1, 8, 16, 16], "y", [w, w2])


def _concat_kernel(net: object, profile: object) -> dict:
    return next(k for k in _plan(net, profile)["kernels"] if k["op_types"] == ["Concat"])


def test_concatenation_in_place_costs_nothing_where_the_profile_says():
    u55, rk = _profile("ethos_u55_256"), _profile("rk3588")
    assert _concat_kernel(_concat_net(), u55)["cost"]["total_cycles"] == 0
    assert _concat_kernel(_concat_net(), rk)["cost"]["total_cycles"] > 0


def test_an_input_something_else_reads_is_copied_into_the_concatenation():
    """Only an input computed for the Concat alone is written in place (regor's
    RewriteConcat keeps a MemoryCopy for the rest): the skip connection's 2,048 elements
    are copied, the other input's are not; with both copied (no in-place writes) the
    Concat moves twice as much."""
    u55 = _profile("ethos_u55_256")
    skip = _concat_kernel(_skip_concat_net(), u55)
    assert skip["cost"]["total_cycles"] > 0
    copied = dataclasses.replace(u55, concat_in_place=False)
    both = _concat_kernel(_skip_concat_net(), copied)
    assert skip["cost"]["sram_bytes"] == 2 * 2048  # read and written once, int8
    assert both["cost"]["sram_bytes"] == 2 * skip["cost"]["sram_bytes"]
    assert both["cost"]["compute_cycles"] == 2 * skip["cost"]["compute_cycles"]


def _two_convs(side: int) -> object:
    w = numpy_helper.from_array(np.ones((32, 32, 1, 1), np.float32), "w")
    return _int8([helper.make_node("Conv", ["x", "w"], ["a"], name="a"),
                  helper.make_node("Relu", ["a"], ["r"], name="r"),
                  helper.make_node("Conv", ["r", "w"], ["y"], name="b")],
                 [1, 32, side, side], "y", [w])


def test_the_arena_lives_where_the_memory_mode_puts_it():
    """Vela's Shared_Sram (ethos_u55_256): the arena is all in SRAM, a 512 KB feature map
    included. RKNN (rk3588: its estimate charges every layer's maps to DDR): the arena is
    in DRAM, a 2 KB map included, the SRAM only staging. A budget (rk3576, and Vela's
    Dedicated_Sram on ethos_u85_256, whose scheduler stages the maps that fit): maps in
    the SRAM budget, large ones spill."""
    big, small = _two_convs(128), _two_convs(8)
    shared = _plan(big, _profile("ethos_u55_256"))["memory"]
    assert not shared["spilled_to_dram"] and shared["sram_arena_peak_bytes"] >= 512 * 1024
    in_dram = _plan(small, _profile("rk3588"))["memory"]
    assert in_dram["sram_arena_peak_bytes"] == 0 and in_dram["dram_arena_peak_bytes"] > 0
    for name in ("ethos_u85_256", "rk3576"):
        budget_small = _plan(small, _profile(name))["memory"]
        budget_big = _plan(_two_convs(256), _profile(name))["memory"]  # 2 MB maps
        assert budget_small["sram_arena_peak_bytes"] > 0 and not budget_small["spilled_to_dram"]
        assert budget_big["spilled_to_dram"]


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


@pytest.mark.parametrize("target", ["rk3588", "rk3568", "rk3576", "rk3562"])
@pytest.mark.parametrize("probe, rows, precision", [
    ("fc_m1", 1, "int8"), ("fc_m8", 8, "int8"), ("fc_m16", 16, "int8"),
    ("fc_m1_fp16", 1, "fp16")])
def test_a_matrix_vector_product_costs_rknn_s_sixteen_rows(target, probe, rows, precision):
    """RKNN-Toolkit2's estimate of a 1024 -> 1024 fully connected layer is the same for 1
    to 16 rows (16 rows through each weight fold, no fill): a language model's decode step
    runs at that rate, not at the systolic fill of 95 cycles per fold."""
    results = json.loads((REPO / "benchmarks" / "results" / "rknn_layers.json").read_text())
    rknn = {r["probe"]: r["npu_cycles"] for r in results if r["target"] == target}
    profile = dataclasses.replace(_profile(target), cores=1)  # RKNN's probes: one core
    weight = numpy_helper.from_array(np.ones((1024, 1024, 1, 1), np.float32), "w")
    net = _int8([helper.make_node("Conv", ["x", "w"], ["y"], name="c")], [1, 1024, 1, rows],
                "y", [weight])
    kernel = compile_graph(net, profile, COMPILE, precision, precision)["kernels"][0]
    assert kernel["cost"]["compute_cycles"] == rknn[probe]


def _fc_cost(profile, rows: int) -> dict:
    """The cost of a 1024 -> 1024 fully connected layer (int8) on ``rows`` rows."""
    weight = numpy_helper.from_array(np.ones((1024, 1024, 1, 1), np.float32), "w")
    net = _int8([helper.make_node("Conv", ["x", "w"], ["y"], name="c")], [1, 1024, 1, rows],
                "y", [weight])
    return compile_graph(net, profile, COMPILE, "int8", "int8")["kernels"][0]["cost"]


@pytest.mark.parametrize("overlap", [True, False])
def test_a_matrix_vector_product_streams_its_weights_behind_its_compute(overlap):
    """RKNN's fully connected layer takes max(DDR, NPU) cycles (fc_m1 on the rk3588:
    44,763 DDR, 16,384 NPU, 44,763 total), its convolutions' operands load and then
    compute: ``dma.matvec_overlap`` is that difference, separate from the 16-row floor."""
    profile = _profile("rk3588")
    profile = dataclasses.replace(profile, cores=1, dma=dataclasses.replace(
        profile.dma, matvec_overlap=overlap))
    cost = _fc_cost(profile, 1)
    assert cost["compute_cycles"] == 16_384  # the floor holds either way
    both = (cost["compute_cycles"], cost["memory_cycles"])
    assert cost["total_cycles"] - cost["overhead_cycles"] == (max(both) if overlap
                                                              else sum(both))


def test_a_weight_stream_moves_at_the_stream_rate_and_tiles_at_the_tile_rate():
    """``dram.stream_gbps`` prices a matrix-vector product's traffic (one sequential read
    of its weights, as a decode step makes) and nothing else: the same layer on 1 row
    takes its DRAM time at the stream rate, on 64 rows (a tiled GEMM) at the tile rate;
    0 means the tile rate."""
    base = dataclasses.replace(_profile("rk3588"), cores=1)
    tile = base.dram.bandwidth_gbps
    assert base.dram.stream_gbps > tile  # the profile's fitted rate is in use

    def with_stream(gbps: float):
        return dataclasses.replace(base, dram=dataclasses.replace(base.dram, stream_gbps=gbps))

    for rows in (1, 64):
        plain, same, doubled = (_fc_cost(p, rows) for p in
                                (with_stream(0.0), with_stream(tile), with_stream(2 * tile)))
        assert same == plain
        assert doubled["dram_bytes"] == plain["dram_bytes"]
        if rows == 1:  # half the DRAM time, to the burst latency's rounding
            assert doubled["memory_cycles"] == pytest.approx(plain["memory_cycles"] / 2,
                                                             rel=0.02)
            assert doubled["total_cycles"] < plain["total_cycles"]
        else:
            assert doubled == plain


@pytest.mark.parametrize(("line", "with_key", "key"), [
    ("dram: {bandwidth_gbps: 4.0, latency_ns: 150}",
     "dram: {bandwidth_gbps: 4.0, latency_ns: 150, stream_gbps: 6.0}", r"dram\.stream_gbps"),
    ("dma: {double_buffering: true}", "dma: {double_buffering: true, matvec_overlap: true}",
     r"dma\.matvec_overlap")])
def test_a_matrix_vector_key_without_a_matrix_vector_product_is_refused(tmp_path, line,
                                                                        with_key, key):
    """A weight-stream rate or overlap on a profile whose array has no matrix-vector mode
    (``mac_array.matvec_rows`` 0) would price nothing: refused, naming the key."""
    text = (CONF / "hardware" / "nvdla_small.yaml").read_text()
    assert line in text  # the edit must bite
    (tmp_path / "bad.yaml").write_text(text.replace(line, with_key))
    with pytest.raises(ProfileError, match=rf"{key}.*matvec_rows"):
        load_profile(tmp_path / "bad.yaml")


def test_the_rk3562_profile_reproduces_rknn_s_estimate_of_its_probes():
    """rk3562.yaml was written from RKNN-Toolkit2's rk3562 estimate: the array, the output
    stage, the per-tap atom and the depthwise engine reproduce its NPU cycles, but for the
    systolic fill and drain of each fold (as on the other Rockchip profiles)."""
    rows = json.loads((REPO / "benchmarks" / "results" / "rknn_layers.json").read_text())
    rknn = {r["probe"]: r["npu_cycles"] for r in rows if r["target"] == "rk3562"}
    profile = _profile("rk3562")
    specs = {"deep_1x1": (128, 128, 1, 12, 160, 1, "int8"),
             "deep_1x1_fp16": (128, 128, 1, 12, 160, 1, "fp16"),
             "thin_1x1": (16, 32, 1, 240, 240, 1, "int8"),
             "dw_3x3": (48, 48, 3, 120, 120, 48, "int8"),
             "dw_3x3_fp16": (48, 48, 3, 120, 120, 48, "fp16")}
    for probe, (cin, cout, k, h, w, group, precision) in specs.items():
        weight = numpy_helper.from_array(np.ones((cout, cin // group, k, k), np.float32), "w")
        net = _int8([helper.make_node("Conv", ["x", "w"], ["y"], name="c", group=group,
                                      pads=[(k - 1) // 2] * 4)], [1, cin, h, w], "y", [weight])
        kernel = compile_graph(net, profile, COMPILE, precision, precision)["kernels"][0]
        assert rknn[probe] <= kernel["cost"]["compute_cycles"] <= 1.06 * rknn[probe], probe


def test_every_pair_says_if_it_was_fitted_and_what_kind_of_figure_it_is():
    pairs = PUBLISHED["pairs"]
    assert all(p["role"] in ("fit", "check") and p["kind"] in ("board", "vendor_estimate")
               for p in pairs)
    assert all(p["kind"] == "vendor_estimate" for p in pairs if p["source"].startswith("vela"))
    assert all("fit_because" in p for p in pairs if p["role"] == "fit")
    # a vendor's own int8 file is compared as shipped (Vela compiles that very file)
    assert all("quant=as_is" in p["overrides"] for p in pairs if p.get("tflite_file"))
    import sys
    sys.path.insert(0, str(REPO / "benchmarks"))
    from rknn_rates import fit_set

    fitted = fit_set()
    assert ("yolov5s", "rk3588") in fitted and not any(n.startswith("yolox") for n, _ in fitted)


def test_each_chip_s_elementwise_rates_are_read_off_that_chip_s_boards_only():
    """rknn_rates.fit_rates regresses a chip's fit pairs alone: rows built exactly from two
    chips' different rates give each chip its own back, whatever other chips' rows (and
    networks fitted on another chip only) sit beside them."""
    import sys
    sys.path.insert(0, str(REPO / "benchmarks"))
    from rknn_rates import fit_rates, fit_set

    truth = {"rk3588": (5.0, 2.0), "rk3568": (1.5, 0.8), "rk3576": (9.0, 9.0)}
    networks = sorted({network for network, _ in fit_set()})
    rows = []
    for target, (lut, vector) in truth.items():
        for i, network in enumerate(networks):
            lut_m, ew_mb = 2.0 + i, 1.0 + (i * 7) % 5
            rows.append({"network": network, "target": target, "precision": "int8",
                         "lut_elements": lut_m * 1e6, "elementwise_bytes": ew_mb * 1e6,
                         "rknn_ddr_plus_npu_ms": 10.0, "npuflow_vector_dma_ms": 0.5 * i,
                         "board_ms": 10.0 + 0.5 * i + lut_m / lut + ew_mb / vector})
    rates = fit_rates(rows)
    for target in ("rk3588", "rk3568"):
        assert rates[target]["lut_rate"] == pytest.approx(truth[target][0])
        assert rates[target]["vector_rate"] == pytest.approx(truth[target][1])
    assert "rk3576" not in rates  # no pair of it is fit for these rates


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
    said = (tmp_path / "run" / "npuflow.log").read_text()
    assert (f"measured, this would read {m['latency_ms_low']:.3f}-{m['latency_ms_high']:.3f} ms"
            " if the network errs as the profile's 7 board check pairs did") in said


def test_a_band_needs_both_ends_in_order(tmp_path):
    conf = tmp_path / "conf" / "hardware"
    conf.mkdir(parents=True)
    (conf / "bad.yaml").write_text((CONF / "hardware" / "rk3588.yaml").read_text().replace(
        "name: rk3588", "name: bad") + "\nconfidence: {ratio_low: 1.3, ratio_high: 0.9, "
        "pairs: 3}\n")
    code, lines, _ = npuflow("--config-dir", str(tmp_path / "conf"), "hardware=bad",
                             f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 2 and "confidence" in lines[0], lines


def _lookup(vocab: int, tokens: int = 20, width: int = 512) -> object:
    """An embedding lookup: ``tokens`` ids into a ``vocab`` x ``width`` float table."""
    import onnx
    from onnx import shape_inference

    table = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((vocab, width)).astype(np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"], name="embed", axis=0)], "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, tokens])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [table])
    model = shape_inference.infer_shapes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]))
    onnx.checker.check_model(model)
    return from_onnx(model)


@pytest.mark.parametrize("hardware", ["rk3588", "edge_tpu"])
def test_an_embedding_lookup_reads_the_rows_it_selects_not_its_table(hardware):
    """A Gather into a 49,408-row table for 20 tokens reads 20 rows: its cycles are those of
    a 1,000-row table's lookup, while the held weights (what a cache must fit) are the
    whole table."""
    profile = _profile(hardware)
    plans = {v: compile_graph(_lookup(v), profile, COMPILE, "fp16", "fp16")
             for v in (1000, 49408)}
    small, big = (plans[v]["kernels"][0] for v in (1000, 49408))
    assert small["target"] == big["target"]
    assert small["cost"]["total_cycles"] == big["cost"]["total_cycles"]
    assert big["cost"]["dram_bytes"] < 49408 * 512  # far less than the table
    graph = _lookup(49408)
    work = work_of(graph.nodes[0], graph)
    assert (work.weight_elems, work.held_weight_elems) == (20 * 512, 49408 * 512)


LOWERED = {"patch_32": (3, 768, 32, 224, 32), "stride_16": (3, 768, 16, 224, 16),
           "patch_9": (3, 64, 9, 225, 9)}


def _strided(cin: int, cout: int, k: int, side: int, stride: int) -> object:
    weight = numpy_helper.from_array(np.ones((cout, cin, k, k), np.float32), "w")
    return _int8([helper.make_node("Conv", ["x", "w"], ["y"], name="c", strides=[stride] * 2,
                                   pads=[(k - stride) // 2] * 4)], [1, cin, side, side], "y",
                 [weight])


@pytest.mark.parametrize("target", ["rk3588", "rk3576"])
@pytest.mark.parametrize("probe", sorted(LOWERED))
def test_a_patch_embedding_runs_as_rknn_lowers_it(target, probe):
    """RKNN-Toolkit2 runs a 32x32 stride-32 patch embedding as 4 parts of 16x16 at stride 4
    plus 1x1 selects, a 16x16/16 one at stride 4, a 9x9/9 one as space-to-depth + 1x1
    (benchmarks/rknn_layers.py): npuflow places each on the NPU (the old kernel and stride
    limits sent them to the CPU) at RKNN's NPU cycles summed over the layers it emits, but
    for the fill and drain of each fold."""
    rows = json.loads((REPO / "benchmarks" / "results" / "rknn_layers.json").read_text())
    rknn = {r["probe"]: r["npu_cycles"] for r in rows if r["target"] == target}
    profile = dataclasses.replace(_profile(target), cores=1)  # RKNN's probes: one core
    kernel = compile_graph(_strided(*LOWERED[probe]), profile, COMPILE, "fp16",
                           "fp16")["kernels"][0]
    assert kernel["target"] == "npu"
    assert any("RKNN's lowering" in c["detail"] for c in kernel["checks"])
    assert rknn[probe] <= kernel["cost"]["compute_cycles"] <= 1.06 * rknn[probe]


def test_a_profile_naming_an_unknown_lowering_is_refused(tmp_path):
    from hardware.profile import ProfileError

    text = (CONF / "hardware" / "rk3588.yaml").read_text()
    path = tmp_path / "p.yaml"
    path.write_text(text.replace("lowering: rknn", "lowering: tvm", 1))
    with pytest.raises(ProfileError, match=r"ops\.Conv\.lowering"):
        load_profile(path)


def test_a_tensorflow_input_transpose_is_the_application_s_layout_not_a_kernel():
    """tf2onnx puts Transpose(NHWC -> NCHW) first; the NPU is handed the NHWC tensor, as Vela
    is handed the TFLite file's: no kernel, no CPU op, and the same cost as the same network
    without the Transpose fed NHWC (io_layout NHWC)."""
    import onnx
    from onnx import shape_inference

    w = numpy_helper.from_array(np.ones((16, 3, 3, 3), np.float32), "w")
    conv = helper.make_node("Conv", ["t", "w"], ["y"], name="conv", pads=[1] * 4)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="to_nchw", perm=[0, 3, 1, 2]),
             conv]
    model = shape_inference.infer_shapes(helper.make_model(helper.make_graph(
        nodes, "tf", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 32, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w]),
        opset_imports=[helper.make_opsetid("", 17)]))
    graph = from_onnx(model)
    assert graph.io_layout == "NHWC" and [n.op_type for n in graph.nodes] == ["Conv"]
    plain = _int8([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1] * 4)],
                  [1, 3, 32, 32], "y", [w])
    plain = dataclasses.replace(plain, io_layout="NHWC")
    for name in ("ethos_u55_256", "rk3588"):
        folded, reference = (compile_graph(g, _profile(name), COMPILE, "int8", "int8")
                             for g in (graph, plain))
        assert [k["target"] for k in folded["kernels"]] == ["npu"]
        assert folded["kernels"][0]["cost"] == reference["kernels"][0]["cost"]
    onnx.checker.check_model(model)


def test_the_u85_array_takes_the_microblock_that_fits_the_layer(tmp_path):
    """A 16-channel layer on the 1024-MAC U85: regor's 2x4x16 microblock keeps every MAC
    busy where the 32-channel arrangement idles half: the cycles are those of a 64 x 16
    array, and never more than the 32 x 32 arrangement's alone."""
    profile = _profile("ethos_u85_1024")
    net = _conv(3, 1, channels=16, side=32)
    as_shapes = _plan(net, profile)["kernels"][0]["cost"]["compute_cycles"]
    square = dataclasses.replace(profile, mac_array=dataclasses.replace(
        profile.mac_array, shapes=[]))
    tall = dataclasses.replace(profile, mac_array=dataclasses.replace(
        profile.mac_array, rows=64, cols=16, shapes=[]))
    assert as_shapes == _plan(net, tall)["kernels"][0]["cost"]["compute_cycles"]
    assert as_shapes < _plan(net, square)["kernels"][0]["cost"]["compute_cycles"]
    from hardware.profile import ProfileError

    text = (CONF / "hardware" / "ethos_u85_256.yaml").read_text()
    path = tmp_path / "ethos_u85_256.yaml"
    path.write_text(text.replace("shapes: [[32, 8]]", "shapes: [[32, 9]]"))
    (tmp_path / "ethos_u55_256.yaml").write_text(
        (CONF / "hardware" / "ethos_u55_256.yaml").read_text())
    with pytest.raises(ProfileError, match=r"mac_array.shapes\[0\]"):
        load_profile(path)


def test_tensorflow_s_output_transposes_go_with_its_input_transposes():
    """tf2onnx ends as it starts: Transpose(NCHW -> NHWC) before each output. With the
    input's folded, the application reads NHWC as from the TFLite file, so no kernel copies
    the output; a graph whose outputs are not all such Transposes keeps them."""
    w = numpy_helper.from_array(np.ones((16, 3, 3, 3), np.float32), "w")

    def tf_graph(last_perm: list[int]):
        nodes = [helper.make_node("Transpose", ["x"], ["t"], name="in", perm=[0, 3, 1, 2]),
                 helper.make_node("Conv", ["t", "w"], ["c"], name="conv", pads=[1] * 4),
                 helper.make_node("Transpose", ["c"], ["y"], name="out", perm=last_perm)]
        from onnx import shape_inference
        return from_onnx(shape_inference.infer_shapes(helper.make_model(helper.make_graph(
            nodes, "tf", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                        [1, 32, 32, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w]),
            opset_imports=[helper.make_opsetid("", 17)])))

    folded = tf_graph([0, 2, 3, 1])
    assert [n.op_type for n in folded.nodes] == ["Conv"] and folded.outputs == ["c"]
    kept = tf_graph([0, 1, 3, 2])
    assert [n.op_type for n in kept.nodes] == ["Conv", "Transpose"] and kept.outputs == ["y"]
    plan = compile_graph(folded, _profile("ethos_u85_256"), COMPILE, "int8", "int8")
    assert [k["op_types"] for k in plan["kernels"]] == [["Conv"]]


def test_the_u85_copies_on_its_pooling_engine_at_vela_s_per_layer_cycles():
    """Vela 5.2.0 on the seeded U-Net (benchmarks/models/keras_seeded/unet_64_int8.tflite,
    ethos-u85-256, Ethos_U85_SYS_DRAM_Mid, Dedicated_Sram_384KB, --verbose-performance):
    its skip copies of 16x16x32, 32x32x16 and 64x64x8 int8 take 4,320, 8,336 and 32,880
    cycles. regor's 1x1 average pool (4 kernel steps x 4 cycles per 1x2x16 micro-block)
    gives 4,096, 8,192 and 32,768: within 6% of each; the 8-channel map fills half of each
    block, so it costs twice per element. Without the unit (a copy through the SRAM port) the
    three are 8-16x faster than Vela's."""
    from hardware.units.pooling_copy import PoolingCopySection, pooling_copy_cycles

    profile = _profile("ethos_u85_256")
    section = profile.units["pooling_copy"]
    assert isinstance(section, PoolingCopySection)
    for (side, channels), vela in {(16, 32): 4320, (32, 16): 8336, (64, 8): 32880}.items():
        assert abs(pooling_copy_cycles([(side * side, channels)], 1, section) / vela - 1) < 0.06

    def skip_copy(p):
        return _concat_kernel(_skip_concat_net(), p)["cost"]

    on_pool = skip_copy(profile)
    plain = skip_copy(dataclasses.replace(profile, units={
        k: v for k, v in profile.units.items() if k != "pooling_copy"}))
    assert on_pool["unit"] == "pooling_copy" and plain["unit"] == "memory"
    # the 16x16x8 skip input: 128 micro-blocks of 1x2x16, 16 cycles each
    assert on_pool["compute_cycles"] == 128 * 16
    assert on_pool["compute_cycles"] == 16 * plain["compute_cycles"]


def test_a_thin_host_written_image_costs_the_u85_a_burst_per_block_depth():
    """regor reads an input the host wrote (channels last, unpadded) in runs of its input
    block's depth: 16 for a 3-channel image through a 3x3 kernel (kernel-first), so each
    128-byte DRAM burst carries 16 useful bytes. A 16-channel input through the same kernel
    fills its blocks: no loss; a 64-channel one through a 1x1 kernel runs depth-first in
    blocks of 64, so its bursts carry 64 bytes."""
    from hardware.units.dma_channels import input_block_depth, run_share
    from ops.work import HostInput

    assert input_block_depth(HostInput(channels=3, taps=9)) == 16
    assert run_share(HostInput(channels=3, taps=9), 1, 128) == 16 / 128
    assert run_share(HostInput(channels=16, taps=9), 1, 128) == 1.0
    assert input_block_depth(HostInput(channels=64, taps=1)) == 64
    assert run_share(HostInput(channels=64, taps=1), 1, 128) == 1.0
    assert run_share(HostInput(channels=96, taps=1), 1, 128) == 64 / 128

    def first_conv_memory(graph) -> int:
        plan = compile_graph(graph, _profile("ethos_u85_256"), COMPILE, "int8", "int8")
        return plan["kernels"][0]["cost"]["memory_cycles"]

    w = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")
    image = _int8([helper.make_node("Conv", ["x", "w"], ["y"], name="stem", pads=[1] * 4)],
                  [1, 3, 64, 64], "y", [w])
    thin = first_conv_memory(image)
    # the same bytes at the channel's full rate: 12,288 bytes at 3.28 B/cycle ~ 3,750
    assert thin > 7 * 12288 / (128 * 16 / 500 * 0.8)
    ones = numpy_helper.from_array(np.ones((3, 3, 1, 1), np.float32), "i")
    behind = _int8([helper.make_node("Conv", ["x", "i"], ["t"], name="copy"),
                    helper.make_node("Conv", ["t", "w"], ["y"], name="stem", pads=[1] * 4)],
                   [1, 3, 64, 64], "y", [ones, w])
    plan = compile_graph(behind, _profile("ethos_u85_256"), COMPILE, "int8", "int8")
    assert plan["kernels"][1]["cost"]["memory_cycles"] < thin / 4


def test_a_fully_connected_layer_on_the_u65_waits_for_its_weights_to_decode():
    """Vela 5.2.0 on MLPerf Tiny's ad01 (ethos-u65-256, Ethos_U65_Mid_End, Shared_Sram,
    --verbose-performance): the NPU column of its 128 -> 128, 640 -> 128 and 128 -> 640
    fully connected layers is 2,674, 13,499 and 14,630 cycles, 6-31 MACs a cycle of 256.
    Its model decodes one 8-channel micro-block's weights for a 32-deep input slice in 32
    cycles (cycles_wb), however few pixels share them: 32 x N/8 x K/32 = 2,048, 10,240 and
    10,240, the rest being its output and command overheads. Without the floor the 16x16
    array's own time is less (its folds' fill and drain: 1,264 for 128 -> 128)."""
    from hardware.kernel_cost import array_compute

    u65 = _profile("ethos_u65_256")
    plain = dataclasses.replace(u65, mac_array=dataclasses.replace(
        u65.mac_array, weight_decode=dataclasses.replace(u65.mac_array.weight_decode,
                                                         cycles=0)))
    for (k, n), vela in {(128, 128): 2674, (640, 128): 13499, (128, 640): 14630}.items():
        gemm = GemmShape(1, k, n)
        decoded = array_compute(gemm, u65, "int8").cycles
        assert decoded == 32 * (n // 8) * math.ceil(k / 32)
        assert 0.65 < decoded / vela <= 1.0
        assert array_compute(gemm, plain, "int8").cycles < decoded
    # a map of 32 pixels or more fills the micro-blocks: the floor is the array's own time
    wide = GemmShape(64 * 64, 288, 64)
    assert array_compute(wide, u65, "int8") == array_compute(wide, plain, "int8")
