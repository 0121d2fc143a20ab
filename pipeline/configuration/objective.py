"""``run.objective``: the metric(s) a search sweeper optimises, checked before it starts.

An objective that no stage produces used to surface after the first run, and under a
sweeper only after every trial had run and been scored as failed. The names a run can
produce are what the chain's stages declare (``Stage.produces``) plus what the eval metric
returns under ``eval.objective`` (and its ``_float`` twin); a misspelling is one line with
the closest names. A chain with a user stage that declares nothing is not checked.
"""

from __future__ import annotations

import difflib

from omegaconf import DictConfig

from pipeline.errors import UserError
from pipeline.running.registry import build_chain


def objectives(cfg: DictConfig) -> list[str]:
    objective = cfg.run.get("objective")
    if not objective:
        return []
    return [str(objective)] if isinstance(objective, str) else [str(o) for o in objective]


def known_metrics(cfg: DictConfig) -> set[str] | None:
    """Every metric name this config's chain can produce, or None if a stage does not say."""
    names: set[str] = set()
    for _, stage in build_chain(cfg.stages):
        if stage.produces is None:
            return None
        names |= stage.produces
    evaluated = cfg.get("eval", {}).get("objective")
    if evaluated:
        names |= {str(evaluated), f"{evaluated}_float"}
    return names


def check(cfg: DictConfig) -> None:
    wanted = objectives(cfg)
    if not wanted:
        return
    known = known_metrics(cfg)
    if known is None:
        return
    for name in wanted:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(close)}?" if close else \
                f"metrics: {', '.join(sorted(known))}"
            raise UserError(f"run.objective: '{name}' is not a metric this chain produces; "
                            f"{hint}")
