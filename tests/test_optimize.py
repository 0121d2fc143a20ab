"""Optimize: library cleanups and npuflow's passes, each verified in onnxruntime."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from pipeline.optimizer import fixpoint, graph_edit, npu_passes
from pipeline.optimizer.library_passes import PURE
from pipeline.optimizer.registry import PASSES
from pipeline.optimizer.verify import compare, reference_outputs
from pipeline.zoo import ZOO
from tests.conftest import error_lines, run_cli


def _optimize(tmp_path, *overrides):
    proc = run_cli(*overrides, "stages.order=[export,optimize]", f"hydra.run.dir={tmp_path}")
    return proc, tmp_path / "optimize"


def test_bn_disappears_from_conv_bn_relu_and_the_function_holds(tmp_path):
    proc, out = _optimize(tmp_path, "model=resnet18")
    assert proc.returncode == 0, proc.stderr
    ops = Counter(n.op_type for n in onnx.load(out / "model.onnx").graph.node)
    assert ops["BatchNormalization"] == 0 and ops["Conv"] == 20
    report = json.loads((out / "report.json").read_text())
    assert report["nodes_before"] == 69 and report["nodes_after"] < 69
    first = report["passes"][0]
    assert first["op_delta"]["BatchNormalization"] == -20
    assert 0 < report["rounds"][0]["max_abs_error"] < 1e-3  # folding rounds, keeps the function
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["nodes_after"] == report["nodes_after"]


def test_silu_and_gelu_patterns_are_recognised():
    yolo = ZOO["yolov5s"](seed=0, opset=17, image_size=64)
    counts = npu_passes.count_patterns(npu_passes.fuse_silu(yolo))
    assert counts == {"Swish (annotated)": 57}  # every Conv-BN-SiLU of YOLOv5s
    bert = ZOO["bert_encoder"](seed=0, opset=17, seq_len=8)
    assert npu_passes.count_patterns(npu_passes.fuse_gelu(bert)) == {"Gelu (annotated)": 1}


def test_gelu_becomes_one_op_where_the_opset_has_it():
    bert = ZOO["bert_encoder"](seed=0, opset=20, seq_len=8)
    feeds, expected = reference_outputs(bert, seed=0)
    fused = npu_passes.fuse_gelu(bert)
    ops = Counter(n.op_type for n in fused.graph.node)
    assert ops["Gelu"] == 1 and ops["Erf"] == 0
    assert compare(fused, feeds, expected, "fuse_gelu").max_rel < 1e-5


def _chain_model(shapes: list[list[int]], ops: list[str]):
    nodes, inits, prev = [], [], "x"
    for i, (op, shape) in enumerate(zip(ops, shapes[1:], strict=True)):
        out = f"t{i}"
        if op == "Reshape":
            inits.append(numpy_helper.from_array(np.array(shape, np.int64), f"s{i}"))
            nodes.append(helper.make_node("Reshape", [prev, f"s{i}"], [out], name=f"r{i}"))
        elif op == "Flatten":
            nodes.append(helper.make_node("Flatten", [prev], [out], name=f"f{i}", axis=1))
        prev = out
    nodes.append(helper.make_node("Relu", [prev], ["y"], name="relu"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", 1, shapes[0])],
                              [helper.make_tensor_value_info("y", 1, shapes[-1])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_chains_fold_to_one_reshape_or_vanish():
    m = _chain_model([[1, 4, 2, 2], [1, 16], [1, 4, 4], [2, 8]], ["Flatten", "Reshape", "Reshape"])
    feeds, expected = reference_outputs(m, 0)
    out = npu_passes.fold_shape_chains(m)
    assert [n.op_type for n in out.graph.node] == ["Reshape", "Relu"]
    assert compare(out, feeds, expected, "fold").max_abs == 0
    back = _chain_model([[1, 4, 2, 2], [1, 16], [1, 4, 2, 2]], ["Flatten", "Reshape"])
    assert [n.op_type for n in npu_passes.fold_shape_chains(back).graph.node] == ["Relu"]


def test_noop_transpose_and_cast_are_removed():
    nodes = [helper.make_node("Transpose", ["x"], ["a"], perm=[0, 1, 2]),
             helper.make_node("Cast", ["a"], ["b"], to=onnx.TensorProto.FLOAT),
             helper.make_node("Relu", ["b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, 2, 3])],
                              [helper.make_tensor_value_info("y", 1, [1, 2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    out = npu_passes.remove_noops(model)
    assert [n.op_type for n in out.graph.node] == ["Relu"]
    assert out.graph.node[0].input[0] == "x"


def test_old_exporters_sum_becomes_the_add_npus_list(tmp_path):
    nodes = [helper.make_node("Sum", ["x", "z"], ["a"], name="residual"),
             helper.make_node("Sum", ["a"], ["b"], name="single"),
             helper.make_node("Relu", ["b"], ["y"])]
    shape = [1, 4, 3, 3]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, 1, shape)
                                           for n in ("x", "z")],
                              [helper.make_tensor_value_info("y", 1, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds, expected = reference_outputs(model, seed=0)
    out = npu_passes.remove_noops(model)
    assert [n.op_type for n in out.graph.node] == ["Add", "Relu"]
    assert compare(out, feeds, expected, "remove_noops").max_abs == 0.0


BROKEN = "{_target_: tests.custom_stages.broken_pass, name: scale_weights}"


@pytest.mark.parametrize("passes", [f"[{BROKEN}]", f"[onnxslim, {BROKEN}, remove_noops]"])
def test_a_broken_pass_is_named_even_among_good_ones(tmp_path, passes):
    """A round is verified once; when it fails, its passes are verified in order and the
    first that broke the function is named, whatever ran before or after it."""
    proc, out = _optimize(tmp_path, "model=resnet18", f"optimize.passes={passes}")
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "pass 'scale_weights' changed the model's outputs" in line
    assert not out.exists()


def test_unknown_pass_is_one_line(tmp_path):
    proc, _ = _optimize(tmp_path, "model=digits_mlp", "optimize.passes=[onnxslim,polish]")
    assert proc.returncode == 2
    assert "optimize.passes[1]: unknown pass 'polish'" in error_lines(proc)[0]


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_real_models_from_onnx_test_data_optimize_equivalently(tmp_path, light_model, name):
    proc, out = _optimize(tmp_path, "model=onnx", f"model.path={light_model(name)}")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["nodes_after"] < report["nodes_before"]
    assert all(r["max_rel_error"] <= 1e-4 for r in report["rounds"])


def test_pad_channels_keeps_the_function_by_zero_weights_or_a_slice():
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((48, 8, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((20, 48, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], name="c1", pads=[1] * 4),
             helper.make_node("Sigmoid", ["a"], ["s"], name="sig"),  # sigmoid(0) = 0.5
             helper.make_node("Conv", ["s", "w2"], ["y"], name="c2")]
    graph = helper.make_graph(nodes, "pad", [helper.make_tensor_value_info("x", 1, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("y", 1, [1, 20, 6, 6])],
                              [w1, b1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds, expected = reference_outputs(model, 0)
    out = npu_passes.pad_channels(model, 16)
    inits = {i.name: list(i.dims) for i in out.graph.initializer}
    assert inits["w1"][0] == 48 and inits["w2"][:2] == [32, 48]  # 48 already aligned
    out = npu_passes.pad_channels(out, 32)
    inits = {i.name: list(i.dims) for i in out.graph.initializer}
    assert inits["w1"][0] == 64 and inits["w2"][:2] == [32, 64] and inits["b1"] == [64]
    assert [n.op_type for n in out.graph.node].count("Slice") == 1  # y is a graph output
    assert compare(out, feeds, expected, "pad").max_rel < 1e-5


def test_a_pass_that_cannot_handle_the_graph_is_skipped_and_reported(tmp_path):
    proc, out = _optimize(tmp_path, "model=digits_mlp",
                          "optimize.passes=[{_target_: tests.custom_stages.crashing_pass, "
                          "name: fragile}, remove_noops]", "run.cache=false")
    assert proc.returncode == 0, proc.stderr
    assert "optimize pass 'fragile' skipped on this model: RuntimeError: pattern table" \
        in proc.stdout + proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["skipped"] == {"fragile": "RuntimeError: pattern table overflow"}
    assert {p["pass"] for p in report["passes"]} == {"remove_noops"}
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["optimize_skipped_passes"] == ["fragile"]


def test_library_pass_may_keep_contrib_ops_the_model_came_with_but_not_add_them():
    from pipeline.errors import PassNotApplicable
    from pipeline.optimizer.library_passes import _portable

    def model(domain):
        node = helper.make_node("Relu" if not domain else "FusedGemm", ["x"], ["y"],
                                domain=domain)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2])],
                                  [helper.make_tensor_value_info("y", 1, [2])])
        return helper.make_model(graph)

    contrib = model("com.microsoft")
    assert _portable(contrib, model("com.microsoft"), "slim") is not None
    with pytest.raises(PassNotApplicable, match=r"pass 'slim' produced non-standard ops in "
                                                r"domain.s. com.microsoft"):
        _portable(model(""), contrib, "slim")


def test_outputs_near_zero_everywhere_are_judged_by_the_rounding_floor():
    from pipeline.optimizer.verify import Difference

    # PP-OCRv4's text-detection map on random inputs peaks at 1.1e-5: folding BatchNorm
    # moves it by 1.8e-7, a "relative" error of 1.6%
    assert Difference(max_abs=1.8e-7, max_rel=0.0156).within(1e-4, 1e-6)
    assert not Difference(max_abs=2e-3, max_rel=0.0156).within(1e-4, 1e-6)
    assert Difference(max_abs=2e-3, max_rel=5e-5).within(1e-4, 1e-6)


@pytest.mark.parametrize("name", ["mobilenet_v2", "yolov5n", "bert_encoder"])
def test_shape_inference_on_the_skeleton_equals_the_full_model(name):
    """The passes infer shapes on the model without its weight payloads; every inferred
    shape (with data propagation through shape arithmetic) must be the full model's."""
    model = ZOO[name](seed=0, opset=17)
    skeleton = graph_edit.skeleton(model)
    assert skeleton.ByteSize() < model.ByteSize() / 10
    assert graph_edit.static_shapes(model) == {
        **{vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
           for vi in onnx.shape_inference.infer_shapes(model, data_prop=True).graph.value_info
           if vi.type.tensor_type.shape.dim
           and all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)},
        **{vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
           for vi in [*model.graph.input, *model.graph.output]
           if all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)},
        **{i.name: list(i.dims) for i in model.graph.initializer}}
    full = onnx.shape_inference.infer_shapes(model).graph.value_info
    assert list(onnx.shape_inference.infer_shapes(skeleton).graph.value_info) == list(full)
    # what export saves: the model with the inference written in, byte for byte
    expected = onnx.shape_inference.infer_shapes(model, data_prop=True).SerializeToString()
    assert graph_edit.infer_shapes(model).SerializeToString() == expected


def test_a_pass_that_changes_nothing_hands_back_the_verified_model(tmp_path):
    """The loop verifies a pass's output only when it is a new model: a no-op pass
    returns the very model it was given (whose error is already known), a pass that
    changes anything returns a new one, checked, with its bytes for the round's session."""
    model = ZOO["digits_mlp"](seed=0, opset=17, cache_dir=str(tmp_path))
    assert fixpoint.apply("noop", lambda m: m, model, pure=False) == (model, None)

    def rename(m: onnx.ModelProto) -> onnx.ModelProto:
        m.graph.name = "renamed"
        return m

    renamed, data = fixpoint.apply("rename", rename, model, pure=False)
    assert renamed is not model and renamed.graph.name == "renamed" != model.graph.name
    assert data == renamed.SerializeToString()


def _counting(fn, calls: list[str], name: str):
    def counted(model):
        calls.append(name)
        return fn(model)
    return counted


def test_a_pass_is_not_run_again_on_its_own_output_and_a_round_is_verified_once(monkeypatch):
    """Round 1 folds BatchNorm (node count drops), so a round 2 runs; in it, only passes
    whose input changed since their last run run again, and each round that changed the
    model builds one verification session, not one per pass."""
    model = ZOO["resnet18"](seed=0, opset=17)
    calls: list[str] = []
    passes = [(name, _counting(PASSES[name], calls, name), name in PURE)
              for name in ("onnxslim", "ort_basic", "remove_noops", "fuse_silu")]
    sessions: list[str] = []
    real = fixpoint.Verifier.difference

    def counted_difference(self, m, where):
        sessions.append(where)
        return real(self, m, where)

    monkeypatch.setattr(fixpoint.Verifier, "difference", counted_difference)
    verifier = fixpoint.Verifier.of(model, 0, 1e-4, 1e-6)
    out, rounds = fixpoint.run_passes(model, passes, 3, verifier, lambda *a: None)
    assert len(rounds) == 2 and len(out.graph.node) < len(model.graph.node)
    last = {s.name: s.after for s in rounds[0].steps}
    assert all(s.ran for s in rounds[0].steps)
    for step in rounds[1].steps:  # a pass runs again only if another changed the model
        assert step.ran == (step.before is not last[step.name])
        last[step.name] = step.after
    assert not all(s.ran for s in rounds[1].steps)
    assert calls.count("fuse_silu") == 1
    assert sessions == ["optimize round 1"] + (["optimize round 2"] if any(
        s.changed for s in rounds[1].steps) else [])
    assert 0 < rounds[0].error.max_abs < 1e-4 and rounds[1].error == rounds[0].error


@pytest.mark.parametrize("source", ["squeezenet", "inception_v2", "resnet18", "bert_encoder"])
def test_passes_declared_pure_leave_their_input_unchanged(light_model, source):
    """The loop hands PURE passes the model itself, not a copy. onnx's light models are
    IR 3, with initializers listed as graph inputs, which onnxslim's freeze() removes in
    place: the wrapper restores them."""
    model = (onnx.load(light_model(source)) if source in ("squeezenet", "inception_v2")
             else ZOO[source](seed=0, opset=17))
    before = model.SerializeToString()
    for name in sorted(PURE):
        PASSES[name](model)
        assert model.SerializeToString() == before, name


def _constants_graph() -> onnx.ModelProto:
    """Same-shape constants that are equal (by value, by -0.0 == 0.0), distinct, NaN."""
    rng = np.random.default_rng(0)
    shared = rng.standard_normal((4, 3)).astype(np.float32)
    plus_zero, minus_zero = shared.copy(), shared.copy()
    plus_zero[0, 0], minus_zero[0, 0] = 0.0, -0.0
    values = [shared, shared.copy(), rng.standard_normal((4, 3)).astype(np.float32),
              plus_zero, minus_zero,
              np.full((4, 3), np.nan, np.float32), np.full((4, 3), np.nan, np.float32),
              shared.copy()]
    inits = [numpy_helper.from_array(v, f"c{i}") for i, v in enumerate(values)]
    nodes, prev = [], "x"
    for i in range(len(values)):
        nodes.append(helper.make_node("Add", [prev, f"c{i}"], [f"a{i}"], name=f"add{i}"))
        prev = f"a{i}"
    graph = helper.make_graph(nodes, "consts", [helper.make_tensor_value_info("x", 1, [4, 3])],
                              [helper.make_tensor_value_info(prev, 1, [4, 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("source", ["constants", "chain", "yolov5s", "inception_v2"])
def test_linear_slim_gives_onnxslims_own_result(light_model, source):
    """slim_linear replaces two quadratic onnxslim steps; the model must be the one
    onnxslim makes without them, to the byte."""
    import onnxslim

    from pipeline.optimizer.slim_linear import linear_slim
    from pipeline.zoo.builder import GraphBuilder

    if source == "constants":
        model = _constants_graph()
    elif source == "chain":
        g = GraphBuilder("chain", seed=0, opset=17)
        x = g.input("input", (1, 8, 8, 8))
        for _ in range(12):
            x = g.add(x, g.relu(g.batchnorm(g.conv(x, 8, 3, 1))))
        g.output(x)
        model = g.build()
    elif source == "yolov5s":
        model = ZOO["yolov5s"](seed=0, opset=17, image_size=64)
    else:
        model = onnx.load(light_model(source))
    reference = onnxslim.slim(onnx.load_from_string(model.SerializeToString()))
    with linear_slim():
        fast = onnxslim.slim(onnx.load_from_string(model.SerializeToString()))
    assert fast.SerializeToString() == reference.SerializeToString()
    if source == "constants":  # it did tie: c1 and c7 are c0, c4 is c3; the NaNs stay
        assert {i.name for i in fast.graph.initializer} == {"c0", "c2", "c3", "c5", "c6"}
