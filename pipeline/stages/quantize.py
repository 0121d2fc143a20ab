"""Quantize: ONNX -> fp32 / fp16 / QDQ int8-int16 ONNX, with real calibration and an
accuracy report from onnxruntime runs on the configured data."""

from __future__ import annotations

import logging
import shutil
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import onnx
from omegaconf import DictConfig

from pipeline import onnx_io
from pipeline.artifacts import save_figure, write_csv, write_json
from pipeline.datasets import loaders
from pipeline.errors import UserError
from pipeline.quantization import accuracy, schemes
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


def _target_met(metrics: dict, base: dict, target: DictConfig) -> bool:
    if target.get("min_output_cosine") is not None:
        return metrics["output_cosine"] >= target.min_output_cosine
    drop_pp = 100 * (base.get("accuracy_top1", base["top1_agreement"])
                     - metrics.get("accuracy_top1", metrics["top1_agreement"]))
    return drop_pp <= target.max_top1_drop


class QuantizeStage(Stage):
    name = "quantize"
    version = "1"
    config_keys = ("quant", "data")

    def run(self, inputs: StageInputs, cfg: DictConfig, out_dir: Path) -> StageResult:
        q = cfg.quant
        model = schemes.named(onnx.load(latest_model(inputs)))
        schemes.refuse_prequantized(model, q.scheme)
        data = loaders.load(cfg.data, _inputs(model))
        eval_feeds, cal_feeds = data.feeds("evaluation"), data.feeds("calibration")
        extra: dict = {}
        # the float model's evaluation runs in onnxruntime (GIL released) while calibration
        # and quantization, mostly Python, go on: both cores busy
        with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(1) as background:
            reference_job = background.submit(accuracy.run_outputs, model, eval_feeds)
            float_path = Path(tmp) / "float.onnx"
            onnx.save(model, float_path)
            if q.scheme == "none":
                shutil.copyfile(float_path, out_dir / "model.onnx")
            elif q.scheme == "fp16":
                onnx_io.save_model(schemes.to_fp16(model), out_dir / "model.onnx")
            elif q.scheme == "int8":
                extra = self._int(model, float_path, data, q, out_dir, Path(tmp),
                                  reference_job)
            else:
                raise UserError(f"quant.scheme: must be none, fp16 or int8, got '{q.scheme}'")
        reference = reference_job.result()
        quantized = onnx.load(out_dir / "model.onnx")
        metrics = accuracy.end_metrics(reference, accuracy.run_outputs(quantized, eval_feeds),
                                       data.labels)
        metrics["model_size_bytes"] = (out_dir / "model.onnx").stat().st_size
        metrics.update(extra.pop("metrics", {}))
        write_json(out_dir / "accuracy.json", {"scheme": q.scheme, **metrics, **extra,
                                               "eval_samples": len(eval_feeds),
                                               "calibration_samples": len(cal_feeds)})
        log.info("quantize %s: %s", q.scheme, {k: round(v, 4) for k, v in metrics.items()
                                              if isinstance(v, float)})
        return StageResult(metrics)

    def _int(self, model, float_path: Path, data, q: DictConfig, out_dir: Path, tmp: Path,
             reference_job: Future) -> dict:
        cache = out_dir / "calibration.json"
        schemes.calibrate(float_path, data.feeds("calibration"), q, cache)
        exclude = schemes.float_nodes(model, q)
        analysis = q.analysis
        samples = data.feeds("evaluation")[: analysis.samples]
        isolated: dict[str, dict] = {}
        if analysis.isolated or q.auto.enabled:
            isolated = self._isolated(model, float_path, cache, q, tmp, samples, exclude)
        curve: list[dict] = []
        if q.auto.enabled:
            exclude, curve = self._auto(float_path, cache, q, tmp, data,
                                        reference_job.result(), exclude, isolated)
        schemes.quantize_int(float_path, out_dir / "model.onnx", cache, q, exclude)
        extra = {"float_layers": exclude, "auto_curve": curve, "metrics": {
            "quant_float_layers": len(exclude)}}
        if analysis.layers:
            errors, _ = accuracy.layer_errors(float_path, out_dir / "model.onnx", samples)
            rows = accuracy.by_layer(model, errors)
            for r in rows:
                r["isolated_cosine"] = isolated.get(r["layer"], {}).get("cosine")
                r["isolated_output_cosine"] = isolated.get(r["layer"], {}).get("output_cosine")
            self._layers_csv(rows, out_dir / "layers.csv")
            self._plot_layers(rows, out_dir / "layer_error.png")
            jump = accuracy.first_jump(rows, "cosine", analysis.jump_cosine)
            if jump:
                log.warning("first layer whose output cosine drops below %.3f: '%s'",
                            analysis.jump_cosine, jump)
            extra["metrics"]["min_layer_cosine"] = min((r["cosine"] for r in rows),
                                                       default=1.0)
            extra["first_jump_layer"] = jump
        if curve:
            self._plot_curve(curve, q, out_dir / "auto_curve.png")
        return extra

    @staticmethod
    def _isolated(model, float_path: Path, cache: Path, q, tmp: Path, samples, exclude):
        """Quantize each compute layer alone: its own output error and the model's."""
        ref = accuracy.run_outputs(model, samples)
        out, float_acts = {}, None
        outputs = {n.name: n.output[0] for n in model.graph.node}
        for node in schemes.compute_nodes(model):
            if node in exclude:
                continue
            path = tmp / f"only_{len(out)}.onnx"
            schemes.quantize_int(float_path, path, cache, q, [], only=[node])
            errors, float_acts = accuracy.layer_errors(float_path, path, samples, float_acts)
            got = accuracy.run_outputs(path, samples)
            out[node] = {**errors.get(outputs[node], {"cosine": 1.0}),
                         "output_cosine": accuracy.end_metrics(ref, got, None)["output_cosine"]}
        return out

    @staticmethod
    def _auto(float_path: Path, cache: Path, q, tmp: Path, data, reference, exclude,
              isolated) -> tuple[list[str], list[dict]]:
        """Keep the fewest most-sensitive layers float that meet ``quant.auto.target``."""
        ranked = sorted(isolated, key=lambda n: (isolated[n]["output_cosine"], n))
        feeds = data.feeds("evaluation")
        base = accuracy.end_metrics(reference, reference, data.labels)
        curve = []
        for k in range(min(q.auto.max_float_layers, len(ranked)) + 1):
            trial = sorted(set(exclude) | set(ranked[:k]))
            path = tmp / f"auto_{k}.onnx"
            schemes.quantize_int(float_path, path, cache, q, trial)
            m = accuracy.end_metrics(reference, accuracy.run_outputs(path, feeds), data.labels)
            curve.append({"float_layers": k, "layers": ranked[:k], **m})
            if _target_met(m, base, q.auto.target):
                return trial, curve
        log.warning("quant.auto: target not met with %d float layers", len(curve) - 1)
        return sorted(set(exclude) | set(ranked[: len(curve) - 1])), curve

    @staticmethod
    def _layers_csv(rows: list[dict], path: Path) -> None:
        cols = ["layer", "op", "tensor", "cosine", "max_abs_error", "sqnr_db",
                "isolated_cosine", "isolated_output_cosine"]
        write_csv(path, rows, cols)

    @staticmethod
    def _plot_layers(rows: list[dict], path: Path) -> None:
        fig, ax = plt.subplots(figsize=(11, 4))
        xs = range(len(rows))
        ax.plot(xs, [r["cosine"] for r in rows], marker=".", label="accumulated (whole model)")
        iso = [(i, r["isolated_cosine"]) for i, r in enumerate(rows)
               if r["isolated_cosine"] is not None]
        if iso:
            ax.scatter([i for i, _ in iso], [c for _, c in iso], color="#d62728", s=12,
                       label="isolated (layer alone)", zorder=3)
        ax.set_xlabel("layer (graph order)")
        ax.set_ylabel("cosine vs fp32")
        ax.set_title("per-layer quantization error")
        ax.legend()
        fig.tight_layout()
        save_figure(fig, path)

    @staticmethod
    def _plot_curve(curve: list[dict], q, path: Path) -> None:
        fig, ax = plt.subplots(figsize=(6, 4))
        key = "output_cosine" if q.auto.target.get("min_output_cosine") is not None else (
            "accuracy_top1" if "accuracy_top1" in curve[0] else "top1_agreement")
        ax.plot([c["float_layers"] for c in curve], [c[key] for c in curve], marker="o")
        goal = q.auto.target.get("min_output_cosine")
        if goal is not None:
            ax.axhline(goal, color="grey", linestyle="--", label="target")
            ax.legend()
        ax.set_xlabel("layers kept in float (most sensitive first)")
        ax.set_ylabel(key)
        ax.set_title("automatic mixed precision")
        fig.tight_layout()
        save_figure(fig, path)
