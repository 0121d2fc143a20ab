"""``hydra/sweeper: npuflow`` (the default in conf/config.yaml): Hydra's basic grid
sweeper with two changes for design-space grids.

- Jobs are composed by ``pipeline.sweeps.sweep_compose.MemoConfigLoader`` (once per config-group
  combination, then the job's values applied), in this process and in the launcher's.
- The batch check before launch composes one job per distinct override (every value of
  every swept key is proven to compose and to pass the door check, ``check_complete``, in
  a real job's context) instead of every job: the basic sweeper composes each job twice,
  and that check alone ran at ~5 jobs/s.

A swept value that is wrong on its own (a typo, ``simulate.frames=0``) stops the sweep in
one line before any job runs. Points that are valid but cannot run (tiles over SRAM, an op
the profile refuses) are the job's business: ``pipeline.cli.sweep_job`` records them as
infeasible and the sweep goes on.
"""

# no ``from __future__ import annotations``: Hydra's plugin scan runs this module outside
# sys.modules, where dataclasses cannot resolve string annotations
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from hydra_plugins.npuflow.job import task_config
from pipeline.configuration.config import check_complete
from pipeline.sweeps.sweep_compose import MemoConfigLoader


@dataclass
class NpuflowSweeperConf:
    _target_: str = "hydra_plugins.npuflow.sweeper.NpuflowSweeper"
    max_batch_size: int | None = None
    params: dict[str, str] | None = None


ConfigStore.instance().store(group="hydra/sweeper", name="npuflow", node=NpuflowSweeperConf,
                             provider="npuflow")


class NpuflowSweeper(BasicSweeper):
    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        loader = hydra_context.config_loader
        if not isinstance(loader, MemoConfigLoader):
            hydra_context = replace(hydra_context, config_loader=MemoConfigLoader(loader))
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        assert self.config is not None and self.hydra_context is not None
        covered: set[str] = set()
        for overrides in batch:
            if not covered.issuperset(overrides):
                cfg = self.hydra_context.config_loader.load_sweep_config(
                    master_config=self.config, sweep_overrides=list(overrides))
                task = task_config(cfg)  # the job's config, as run_job makes it
                check_complete(task, dict(cfg.hydra.runtime.choices), list(overrides))
                covered.update(overrides)
