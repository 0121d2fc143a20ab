"""Finding things: ``npuflow describe``, did-you-mean for misspelt keys and options, a short
``--help``, ``--config-dir`` anywhere, and a terminal without other libraries' noise."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import yaml

from hardware.profile import HardwareProfile, Sram
from pipeline import describe
from pipeline.cli import options_first
from pipeline.reports.terminal import OwnRecords
from tests.conftest import CONF, error_lines, run_cli, run_inprocess


def test_the_groups_and_each_group_s_options_come_from_conf():
    text = describe.render(None)
    for folder in CONF.iterdir():
        if folder.is_dir() and folder.name != "hydra":
            assert f"\n  {folder.name} " in text
    profiles = describe.render("hardware")
    for path in (CONF / "hardware").glob("*.yaml"):
        description = yaml.safe_load(path.read_text())["description"]
        assert f"  {path.stem} " in profiles and description in profiles


def test_stages_and_passes_list_what_the_registries_hold():
    from pipeline.optimizer.registry import PASSES

    passes = describe.render("passes")
    assert all(f"  {name} " in passes + " " for name in PASSES)
    assert "collapsed" in passes  # fold_shape_chains' own docstring, through its wrapper
    stages = describe.render("stages")
    assert "pipeline.stages.compile.CompileStage: Compile:" in stages


def test_a_key_is_explained_from_its_schema_field():
    text = describe.render("hardware.sram.size_kb")
    field = {f.name: f for f in dataclasses.fields(Sram)}["size_kb"]
    assert "type: float" in text and "unit: KB" in text
    assert f"allowed: {field.metadata['range'].text()}" in text
    assert "default: 1024.0" in text  # rk3588's, the default composition's profile
    comment = describe.render("hardware.mac_array.output_per_cycle")
    assert "NVDLA's SDP" in comment  # the comment above the field in hardware/profile.py
    assert "one of auto | fixed" in describe.render("compile.tiling.mode")
    assert "an entry of hardware.ops" in describe.render("hardware.ops.Conv")
    assert describe.field_docs(HardwareProfile)  # comments are found at all
    unit = describe.render("hardware.units.dma_channels.write_latency_ns")
    assert "unit: ns" in unit and "allowed: must be > 0" in unit  # the unit's own schema
    assert "section (DmaChannelsSection)" in describe.render("hardware.units.dma_channels")
    with pytest.raises(ValueError, match="not an execution unit"):
        describe.render("hardware.units.dma_chanels")


@pytest.mark.parametrize("typed,expected", [
    ("compile.tilling", "compile.tiling"), ("hardware.sram.sise_kb", "hardware.sram.size_kb"),
    ("hardwre", "hardware")])
def test_describe_suggests_the_closest_keys(typed, expected):
    code, lines, _ = run_inprocess(typed, main=lambda: describe.main(None))
    assert code == 2 and len(lines) == 1 and "did you mean" in lines[0]
    assert expected in lines[0].split("did you mean", 1)[1]


@pytest.mark.parametrize("override,expected", [
    ("compile.tilling.mode=fixed", "compile.tiling"),
    ("+compile.tilling.mode=fixed", "compile.tiling"),  # Hydra's + would add it silently
    ("hardware=rk358", "rk3588"),
    ("compile.tiling.tile_mm=8", "compile.tiling.tile_m"),
])
def test_a_misspelt_override_is_one_line_with_a_suggestion(override, expected):
    code, lines, _ = run_inprocess(override, "stages.order=[export]")
    assert code == 2 and len(lines) == 1, lines
    assert "did you mean" in lines[0] and expected in lines[0].split("did you mean", 1)[1]


def test_help_is_short_and_points_at_describe():
    proc = run_cli("--help")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) < 25
    assert "npuflow describe KEY" in proc.stdout
    described = run_cli("describe", "quant.scheme")
    assert described.returncode == 0 and "one of none | fp16 | int8" in described.stdout


def test_config_dir_may_come_after_the_overrides(tmp_path):
    assert options_first(["quant=int8", "--config-dir", "D", "-m", "x=1", "--config-name=c"]) \
        == ["--config-dir", "D", "--config-name=c", "quant=int8", "-m", "x=1"]
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "mine.yaml").write_text(
        (CONF / "hardware" / "rk3588.yaml").read_text().replace("name: rk3588", "name: mine"))
    proc = run_cli("model=digits_mlp", "data=digits", "hardware=mine", "--config-dir",
                   str(tmp_path), "stages.order=[export]", f"hydra.run.dir={tmp_path / 'r'}")
    assert proc.returncode == 0, error_lines(proc)


def test_the_terminal_shows_npuflow_s_records_and_anyone_s_errors():
    keep = OwnRecords()

    def record(name: str, level: int) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, "x", None, None)

    assert keep.filter(record("pipeline.stages.quantize", logging.INFO))
    assert keep.filter(record("npuflow", logging.WARNING))
    assert not keep.filter(record("root", logging.INFO))  # onnxruntime.quantization's lines
    assert not keep.filter(record("py.warnings", logging.WARNING))
    assert keep.filter(record("onnx_ir", logging.ERROR))


def test_a_quantizer_s_chatter_goes_to_the_log_file_not_the_terminal(tmp_path):
    """BERT's shared biases make onnxruntime's quantizer log "Created a copy of bias" on the
    root logger: the run's npuflow.log has it, the terminal does not."""
    run = tmp_path / "run"
    proc = run_cli("model=bert_encoder", "quant=int8", "data.calibration_size=2",
                   "data.eval_size=2", "stages.order=[export,optimize,quantize]",
                   f"hydra.run.dir={run}", "run.cache=false")
    assert proc.returncode == 0, error_lines(proc)
    assert "Created a copy of bias" in (run / "npuflow.log").read_text()
    assert "Created a copy of bias" not in proc.stdout + proc.stderr


def test_a_long_loop_without_a_terminal_logs_a_line_per_tenth_with_what_is_left():
    from pipeline.reports.terminal import logged

    lines: list[str] = []
    with logged("calibration batches", 20, lambda form, *a: lines.append(form % a)) as step:
        for _ in range(20):
            step()
    assert len(lines) == 10
    assert lines[0].startswith("calibration batches: 2/20 (10%)") and "s left" in lines[0]
    assert lines[-1].startswith("calibration batches: 20/20 (100%)")
    unknown: list[str] = []
    with logged("fitting", None, lambda form, *a: unknown.append(form % a)) as step:
        for _ in range(25):
            step()
    assert [line.split(",")[0] for line in unknown] == ["fitting: 10 done", "fitting: 20 done"]


def test_a_sweep_says_how_far_it_is(tmp_path):
    proc = run_cli("-m", "model=digits_mlp", "data=digits", "compile.tiling.tile_m=16,32",
                   "stages.order=[export,optimize,compile,simulate]", "quant=none",
                   f"hydra.sweep.dir={tmp_path / 's'}", f"run.cache_dir={tmp_path / 'c'}")
    assert proc.returncode == 0, error_lines(proc)
    progress = [line for line in proc.stderr.splitlines() if line.startswith("sweep: ")]
    assert progress[-1].startswith("sweep: 2/2 (100%)"), proc.stderr


def test_top1_agreement_only_where_outputs_are_class_scores():
    import numpy as np

    from pipeline.quantization.evaluation import Evaluator

    rng = np.random.default_rng(0)
    logits = [rng.normal(size=(1, 10)).astype(np.float32) for _ in range(4)]
    hidden = [rng.normal(size=(1, 128, 64)).astype(np.float32) for _ in range(4)]
    classifier = Evaluator(logits, None, None, None)
    encoder = Evaluator(hidden, None, None, None)
    assert classifier.scores(logits)["top1_agreement"] == 1.0
    noisy = [h + rng.normal(scale=0.1, size=h.shape).astype(np.float32) for h in hidden]
    scores = encoder.scores(noisy)
    assert "top1_agreement" not in scores and 0.99 < scores["output_cosine"] < 1.0
    assert encoder.drop_points(scores) == pytest.approx(100 * (1 - scores["output_cosine"]))


def test_a_float_model_at_chance_is_called_out():
    import numpy as np

    from pipeline.quantization.evaluation import Evaluator

    logits = [np.zeros((1, 10), np.float32)]
    judge = Evaluator(logits, None, None, None)
    judge.float_scores = {"accuracy_top1": 0.11}
    assert "about chance for 10 classes" in judge.near_chance()
    judge.float_scores = {"accuracy_top1": 0.9}
    assert judge.near_chance() is None


def test_the_layer_error_plot_names_layers_and_marks_the_first_bad_one(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from pipeline.quantization import plots

    seen: list = []
    real_save = plots.save_figure

    def keep(fig, path):
        ax = fig.axes[0]
        seen.append(([t.get_text() for t in ax.get_xticklabels()],
                     [h.get_label() for h in ax.get_legend().legend_handles],
                     ax.yaxis.get_major_formatter().get_useOffset()))
        real_save(fig, path)

    monkeypatch.setattr(plots, "save_figure", keep)
    rows = [{"layer": f"conv_{i}", "cosine": 0.99995 - 1e-5 * i, "isolated_cosine": None}
            for i in range(5)]
    plots.plot_layer_errors(rows, tmp_path / "e.png", "conv_3", 0.99993)
    labels, legend, offset = seen[0]
    assert labels == [f"conv_{i}" for i in range(5)]
    assert any("first layer under the threshold: conv_3" in text for text in legend)
    assert offset is False  # plain tick labels, not "1e-5 + 9.999e-1"
    plt.close("all")


def test_weights_in_constant_nodes_are_parameters():
    """paddle2onnx writes weights as Constant nodes: they count as initializers do."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from pipeline.reports.model_summary import count_parameters

    weight = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")
    bias = numpy_helper.from_array(np.ones(8, np.float32), "b")
    nodes = [helper.make_node("Constant", [], ["w"], value=weight),
             helper.make_node("Constant", [], ["b"], value=bias),
             helper.make_node("Conv", ["x", "w", "b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])
    assert count_parameters(helper.make_model(graph)) == 8 * 27 + 8
    as_initializers = helper.make_graph(nodes[2:], "g", graph.input, graph.output,
                                        [weight, bias])
    assert count_parameters(onnx.helper.make_model(as_initializers)) == 8 * 27 + 8


def test_a_kernel_the_min_cut_moved_says_why_it_is_on_the_cpu():
    from types import SimpleNamespace

    from pipeline.compiler.plan import Check
    from pipeline.html_report import why_on_cpu

    passed = [Check("n", "op", "op supported", True, "")]
    moved = SimpleNamespace(target="cpu", checks=passed, moved_by_optimizer=True,
                            npu_estimate_cycles=900.0, cpu_estimate_cycles=1200.0)
    assert "compile.placement=optimal" in why_on_cpu(moved) and "1,200 CPU" in why_on_cpu(moved)
    refused = SimpleNamespace(target="cpu", moved_by_optimizer=False,
                              checks=[Check("n", "kernel", "kernel too large", False, "9 > 7")])
    assert why_on_cpu(refused) == "kernel too large (9 > 7)"
    moved.target = "npu"
    assert why_on_cpu(moved) == ""


def test_scalar_and_vector_outputs_are_judged_without_a_crash():
    import numpy as np

    from pipeline.quantization.evaluation import Evaluator

    scalar = [np.float32(1.5).reshape(())]
    judge = Evaluator(scalar, None, None, None)
    assert "top1_agreement" not in judge.scores(scalar) and judge.near_chance() is None
    single = [np.ones((1, 1), np.float32)]  # one score: nothing to argmax over
    assert "top1_agreement" not in Evaluator(single, None, None, None).scores(single)


def test_the_confidence_drop_resolves_a_layer_that_flips_no_answer():
    import math

    import numpy as np

    from pipeline.quantization.evaluation import Evaluator

    logits = [np.array([[2.0, 1.0, 0.0]], np.float32)]
    judge = Evaluator(logits, None, None, None)
    flatter = [x * 0.5 for x in logits]  # same answer, less sure of it
    assert judge.drop_points(judge.scores(flatter)) == 0.0  # top-1 cannot see it
    before = math.exp(2) / (math.exp(2) + math.exp(1) + 1)
    after = math.exp(1) / (math.exp(1) + math.exp(0.5) + 1)
    assert judge.confidence_drop_points(flatter) == pytest.approx(100 * (before - after))
    assert judge.confidence_drop_points(logits) == 0.0
    # a softmax's output is read as probabilities, not put through a second softmax
    probs = [np.array([[0.7, 0.2, 0.1]], np.float32)]
    moved = [np.array([[0.6, 0.3, 0.1]], np.float32)]
    assert Evaluator(probs, None, None, None).confidence_drop_points(moved) == \
        pytest.approx(10.0, abs=1e-5)
