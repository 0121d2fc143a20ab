"""Quantize: ONNX -> fp32 / fp16 / QDQ int8-int16 ONNX, with real calibration and an
accuracy report from onnxruntime runs on the configured data."""

from __future__ import annotations

import functools
import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import onnx
from omegaconf import DictConfig, OmegaConf

from pipeline import metrics as metric_components
from pipeline import onnx_io
from pipeline.artifacts import write_csv, write_json
from pipeline.datasets import loaders
from pipeline.errors import UserError
from pipeline.llm import source as llm_source
from pipeline.optimizer import graph_edit
from pipeline.quantization import accuracy, as_is, auto, plots, schemes, sensitivity
from pipeline.quantization import layers as qlayers
from pipeline.quantization.evaluation import Evaluator
from pipeline.reports.figures import draw_all
from pipeline.running import memory_budget
from pipeline.running.interrupt import worker_pool
from pipeline.stages.base import Stage, StageInputs, StageResult, latest_model

log = logging.getLogger(__name__)


class _DropPreprocessHint(logging.Filter):
    """onnxruntime.quantization logs a 'consider pre-processing' hint on the root logger for
    every call; npuflow runs shape inference itself, so the hint is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "consider to run pre-processing" not in record.getMessage() and \
            "consider pre-processing" not in record.getMessage()


for _handler in logging.getLogger().handlers:
    _handler.addFilter(_DropPreprocessHint())
logging.getLogger().addFilter(_DropPreprocessHint())


def _inputs(model: onnx.ModelProto) -> list[loaders.ModelInput]:
    inits = {i.name for i in model.graph.initializer}
    out = []
    for vi in (i for i in model.graph.input if i.name not in inits):
        elem = vi.type.tensor_type.elem_type
        if elem == onnx.TensorProto.STRING or not vi.type.HasField("tensor_type"):
            raise UserError(f"quantize: input '{vi.name}' is not a numeric tensor")
        dims = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        out.append(loaders.ModelInput(vi.name, dims,
                                      onnx.helper.tensor_dtype_to_np_dtype(elem)))
    return out


def _metric(cfg: DictConfig, model: onnx.ModelProto, labels) -> metric_components.Metric | None:
    if labels is None:
        return None
    spec = OmegaConf.to_container(cfg.eval.metric, resolve=True)
    assert isinstance(spec, dict)
    return metric_components.build(spec, {p.key: p.value for p in model.metadata_props})


class QuantizeStage(Stage):
    name = "quantize"
    version = "3"  # a language model's proxy perplexity
    config_keys = ("quant", "data", "eval")
    produces = frozenset({
        "accuracy", "accuracy_float", "accuracy_top1", "accuracy_top1_float", "accuracy_top5",
        "accuracy_top5_float", "min_layer_cosine", "model_size_bytes", "output_cosine",
        "quant_float_layers", "top1_agreement",
        # a language model's precision on npuflow's trained proxy (pipeline/llm/proxy.py)
        "perplexity", "perplexity_change_pct", "perplexity_fp32",
    })

    def external_files(self, cfg: DictConfig) -> list[Path]:
        return loaders.source_files(cfg.data)

    def run(self, inputs: StageInputs, cfg: DictConfig, out_dir: Path) -> StageResult:
        q = cfg.quant
        model = schemes.named(onnx.load(latest_model(inputs)))
        scheme = schemes.resolve(model, q.scheme)
        if scheme == "int8":
            model = schemes.quantizable_opset(model)
        self._check_memory(model, cfg, scheme)
        data = loaders.load(cfg.data, _inputs(model))
        metric = _metric(cfg, model, data.labels)
        eval_feeds, cal_feeds = data.feeds("evaluation"), data.feeds("calibration")
        if scheme == "as_is":
            metrics, extra, labelled = self._as_is(model, inputs, cfg, data, metric, out_dir)
        else:
            metrics, extra, labelled = self._quantize(model, scheme, cfg, data, metric,
                                                      out_dir)
        if labelled:
            metrics["accuracy"] = metrics[cfg.eval.objective]
            if f"{cfg.eval.objective}_float" in metrics:
                metrics["accuracy_float"] = metrics[f"{cfg.eval.objective}_float"]
        metrics["model_size_bytes"] = (out_dir / "model.onnx").stat().st_size
        if llm_source.recorded(inputs) is not None:
            metrics.update(self._llm_perplexity(cfg))
        metrics.update(extra.pop("metrics", {}))
        write_json(out_dir / "accuracy.json", {
            "scheme": scheme, **metrics, **extra,
            "eval_metric": cfg.eval.name if labelled else None,
            "eval_objective": cfg.eval.objective if labelled else None,
            "eval_samples": len(eval_feeds),
            "calibration_samples": 0 if scheme == "as_is" else len(cal_feeds)})
        log.info("quantize %s: %s", scheme, {k: round(v, 4) for k, v in metrics.items()
                                            if isinstance(v, float)})
        return StageResult(metrics)

    @staticmethod
    def _llm_perplexity(cfg: DictConfig) -> dict[str, float]:
        """A language model's weights are seeded noise: what its precision costs is
        measured on the decoder npuflow trains (torch, the ``test`` extra), said as such."""
        try:
            import torch  # noqa: F401
        except ImportError:
            log.info("perplexity_change_pct: training the proxy decoder needs torch "
                     "(pip install -e '.[test]'); not measured")
            return {}
        from pipeline.llm import proxy

        change = proxy.precision_change(cfg.quant, cfg.run.cache_dir, cfg.run.seed)
        log.info("quant=%s on npuflow's trained proxy decoder: perplexity %.3f against "
                 "%.3f in float32 (%+.2f%%)", cfg.quant.scheme, change["perplexity"],
                 change["perplexity_fp32"], change["perplexity_change_pct"])
        return change

    def _quantize(self, model: onnx.ModelProto, scheme: str, cfg: DictConfig, data, metric,
                  out_dir: Path) -> tuple[dict, dict, bool]:
        """npuflow's own quantization (int8), or a float scheme (fp16, none), judged
        against the float model in onnxruntime."""
        eval_feeds = data.feeds("evaluation")
        extra: dict = {}
        # the float model's evaluation runs in onnxruntime (GIL released) while calibration
        # and quantization, mostly Python, go on: both cores busy
        with tempfile.TemporaryDirectory() as tmp, worker_pool(1) as background:
            reference_job = background.submit(accuracy.run_outputs, model, eval_feeds)

            @functools.cache
            def judge() -> Evaluator:
                made = Evaluator(reference_job.result(), data.labels, metric,
                                 cfg.eval.objective)
                warning = made.near_chance()
                if warning:
                    log.warning("%s", warning)
                return made

            float_path = Path(tmp) / "float.onnx"
            onnx.save(model, float_path)
            if scheme == "none":
                shutil.copyfile(float_path, out_dir / "model.onnx")
            elif scheme == "fp16":
                onnx_io.save_model(schemes.to_fp16(model), out_dir / "model.onnx")
            elif scheme == "weight_only":
                onnx_io.save_model(schemes.weight_only(model, cfg.quant), out_dir / "model.onnx")
            else:
                extra = self._int(model, float_path, data, cfg.quant, out_dir, Path(tmp),
                                  judge)
            quantized = onnx.load(out_dir / "model.onnx")
            metrics = judge().scores(accuracy.run_outputs(quantized, eval_feeds))
        return metrics, extra, judge().labelled

    def _as_is(self, model: onnx.ModelProto, inputs: StageInputs, cfg: DictConfig, data,
               metric, out_dir: Path) -> tuple[dict, dict, bool]:
        analysis = cfg.quant.analysis
        kept = as_is.keep(model, inputs, out_dir, data.feeds("evaluation"), data.labels,
                          metric, cfg.eval.objective,
                          analysis.samples if analysis.layers else None)
        extra = dict(kept.extra, metrics={})
        if kept.layer_rows:
            self._layer_report(kept.layer_rows, analysis, out_dir, extra)
        labelled = metric is not None and cfg.eval.objective in kept.metrics
        return dict(kept.metrics), extra, labelled

    def _int(self, model, float_path: Path, data, q: DictConfig, out_dir: Path, tmp: Path,
             judge: Callable[[], Evaluator]) -> dict:
        cache = out_dir / "calibration.json"
        schemes.calibrate(float_path, data.feeds("calibration"), q, cache)
        schemes.quantize_int(float_path, tmp / "all.onnx", cache, q, [])
        units = qlayers.layers(model, qlayers.quantized_tensors(onnx.load(tmp / "all.onnx")))
        exclude = schemes.float_nodes(model, q, [u.nodes for u in units if u.is_compute])
        analysis, feeds = q.analysis, data.feeds("evaluation")
        layer_feeds = feeds[: analysis.samples]
        isolated: dict[str, dict] = {}
        if analysis.isolated or q.auto.enabled:
            count = q.auto.samples if q.auto.enabled else analysis.samples
            candidates = [u for u in units if not set(u.nodes) & set(exclude)]
            float_outputs = sensitivity.float_layer_outputs(model, candidates, layer_feeds)
            isolated = sensitivity.isolated(float_path, cache, q, tmp, candidates,
                                            feeds[:count], judge().subset(count),
                                            float_outputs, len(layer_feeds))
        extra: dict = {"metrics": {}}
        if q.auto.enabled:
            found = self._auto(float_path, cache, q, tmp, units, isolated, exclude, feeds,
                               judge())
            exclude = found.exclude
            extra["auto"] = {"stop": found.stop, "float_layers": found.float_layers,
                             "trials": len(found.curve) - 1}
            write_json(out_dir / "auto_curve.json", found.curve)
            evaluator = judge()  # float_scores: empty without labels, so no fp32 line
            key = evaluator.objective_key if evaluator.labelled else "output_cosine"
            draw_all([functools.partial(plots.plot_auto_curve, found.curve, key,
                                        evaluator.float_scores.get(key),
                                        out_dir / "auto_curve.png")])
        if exclude:
            schemes.quantize_int(float_path, out_dir / "model.onnx", cache, q, exclude)
        else:  # the fully quantized model made above to find the layers
            shutil.copyfile(tmp / "all.onnx", out_dir / "model.onnx")
        extra["float_layers"] = exclude  # node names, as quant.keep_float takes them
        extra["metrics"]["quant_float_layers"] = sum(1 for u in units
                                                     if set(u.nodes) & set(exclude))
        if analysis.layers:
            errors, _ = accuracy.layer_errors(float_path, out_dir / "model.onnx", layer_feeds)
            self._layer_report(accuracy.by_layer(units, errors, isolated), analysis, out_dir,
                               extra)
        return extra

    def _layer_report(self, rows: list[dict], analysis: DictConfig, out_dir: Path,
                      extra: dict) -> None:
        """layers.csv, layer_error.png, the first layer below the cosine threshold and
        min_layer_cosine, for npuflow's own quantization and a kept one alike."""
        self._layers_csv(rows, out_dir / "layers.csv")
        jump = accuracy.first_jump(rows, "cosine", analysis.jump_cosine)
        draw_all([functools.partial(plots.plot_layer_errors, rows, out_dir / "layer_error.png",
                                    jump, analysis.jump_cosine)])
        if jump:
            log.warning("first layer whose output cosine drops below %s: '%s'",
                        analysis.jump_cosine, jump)
        extra["metrics"]["min_layer_cosine"] = min(
            (r["cosine"] for r in rows if r["cosine"] is not None), default=1.0)
        extra["first_jump_layer"] = jump

    @staticmethod
    def _check_memory(model: onnx.ModelProto, cfg: DictConfig, scheme: str) -> None:
        """What the calibration and the per-layer analysis hold at once
        (``pipeline/running/memory_budget.py`` says why these counts)."""
        q = cfg.quant
        copies, knobs = 1, ["the model's input size"]
        if scheme in ("int8", "as_is") and q.analysis.layers:
            copies = 2 * min(q.analysis.samples, cfg.data.eval_size) + 1
            knobs.append("quant.analysis.samples (or quant.analysis.layers=false)")
        if scheme == "int8" and q.calibration.method != "minmax":
            copies = max(copies, cfg.data.calibration_size)
            knobs.append("data.calibration_size")
        shapes = onnx.shape_inference.infer_shapes(graph_edit.skeleton(model))
        memory_budget.check(shapes, copies, "quantize", ", ".join(knobs),
                            weights=memory_budget.weight_bytes(model))

    @staticmethod
    def _auto(float_path: Path, cache: Path, q, tmp: Path, units, isolated, exclude, feeds,
              judge: Evaluator) -> auto.Search:
        def build(nodes: list[str]) -> list:
            path = tmp / "trial.onnx"
            schemes.quantize_int(float_path, path, cache, q, nodes)
            return accuracy.run_outputs(path, feeds)

        found = auto.search(auto.rank(units, isolated, judge), exclude, build, judge, q.auto)
        log.info(auto.summary(found, judge))
        return found

    @staticmethod
    def _layers_csv(rows: list[dict], path: Path) -> None:
        write_csv(path, rows, list(rows[0]) if rows else list(accuracy.LAYER_COLUMNS))
