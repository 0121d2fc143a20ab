"""``hydra/launcher=pool``: sweep jobs on a pool of forked worker processes.

Why not joblib: Hydra's joblib launcher ships the Hydra context, the config and every
singleton (the ConfigStore with npuflow's schemas) to a loky worker with each job; on a
mobilenet_v2 compile x simulate grid that costs as much as the job, and two workers ran no
faster than one (benchmarks/RESULTS.md, "Sweep throughput"). Here the workers are forked
after npuflow, the Hydra context and the composition memo (pipeline.sweeps.sweep_compose) are
loaded, and a job crosses the process boundary as its index and overrides. Each worker runs
the job as Hydra's basic launcher does (compose, set ``hydra.job.num``, run it), with
Hydra's job contract at a fraction of its cost (``hydra_plugins/npuflow/job.py``).
``hydra/launcher=npuflow`` (the default) is this launcher with one job at a time in this
process. Linux/macOS only (fork);
use joblib elsewhere. Past one machine: ``hydra/launcher=ray`` (README, "From one laptop
to a cluster").
"""

# no ``from __future__ import annotations``: Hydra's plugin scan runs this module outside
# sys.modules, where dataclasses cannot resolve string annotations
import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus, configure_log, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from hydra_plugins.npuflow.job import run_job
from pipeline.reports.terminal import logged


@dataclass
class PoolLauncherConf:
    _target_: str = "hydra_plugins.npuflow.pool_launcher.PoolLauncher"
    n_jobs: int = -1  # worker processes; -1: one per CPU core


ConfigStore.instance().store(group="hydra/launcher", name="pool", node=PoolLauncherConf,
                             provider="npuflow")
# npuflow's default (conf/sweep/default.yaml): the same launcher, one job after another in
# this process, each run by the lean run_job
ConfigStore.instance().store(group="hydra/launcher", name="npuflow",
                             node=PoolLauncherConf(n_jobs=1), provider="npuflow")

_FORKED: dict[str, Any] = {}  # set in the parent before the fork, read in the workers


def _run(job: tuple) -> JobReturn:
    idx, overrides = job
    context, task_function, config = (_FORKED["context"], _FORKED["task"],
                                      _FORKED["config"])
    sweep_config = context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = idx
        sweep_config.hydra.job.num = idx
    ret = run_job(hydra_context=context, task_function=task_function, config=sweep_config,
                  job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    # back to the parent: the job's result, not its config (which Hydra already saved in
    # the job's .hydra/ folder; npuflow's enums are built at import and do not pickle by
    # reference) nor an exception object that may not pickle
    ret.cfg = ret.hydra_cfg = None
    if ret.status == JobStatus.FAILED:
        error = ret._return_value
        ret._return_value = RuntimeError(f"job {idx}: {type(error).__name__}: {error}")
    return ret


def _say(form: str, *args: object) -> None:
    """The sweep's progress, one line per tenth of its jobs, beside the jobs' own lines."""
    print(form % args, file=sys.stderr, flush=True)


def _then(ret: JobReturn, done: Callable[..., None]) -> JobReturn:
    done()
    return ret


def worker_count(n_jobs: int, jobs: int) -> int:
    """Processes to fork: ``n_jobs`` (-1: one per CPU core), never more than the jobs."""
    wanted = (os.cpu_count() or 1) if n_jobs == -1 else n_jobs
    return max(1, min(jobs, wanted))


class PoolLauncher(Launcher):
    def __init__(self, n_jobs: int = -1) -> None:
        if n_jobs == 0 or n_jobs < -1:
            raise ValueError(f"hydra.launcher.n_jobs: {n_jobs} (use a count >= 1, or -1)")
        self.n_jobs = n_jobs
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
               ) -> Sequence[JobReturn]:
        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        _FORKED.update(context=self.hydra_context, task=self.task_function,
                       config=self.config)
        jobs = [(initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)]
        workers = worker_count(self.n_jobs, len(jobs))
        with logged("sweep", len(jobs), _say) as done:
            if workers <= 1:
                return [_then(_run(job), done) for job in jobs]
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                returns = [_then(r, done) for r in pool.imap(_run, jobs, chunksize=1)]
                # every job is back: let the workers take their stop sentinels and exit.
                # Leaving it to the with-block's terminate() races them: it takes the task
                # queue's read lock for good while a worker may still be waiting on it
                # (a CI run hung there, the idle worker never signalled)
                pool.close()
                pool.join()
                return returns
