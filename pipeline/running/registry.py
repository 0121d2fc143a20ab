"""The stage registry and the chain built from config.

``stages.order`` names the chain; ``stages.<name>`` gives each stage's component as a
``_target_`` (any importable class implementing :class:`~pipeline.stages.base.Stage`), so
replacing one stage is one override. Built-in components are listed by name in
:data:`BUILTIN` so ``npuflow`` can report what exists.
"""

from __future__ import annotations

from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from pipeline.errors import UserError
from pipeline.running import user_code
from pipeline.stages.base import Stage
from pipeline.stages.export import ExportStage

STAGE_NAMES = ("export", "optimize", "quantize", "compile", "simulate")
BUILTIN: dict[str, type[Stage]] = {"export": ExportStage}


def build_chain(stages_cfg: DictConfig | dict[str, Any]) -> list[tuple[str, Stage]]:
    cfg = OmegaConf.create(stages_cfg) if isinstance(stages_cfg, dict) else stages_cfg
    order = cfg.get("order")
    if not order:
        raise UserError("stages.order: empty; list the stages to run")
    chain = []
    for name in order:
        spec = cfg.get(name)
        if spec is None or "_target_" not in spec:
            raise UserError(f"stages.order: unknown stage '{name}' (no stages.{name}._target_; "
                            f"configured: {', '.join(k for k in cfg if k != 'order')})")
        try:
            stage = instantiate(spec)
        except InstantiationException as exc:
            reason = " ".join(str(exc).split()).split(", set env var HYDRA_FULL_ERROR")[0]
            cause = user_code.root_cause(exc)
            if cause is not exc:
                reason = f"{reason}: {user_code.explain(cause)}"
            raise UserError(f"stages.{name}._target_: {reason[:300]}") from exc
        if not isinstance(stage, Stage):
            raise UserError(f"stages.{name}._target_: {spec._target_} is not a "
                            "pipeline.stages.base.Stage")
        stage.chain_name = name
        chain.append((name, stage))
    return chain
