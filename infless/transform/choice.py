"""Which way to start an instance: transform an idle one, or start it normally (Optimus §4.4).

A normal start goes the fastest way the server offers: forked from the model's template when
one runs, else from the zygote with the store warm, else a fresh process
(`transform.records.StartPath` names them).

`StartCosts` predicts each way's cost from what starts measured lately: an exponentially
weighted mean per model and way. Before any start was measured, the prediction comes from
the meta-operator profile (building a model = adding every operation) plus the fork or
process start. A transformation's cost is its plan's prediction, scaled by how far measured
transformations have been from their plans so far (the offline profile times meta-operators
alone).

`choose` takes the cheapest. The safeguard: a transformation is taken only when it is
predicted strictly cheaper than the normal start, and never when its plan is infeasible.
Warm-up is left out everywhere, since every way pays it alike.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from infless.transform.records import StartPath

# What a way costs before this server measured it (ms): the fork round trip from a template
# or the zygote, a fresh interpreter importing torch (bench.startup on the dev machine).
_DEFAULT_SPAWN_MS = {StartPath.TEMPLATE: 12.0, StartPath.ZYGOTE: 25.0, StartPath.FRESH: 2500.0}


@dataclass(frozen=True, slots=True)
class Candidate:
    path: StartPath
    predicted_ms: float
    donor: str | None = None  # the idle worker to transform
    donor_function: str | None = None


@dataclass(slots=True)
class StartCosts:
    """Measured start costs (ms, warm-up excluded): per (path, model) and per path."""

    alpha: float = 0.3
    by_model: dict[tuple[StartPath, str], float] = field(default_factory=dict)
    by_path: dict[StartPath, float] = field(default_factory=dict)
    transform_ratio: float = 1.0  # measured over predicted, of the transformations so far

    def record(self, path: StartPath, model: str, measured_ms: float) -> None:
        self.by_model[(path, model)] = self._mean(self.by_model.get((path, model)), measured_ms)
        self.by_path[path] = self._mean(self.by_path.get(path), measured_ms)

    def record_transform(self, predicted_ms: float, measured_ms: float) -> None:
        """A transformation took `measured_ms` where its plan predicted `predicted_ms`: the
        profile's offline costs are scaled to what transformations take on this server."""
        if predicted_ms > 0 and measured_ms > 0:
            ratio = measured_ms / predicted_ms
            self.transform_ratio += self.alpha * (ratio - self.transform_ratio)

    def predict_transform(self, plan_ms: float) -> float:
        return plan_ms * self.transform_ratio

    def _mean(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.alpha * (new - old)

    def predict(self, path: StartPath, model: str, build_ms: float) -> float:
        """A normal start of `model` by `path`: measured for this model if it ever was, else
        this path's spawn (measured for any model, or the default) plus `build_ms` (what the
        profile predicts building it costs; a template fork builds nothing)."""
        measured = self.by_model.get((path, model))
        if measured is not None:
            return measured
        if path is StartPath.TEMPLATE:
            return self.by_path.get(path, _DEFAULT_SPAWN_MS[path])
        spawn = _DEFAULT_SPAWN_MS.get(path, 0.0)
        return spawn + build_ms


def choose(normal: Candidate, transforms: Sequence[Candidate]) -> Candidate:
    """The cheapest candidate; a transformation only when strictly cheaper (the safeguard)."""
    best = normal
    for candidate in transforms:
        if candidate.predicted_ms < best.predicted_ms:
            best = candidate
    return best
