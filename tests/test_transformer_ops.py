"""How the RKNPU profiles run a vision transformer's pieces: LayerNorm as exporters write it
below opset 17 fused into one normalisation, GELU in its convolution's output stage,
a window partition's 6-D transpose on the NPU, and normalisations and Softmax at the rates
a public RK3588 board profile shows (rknn_model_zoo issue #366)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from omegaconf import OmegaConf
from onnx import helper

from hardware.profile import load_profile
from ops.constraints import moved_rank
from ops.load import from_onnx
from pipeline.compiler.driver import compile_graph
from pipeline.zoo.builder import GraphBuilder
from tests.conftest import CONF

COMPILE_CFG = OmegaConf.load(CONF / "compile" / "default.yaml")


def _profile(name: str):
    return load_profile(CONF / "hardware" / f"{name}.yaml")


def _plan(model, profile, **overrides) -> dict:
    cfg = OmegaConf.merge(COMPILE_CFG, OmegaConf.create(overrides))
    profile = _profile(profile) if isinstance(profile, str) else profile
    return compile_graph(from_onnx(model), profile, cfg, "fp16")


def _norm_net(transposed: bool = False, reuse: bool = False):
    """A 3-D token tensor through LayerNorm's opset-16 pattern (optionally with the
    transpose an optimizer sinks into it, or with its centred tensor also read outside)."""
    g = GraphBuilder("norm", 0, 16)
    x = g.input("x", (1, 196, 160))
    y = g.layernorm_exported(x)
    g.output(y)
    model = g.build()
    if transposed or reuse:
        nodes = list(model.graph.node)
        sub = next(n for n in nodes if n.op_type == "Sub")
        if transposed:  # d -> Transpose -> Pow, Div
            moved = helper.make_node("Transpose", [sub.output[0]], ["moved_out"], name="moved",
                                     perm=[0, 1, 2])
            for n in nodes:
                if n.op_type in ("Pow", "Div") and n.input[0] == sub.output[0]:
                    n.input[0] = "moved_out"
            model.graph.node.insert(nodes.index(sub) + 1, moved)
        if reuse:
            model.graph.output.add().CopyFrom(model.graph.output[0])
            model.graph.output[-1].name = sub.output[0]
    return model


def test_layernorm_s_exported_pattern_is_one_normalisation_at_the_board_s_rate():
    plan = _plan(_norm_net(), "rk3588")
    (norm,) = [k for k in plan["kernels"] if k["target"] == "npu" and k["cost"]["unit"] != "free"]
    assert norm["composite"] == "LayerNormalization" and len(norm["ops"]) == 9
    rate = _profile("rk3588").vector_unit.norm_elements_per_cycle
    assert norm["cost"]["compute_cycles"] == pytest.approx(196 * 160 / rate, abs=1)
    # without the pattern the pieces are passes of their own, Pow and Sqrt among them
    apart = _plan(_norm_net(), "rk3588", fusion_patterns={"layernorm": False})
    assert len([k for k in apart["kernels"] if k["cost"]["unit"] != "free"]) == 9


def test_a_transpose_sunk_into_the_norm_stays_in_it_but_a_centred_tensor_read_elsewhere_does_not():
    plan = _plan(_norm_net(transposed=True), "rk3588")
    assert any(k["composite"] == "LayerNormalization" and "moved" in k["ops"]
               for k in plan["kernels"])
    reused = _plan(_norm_net(reuse=True), "rk3588")
    assert not any(k["composite"] == "LayerNormalization" for k in reused["kernels"])


def test_a_normalisation_without_a_rate_of_its_own_costs_its_vector_pass():
    rk3588 = _profile("rk3588")
    unit = dataclasses.replace(rk3588.vector_unit, norm_elements_per_cycle=0.0)
    plan = _plan(_norm_net(), dataclasses.replace(rk3588, vector_unit=unit))
    norm = next(k for k in plan["kernels"] if k["composite"] == "LayerNormalization")
    # its output stage's cap: a 16-bit element a cycle at the int8 rate (output_counts)
    assert norm["cost"]["compute_cycles"] == math.ceil(196 * 160 / unit.output_bytes_per_cycle)


def _mlp(act: bool = True):
    """A 3-D Linear (exported MatMul + Add, which optimize leaves as Reshape / Gemm /
    Reshape) and its GELU."""
    g = GraphBuilder("mlp", 0, 17)
    x = g.input("x", (1, 784, 160))
    y = g.linear(x, 640)
    g.output(g.gelu_erf(y) if act else y)
    return g.build()


@pytest.mark.parametrize("profile, fused", [("rk3588", True), ("rk3562", True),
                                            ("rk3568", True), ("rk3576", False)])
def test_gelu_rides_its_linear_s_output_stage_where_rknn_fuses_it(profile, fused):
    """RKNN-Toolkit2 2.5.0 builds MobileSAM's GELUs as ConvExGelu for the rk3588, rk3562
    and rk3568, and as separate exGelu layers for the rk3576."""
    from pipeline.optimizer.library_passes import onnxslim_pass
    plan = _plan(onnxslim_pass(_mlp()), profile)
    gemm = next(k for k in plan["kernels"] if k["cost"]["unit"] == "array")
    assert ("Erf" in gemm["op_types"]) is fused
    assert gemm["cost"]["lut_cycles"] > 0 or not fused
    assert any(k["composite"] == "Gelu" for k in plan["kernels"]) is not fused


def test_a_window_partition_moves_a_four_dimensional_block():
    assert moved_rank([0, 1, 3, 2, 4, 5], (1, 8, 7, 8, 7, 128)) == 4
    assert moved_rank([0, 2, 1, 3], (1, 4, 5, 6)) == 3
    assert moved_rank([5, 4, 3, 2, 1, 0], (2, 3, 4, 5, 6, 7)) == 6
    g = GraphBuilder("window", 0, 17)
    x = g.input("x", (1, 8, 7, 8, 7, 128))
    g.output(g.relu(g.transpose(x, (0, 1, 3, 2, 4, 5))))
    scrambled = GraphBuilder("scrambled", 0, 17)
    y = scrambled.input("x", (2, 3, 4, 5, 6, 7))
    scrambled.output(scrambled.relu(scrambled.transpose(y, (5, 4, 3, 2, 1, 0))))
    window = next(k for k in _plan(g.build(), "rk3588")["kernels"] if "Transpose" in k["op_types"])
    other = next(k for k in _plan(scrambled.build(), "rk3588")["kernels"]
                 if "Transpose" in k["op_types"])
    assert window["target"] == "npu" and other["target"] == "cpu"


def test_an_attention_costs_what_the_rk3588_board_profile_shows():
    """24 heads of 257 x 257 scores, head size 64: the board's exSDPAttention layer took
    5,971 us on one core in fp16; npuflow's two MatMuls and Softmax add up to it."""
    g = GraphBuilder("sdpa", 0, 17)
    q, k = g.input("q", (1, 24, 257, 64)), g.input("kt", (1, 24, 64, 257))
    v = g.input("v", (1, 24, 257, 64))
    g.output(g.matmul(g.softmax(g.scale(g.matmul(q, k), 0.125), -1), v))
    plan = _plan(g.build(), "rk3588")
    npu = sum(k["cost"]["total_cycles"] for k in plan["kernels"] if k["target"] == "npu")
    assert npu / 1e3 == pytest.approx(5971, rel=0.01)  # at 1 GHz
    softmax = next(k for k in plan["kernels"] if k["op_types"] == ["Softmax"])
    assert softmax["cost"]["compute_cycles"] == pytest.approx(24 * 257 * 257 / 0.335, rel=1e-3)
