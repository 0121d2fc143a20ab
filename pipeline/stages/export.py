"""Export: model source -> static, checked ONNX that onnxruntime runs, plus model.json."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import onnx
from omegaconf import DictConfig

from ops.load import from_onnx
from pipeline import model_source, onnx_io
from pipeline.artifacts import file_digest, write_json
from pipeline.optimizer import graph_edit
from pipeline.reports.model_summary import summarize
from pipeline.running import memory_budget
from pipeline.stages.base import Stage, StageInputs, StageResult

log = logging.getLogger(__name__)


class ExportStage(Stage):
    name = "export"
    version = "1"
    config_keys = ("model",)
    produces = frozenset({
        "export_max_abs_error", "model_macs", "model_name", "model_nodes",
        "model_output_sha256", "model_params",
    })

    def external_files(self, cfg: DictConfig) -> list[Path]:
        m = cfg.model
        files = [onnx_io.resolve_path(f) for f in (m.path, m.get("weights"),
                                                   m.get("float_path")) if f]
        for onnx_file in (f for f in files if f.suffix.lower() == ".onnx"):
            files += onnx_io.external_data_files(onnx_file)
        return files

    def run(self, inputs: StageInputs, cfg: DictConfig, out_dir: Path) -> StageResult:
        m = cfg.model
        where = f"model.path '{m.path}'" if m.source == "onnx" else f"model '{m.name}'"
        model, exported = model_source.build_model(m, cfg.run.cache_dir)
        onnx_io.check_model(model, where)
        model = graph_edit.infer_shapes(model)
        memory_budget.check(model, 1, "export", model_source.ZOO_SIZE_KEYS
                            if m.source == "zoo" else "model.input_shape")
        # the reference run's session is the check that onnxruntime takes the model
        _, digest = onnx_io.reference_run(model, m.seed, cfg.run.ort_threads, where)
        graph = from_onnx(model, infer=False)
        summary = summarize(model, graph)
        onnx_io.save_model(model, out_dir / "model.onnx")
        self._float_model(m, model, out_dir)
        if m.source == "tflite":  # the file itself: LiteRT runs it for its accuracy
            shutil.copyfile(onnx_io.resolve_path(m.path), out_dir / model_source.TFLITE_FILE)
        summary.update(
            source=m.source,
            source_path=m.path,
            reference_run={"input_seed": m.seed, "output_sha256": digest},
            model_sha256=file_digest(out_dir / "model.onnx"),
            **({"export": exported} if exported else {}),
        )
        # a language model's graph is one block per phase: its parameters are the spec's
        params = exported["llm"]["params"] if "llm" in exported else summary["parameters"]
        if m.reference.macs or m.reference.params:
            summary["published"] = {
                "macs": m.reference.macs, "params": m.reference.params,
                "source": m.reference.source,
                "macs_ratio": summary["macs"] / m.reference.macs if m.reference.macs else None,
                "params_ratio": params / m.reference.params if m.reference.params else None,
            }
        write_json(out_dir / "model.json", summary)
        log.info("exported %s: %d nodes, %.3f GMACs, %.2f M parameters, opset %d",
                 summary["name"], summary["nodes"], summary["macs"] / 1e9,
                 summary["parameters"] / 1e6, summary["opset"])
        return StageResult({
            "model_name": m.name,
            "model_nodes": summary["nodes"],
            "model_macs": summary["macs"],
            "model_params": summary["parameters"],
            "model_output_sha256": digest,
            **({"export_max_abs_error": exported["max_abs_error_vs_framework"]}
               if "max_abs_error_vs_framework" in exported else {}),
        })

    @staticmethod
    def _float_model(m: DictConfig, model: onnx.ModelProto, out_dir: Path) -> None:
        """``model.float_path``, checked like the model and saved beside it."""
        float_model = model_source.build_float_model(m, model)
        if float_model is None:
            return
        where = f"model.float_path '{m.float_path}'"
        onnx_io.check_model(float_model, where)
        float_model = graph_edit.infer_shapes(float_model)
        onnx_io.reference_run(float_model, m.seed, 1, where)
        onnx_io.save_model(float_model, out_dir / model_source.FLOAT_FILE)
