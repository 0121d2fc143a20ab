"""The optimize loop: an ordered pass list repeated to a fixed point, verified once per round.

Written here, not taken from a library, because the verification contract is npuflow's:
every pass's output must compute what the export computes, in onnxruntime.

Where the time went (light_vgg19, 575 MB of weights, profiled with cProfile): each
onnxruntime session on the model costs a serialization (2.3 s) and a build (1.9 s), and
the loop built one after every pass that changed the model, re-ran passes on the very
model they had just produced, and deep-copied the model for each pass. Now:

- A round is verified once, on its last model. Only when that fails are the outputs of
  the round's changing passes verified one by one, in order: the first that breaks the
  function is named, the same pass a check after every pass would have named (each
  pass's output is kept until the round ends).
- A pass is not run on a model it has already seen: its own output (no pass changed the
  model since) or an input it could not handle. A pass is expected to reach its own fixed
  point in one application (the library cleanups and npuflow's passes do: the zoo's and
  onnx's test-data models come out bit-identical, tests/test_optimize.py).
- A registered pass that does not modify its input is not given a copy (``PURE``).
- A changed model is serialized once, for the checker and for the round's session.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from pipeline import onnx_io
from pipeline.errors import PassNotApplicable, UserError
from pipeline.optimizer.verify import Difference, compare, reference_outputs

Pass = Callable[[onnx.ModelProto], onnx.ModelProto]


@dataclass
class Step:
    """One pass in one round: the model before and after (the same object if unchanged)."""
    round: int
    name: str
    before: onnx.ModelProto
    after: onnx.ModelProto
    seconds: float
    ran: bool

    @property
    def changed(self) -> bool:
        return self.after is not self.before


class Verifier:
    """The export's outputs on seeded inputs, and the tolerance a model is held to. The
    outputs are computed on first use: a pass list that changes nothing (a graph built
    clean) costs no onnxruntime session."""

    def __init__(self, original: onnx.ModelProto, seed: int, tolerance: float,
                 abs_tolerance: float) -> None:
        self.original, self.seed = original, seed
        self.tolerance, self.abs_tolerance = tolerance, abs_tolerance

    @classmethod
    def of(cls, original: onnx.ModelProto, seed: int, tolerance: float,
           abs_tolerance: float) -> Verifier:
        return cls(original, seed, tolerance, abs_tolerance)

    @functools.cached_property
    def _reference(self) -> tuple[list[dict], list[list[np.ndarray]]]:
        return reference_outputs(self.original, self.seed)

    def difference(self, model: onnx.ModelProto | bytes, where: str) -> Difference:
        feeds, expected = self._reference
        return compare(model, feeds, expected, where)

    def check(self, model: onnx.ModelProto | bytes, name: str) -> Difference:
        """The difference, or the error naming pass ``name`` when it is out of tolerance."""
        diff = self.difference(model, f"optimize pass '{name}'")
        if not diff.within(self.tolerance, self.abs_tolerance):
            raise UserError(
                f"optimize.passes: pass '{name}' changed the model's outputs "
                f"(max relative error {diff.max_rel:.3g} > optimize.tolerance "
                f"{self.tolerance:g}, max abs error {diff.max_abs:.3g} > "
                f"optimize.abs_tolerance {self.abs_tolerance:g})")
        return diff


@dataclass
class Round:
    number: int
    steps: list[Step]
    error: Difference  # the round's model against the export (the last known, if unchanged)
    verify_seconds: float
    verified: bool  # False: no pass changed the model, there was nothing to run


def apply(name: str, fn: Pass, model: onnx.ModelProto, pure: bool
          ) -> tuple[onnx.ModelProto, bytes | None]:
    """One pass, its output checked; returns the model and, if it changed, its bytes. A
    pass that crashes or returns an invalid model is not applicable to this graph (a
    config mistake stays a UserError)."""
    try:
        out = fn(model if pure else copy.deepcopy(model))
    except (UserError, PassNotApplicable):
        raise
    except Exception as exc:  # a library pass failing on this graph
        raise PassNotApplicable(f"{type(exc).__name__}: {str(exc)[:200]}") from exc
    if out is model or out == model:  # changed nothing: the input was checked and verified
        return model, None
    data = out.SerializeToString()
    try:
        onnx_io.check_model(data, f"pass '{name}' output")
    except UserError as exc:
        raise PassNotApplicable(str(exc)) from exc
    return out, data


def _verify_round(steps: list[Step], model: onnx.ModelProto, data: bytes | None,
                  verifier: Verifier, number: int) -> Difference:
    """The round's last model against the export; on failure, the changing passes' outputs
    in order, so the error names the first pass that broke the function."""
    try:
        diff = verifier.difference(data or model, f"optimize round {number}")
        if diff.within(verifier.tolerance, verifier.abs_tolerance):
            return diff
    except UserError:
        pass
    for step in steps:
        if step.changed:
            verifier.check(step.after, step.name)
    raise UserError(f"optimize round {number}: the model's outputs changed, but no single "
                    "pass's output fails on its own (a pass is not deterministic)")


def run_passes(model: onnx.ModelProto, passes: list[tuple[str, Pass, bool]], max_rounds: int,
               verifier: Verifier, on_skip: Callable[[str, str], None]
               ) -> tuple[onnx.ModelProto, list[Round]]:
    """Rounds of ``passes`` (name, function, pure) until one changes no node count."""
    seen: dict[str, onnx.ModelProto] = {}  # per pass: its last output, or the input it refused
    rounds: list[Round] = []
    current = Difference(0.0, 0.0)  # the export runs bit-identically in the same options
    data: bytes | None = None
    for number in range(1, max_rounds + 1):
        start, steps = model, []
        for name, fn, pure in passes:
            before = model
            if seen.get(name) is model:
                steps.append(Step(number, name, model, model, 0.0, ran=False))
                continue
            t0 = time.perf_counter()
            try:
                model, out_data = apply(name, fn, before, pure)
            except PassNotApplicable as exc:
                on_skip(name, str(exc))
                seen[name] = before
                continue
            if out_data is not None:
                data = out_data
            seen[name] = model
            steps.append(Step(number, name, before, model, time.perf_counter() - t0, ran=True))
        t0 = time.perf_counter()
        if model is not start:
            current = _verify_round(steps, model, data, verifier, number)
        rounds.append(Round(number, steps, current, time.perf_counter() - t0,
                            verified=model is not start))
        if len(model.graph.node) == len(start.graph.node):
            break
    return model, rounds
