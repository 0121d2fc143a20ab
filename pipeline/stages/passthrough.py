"""Stand-in for a stage not implemented yet: it says so in the log and in metrics.json
(``<stage>_stage_implemented: false``) and hands the upstream model on unchanged."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from omegaconf import DictConfig

from pipeline.stages.base import Stage, StageInputs, StageResult, latest_model

log = logging.getLogger(__name__)


class PassThroughStage(Stage):
    implemented = False

    def run(self, inputs: StageInputs, cfg: DictConfig, out_dir: Path) -> StageResult:
        log.warning("stage '%s' is NOT IMPLEMENTED yet: passing the model through unchanged",
                    self.chain_name)
        shutil.copyfile(latest_model(inputs), out_dir / "model.onnx")
        (out_dir / "NOT_IMPLEMENTED").write_text(
            f"stage '{self.chain_name}' is a pass-through placeholder; its numbers are not real\n"
        )
        return StageResult({f"{self.chain_name}_stage_implemented": False})
