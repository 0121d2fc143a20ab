"""The fit: bounded least squares on log-latency (scipy), and leave-one-out.

Why log-latency: a board's rows span 1 ms to 100 ms, and a 10% miss should weigh the same
on each. Why a change of variables: each free parameter moves in log space scaled to its
bounds (0 at ``low``, 1 at ``high``, offset by 1 so that scipy's relative finite-difference
step is the same size for every parameter); a parameter spanning 500-50000 cycles and one
spanning 4-34 GB/s then take comparable steps. The cost model is piecewise (a tile choice
flips, a kernel moves between CPU and NPU), so the Jacobian is taken with a 2% step of the
log range rather than at machine precision. scipy's trust-region reflective method keeps
every iterate inside the bounds; the result is deterministic.

Why per-layer times weigh what they do: a network's layers are one measurement session
of one network, so together they count like one row: each of a row's n matched kernels
contributes ``ln(predicted / measured) / sqrt(n)`` (sum of squares = the mean squared
layer error), and a 300-layer network cannot drown the other rows.

Why a prior: a handful of networks rarely pins every parameter down. Where the profile gives
a parameter a ``spread``, the fit maximises the posterior instead of the likelihood (each
row's ln error has standard deviation ``ROW_SCATTER``, each parameter a log-normal prior of
width ln(spread) around the profile's value): residual ``ln(p / p0) / ln(spread)``, scaled
by ``ROW_SCATTER`` to the rows' units. With spreads, the data must outweigh the profile's
evidence before a parameter moves far, and a parameter that only one network feels cannot
run to its bound to explain that network alone (Gelman et al., *Bayesian Data Analysis*,
ch. 14: the normal-prior regression is least squares with pseudo-observations).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from hardware.profile import FreeParameter
from pipeline.calibrate.evaluate import Params
from pipeline.errors import UserError

DIFF_STEP = 0.02
MAX_EVALUATIONS = 60  # per fit; each is one compile + simulate per row
X_TOL = 1e-3  # stop when a step moves a parameter by 0.1% of its log range...
F_TOL = 1e-4  # ...or improves the squared ln error by 0.01%: finer is below the model's grain
ROW_SCATTER = 0.10  # one row's ln error: run-to-run board variation plus the model's grain


@dataclass(frozen=True)
class FitResult:
    params: Params
    rms_log_error: float  # sqrt(mean((ln predicted - ln measured)^2)) at the fit
    evaluations: int


Predict = Callable[[int, Params], float]  # (row index, params) -> latency ms
# (row index, params) -> that row's per-layer ln errors, already weighted (may be empty)
LayerResiduals = Callable[[int, Params], list[float]]


def _no_layers(row: int, params: Params) -> list[float]:
    return []


def _unit(value: float, free: FreeParameter) -> float:
    return math.log(value / free.low) / math.log(free.high / free.low)


def _value(unit: float, free: FreeParameter) -> float:
    return free.low * (free.high / free.low) ** float(np.clip(unit, 0.0, 1.0))


def fit(predict: Predict, rows: Sequence[int], measured: Sequence[float],
        free: Sequence[FreeParameter], prior: Params,
        layers: LayerResiduals = _no_layers,
        groups: Sequence[Hashable] | None = None) -> FitResult:
    """Fit the free parameters to ``measured`` over ``rows`` from the ``prior`` (and to
    the rows' per-layer times, where ``layers`` has any). ``groups`` names each row's
    configuration: repeated measurements of one configuration determine one value."""
    if len(rows) < len(free):
        raise UserError(f"measurements: {len(rows)} row(s) cannot determine {len(free)} free "
                        "parameters (hardware.calibrate); measure more networks or list "
                        "fewer parameters")
    if groups is not None and len({groups[r] for r in rows}) < len(free):
        raise UserError(f"measurements: {len({groups[r] for r in rows})} distinct "
                        f"configuration(s) cannot determine {len(free)} free parameters "
                        "(hardware.calibrate); repeated rows of one configuration count "
                        "once: measure more networks or list fewer parameters")
    prior_values = dict(prior)

    def params(y: np.ndarray) -> Params:
        return tuple((f.key, _value(yi - 1.0, f)) for yi, f in zip(y, free, strict=True))

    def data_residuals(y: np.ndarray) -> np.ndarray:
        p = params(y)
        return np.array([math.log(predict(r, p) / m) for r, m in zip(rows, measured,
                                                                      strict=True)])

    def layer_residuals(y: np.ndarray) -> np.ndarray:
        p = params(y)
        return np.array([e for r in rows for e in layers(r, p)])

    def prior_residuals(y: np.ndarray) -> np.ndarray:
        return np.array([ROW_SCATTER * math.log(v / prior_values[f.key]) / math.log(f.spread)
                         for (_, v), f in zip(params(y), free, strict=True) if f.spread])

    def residuals(y: np.ndarray) -> np.ndarray:
        return np.concatenate([data_residuals(y), layer_residuals(y), prior_residuals(y)])

    y0 = np.array([1.0 + _unit(prior_values[f.key], f) for f in free])
    result = least_squares(residuals, y0, bounds=(1.0, 2.0), method="trf",
                           diff_step=DIFF_STEP, max_nfev=MAX_EVALUATIONS, xtol=X_TOL,
                           ftol=F_TOL)
    best = params(result.x)
    rms = math.sqrt(float(np.mean(data_residuals(result.x) ** 2)))
    return FitResult(best, rms, int(result.nfev))


def leave_one_out(predict: Predict, measured: Sequence[float],
                  free: Sequence[FreeParameter], prior: Params,
                  layers: LayerResiduals = _no_layers,
                  groups: Sequence[Hashable] | None = None,
                  step: Callable[[], None] = lambda: None) -> list[float] | None:
    """Each row predicted by a fit that saw neither it nor any repeat of its configuration
    (``groups``: a repeat left in the fit would make the figure an in-sample one); None
    when fewer distinct configurations remain than there are free parameters."""
    groups = list(groups) if groups is not None else list(range(len(measured)))
    if len(set(groups)) <= len(free):
        return None
    out = []
    for held in range(len(measured)):
        rows = [i for i in range(len(measured)) if groups[i] != groups[held]]
        result = fit(predict, rows, [measured[i] for i in rows], free, prior, layers, groups)
        out.append(predict(held, result.params))
        step()
    return out
