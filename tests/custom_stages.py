"""Stage components a test plugs into the chain through ``_target_``."""

from __future__ import annotations

from pathlib import Path

import onnx
from omegaconf import DictConfig

from pipeline.stages.base import Stage, StageInputs, StageResult, latest_model


class CountNodesStage(Stage):
    """Replaces a stage: counts the upstream model's nodes, copies it on."""

    name = "count_nodes"
    config_keys = ("model",)

    def __init__(self, label: str = "custom") -> None:
        self.label = label

    def run(self, inputs: StageInputs, cfg: DictConfig, out_dir: Path) -> StageResult:
        model = onnx.load(latest_model(inputs))
        onnx.save(model, out_dir / "model.onnx")
        return StageResult({"custom_label": self.label, "custom_nodes": len(model.graph.node),
                            "custom_saw_keys": sorted(cfg.keys())})


class FailingStage(Stage):
    """Writes half an artifact, then fails like a user error would."""

    name = "failing"

    def run(self, inputs: StageInputs, cfg: DictConfig, out_dir: Path) -> StageResult:
        (out_dir / "half.bin").write_bytes(b"\0" * 100)
        from pipeline.errors import UserError

        raise UserError("failing stage: bad input 'node_7'")


def broken_pass(model):
    """A pass that 'optimizes' by scaling the first weight: verification must catch it."""
    import numpy as np
    from onnx import numpy_helper

    init = model.graph.initializer[0]
    scaled = numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(1.1), init.name)
    init.CopyFrom(scaled)
    return model


def crashing_pass(model):
    """A pass that cannot handle any graph: the stage must skip it, not stop."""
    raise RuntimeError("pattern table overflow")
