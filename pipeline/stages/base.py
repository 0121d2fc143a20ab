"""The stage contract: a named component that turns upstream artifacts into its own.

A stage declares what it reads (``config_keys``: top-level config groups; ``requires``:
upstream stage folders) and writes files only into ``out_dir``, a temp folder the runner
renames into place when ``run`` returns. It knows nothing of Hydra's runtime or DVC, so
the Hydra runner and the DVC entry point call the same code.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import DictConfig

from pipeline.errors import UserError

StageInputs = dict[str, Path]  # upstream stage name -> its finished folder


@dataclass
class StageResult:
    metrics: dict[str, Any] = field(default_factory=dict)


class Stage(abc.ABC):
    name: ClassVar[str] = ""
    version: ClassVar[str] = "1"  # bump when outputs change for the same inputs (cache key)
    config_keys: ClassVar[tuple[str, ...]] = ()  # config groups passed to run(); plus `run`
    requires: ClassVar[tuple[str, ...]] = ()  # upstream stages whose folders run() reads
    # the metric names run() may return (a search's objective is checked against them
    # before the first trial); None: not declared, nothing is checked
    produces: ClassVar[frozenset[str] | None] = None
    implemented: ClassVar[bool] = True

    chain_name: str = ""  # the name the chain runs this stage under (set by build_chain)

    def external_files(self, cfg: DictConfig) -> list[Path]:
        """Files outside the run that ``run`` reads (a user's model, a data folder): their
        contents are part of the stage's cache key, so an edited file is never served
        from the cache. Listing them may raise UserError for a malformed source."""
        return []

    @abc.abstractmethod
    def run(self, inputs: StageInputs, cfg: DictConfig, out_dir: Path) -> StageResult:
        """Read ``inputs``, write artifacts into ``out_dir``, return metrics."""


def latest_model(inputs: StageInputs) -> Path:
    """The newest ``model.onnx`` among the upstream folders (stages run in order)."""
    for folder in reversed(list(inputs.values())):
        if (folder / "model.onnx").is_file():
            return folder / "model.onnx"
    raise UserError("stages.order: no upstream stage produced model.onnx (is export first?)")
