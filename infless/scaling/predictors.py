"""Latency predictors the planner can use besides the combined-operator one (`infless.profiler`).

- `TablePredictor`: measured tables `(model, b, c, g) -> ms` — warm-up measurements, or
  INFless's reference profiles (`<model> <cpuThreads> <gpuPercent> <batch> <latency_ms>`,
  where 9999 and larger mean "infeasible"). Batch sizes between two measured ones are
  interpolated linearly; anything else unmeasured raises `LookupError` (infeasible).
- `AnalyticPredictor`: `fixed + per_item · b^batch_exp / (c^cpu_exp + gpu_per_pct · g)`, for
  the simulator and tests.
- `ScaledPredictor`: every prediction × a factor (INFless ablations ×1.5 and ×2, safety offset).
- `CachedPredictor`: memoises another predictor (the planner asks the same questions each tick).

All satisfy `LatencyPredictor`, the structural protocol of `infless.profiler.predictor`.
Pure: no I/O, no clock (parsing takes text, not paths).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

INFEASIBLE_MS = 9999.0  # the reference tables' sentinel; larger values are time-outs


class LatencyPredictor(Protocol):
    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float: ...


class TablePredictor:
    """Predictions from measured points; linear in batch size between measured sizes."""

    def __init__(self, rows: Mapping[tuple[str, int, int, int], float]) -> None:
        curves: dict[tuple[str, int, int], list[tuple[int, float]]] = {}
        for (model, batch, cpus, gpu_pct), latency_ms in rows.items():
            value = math.inf if latency_ms >= INFEASIBLE_MS else float(latency_ms)
            curves.setdefault((model, cpus, gpu_pct), []).append((batch, value))
        self._curves = {key: sorted(points) for key, points in curves.items()}

    @staticmethod
    def parse_reference(text: str) -> TablePredictor:
        """Rows in INFless's profile format: `<model> <cpuThreads> <gpuPercent> <batch> <ms>`."""
        rows: dict[tuple[str, int, int, int], float] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            if len(fields) != 5:
                raise ValueError(
                    f"profile line {number}: {line!r} has {len(fields)} fields; expected "
                    "<model> <cpuThreads> <gpuPercent> <batch> <latency_ms>"
                )
            model, cpus, gpu_pct, batch, latency_ms = fields
            rows[(model, int(batch), int(cpus), int(gpu_pct))] = float(latency_ms)
        return TablePredictor(rows)

    def configurations(self, model_key: str) -> list[tuple[int, int, int]]:
        """Every measured (batch, cpus, gpu_pct) of a model."""
        return sorted(
            (batch, cpus, gpu)
            for (model, cpus, gpu), points in self._curves.items()
            if model == model_key
            for batch, _ in points
        )

    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float:
        points = self._curves.get((model_key, cpus, gpu_pct))
        if points is None:
            raise LookupError(
                f"no measured latency for {model_key!r} at {cpus} cores, {gpu_pct}% GPU"
            )
        try:
            return interpolate(points, batch_size)
        except LookupError as exc:
            raise LookupError(f"{model_key!r} at {cpus} cores, {gpu_pct}% GPU: {exc}") from None


def interpolate(points: Sequence[tuple[int, float]], batch_size: float) -> float:
    """t_exec at `batch_size` from (batch, ms) points sorted by batch: a measured point, the
    smallest's below it, linear between two; `LookupError` beyond the largest."""
    batches = [b for b, _ in points]
    index = bisect.bisect_left(batches, batch_size)
    if index < len(points) and batches[index] == batch_size:
        return points[index][1]
    if index == 0:
        return points[0][1]
    if index == len(points):
        raise LookupError(f"batch {batch_size:g} is beyond the largest measured ({batches[-1]})")
    (b0, t0), (b1, t1) = points[index - 1], points[index]
    return t0 + (t1 - t0) * (batch_size - b0) / (b1 - b0)


@dataclass(frozen=True, slots=True)
class AnalyticModel:
    """t_exec = fixed + per_item · b^batch_exp / (c^cpu_exp + gpu_per_pct · g), in ms."""

    fixed_ms: float
    per_item_ms: float
    batch_exp: float = 0.85  # < 1: batching amortises work
    cpu_exp: float = 0.8  # < 1: cores scale sub-linearly
    gpu_per_pct: float = 0.0  # core-equivalents per GPU percent (0: no GPU speed-up)

    def latency_ms(self, batch_size: int, cpus: int, gpu_pct: int = 0) -> float:
        if gpu_pct > 0 and self.gpu_per_pct <= 0:
            return math.inf
        speed = math.pow(max(cpus, 1), self.cpu_exp) + self.gpu_per_pct * gpu_pct
        return self.fixed_ms + self.per_item_ms * math.pow(batch_size, self.batch_exp) / speed


class AnalyticPredictor:
    def __init__(self, models: Mapping[str, AnalyticModel]) -> None:
        self.models = dict(models)

    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float:
        model = self.models.get(model_key)
        if model is None:
            raise LookupError(f"no analytic latency model for {model_key!r}")
        return model.latency_ms(batch_size, cpus, gpu_pct)


class ScaledPredictor:
    """Every prediction of `inner` times `factor` (>1 pessimistic)."""

    def __init__(self, inner: LatencyPredictor, factor: float) -> None:
        if factor <= 0:
            raise ValueError(f"factor = {factor}: must be > 0")
        self.inner = inner
        self.factor = factor

    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float:
        return self.inner.predict_latency_ms(model_key, batch_size, cpus, gpu_pct) * self.factor


class CachedPredictor:
    """Memoises `inner` (including its LookupErrors); `clear()` after profiles change."""

    def __init__(self, inner: LatencyPredictor) -> None:
        self.inner = inner
        self._memo: dict[tuple[str, int, int, int], float | LookupError] = {}

    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float:
        key = (model_key, batch_size, cpus, gpu_pct)
        hit = self._memo.get(key)
        if hit is None:
            try:
                hit = self.inner.predict_latency_ms(model_key, batch_size, cpus, gpu_pct)
            except LookupError as exc:
                hit = exc
            self._memo[key] = hit
        if isinstance(hit, LookupError):
            raise hit
        return hit

    def clear(self) -> None:
        self._memo.clear()


def table_from_measurements(
    model_key: str, measured: Iterable[tuple[int, int, int, float]]
) -> TablePredictor:
    """A table for one model from warm-up measurements `(batch, cpus, gpu_pct, ms)`."""
    return TablePredictor({(model_key, b, c, g): ms for b, c, g, ms in measured})
