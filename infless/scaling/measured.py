"""MeasuredPredictor: batch latencies from what the instances measured at warm-up.

Every instance times its batch sizes when it starts. Those tables, keyed by (model, cores,
GPU share), are the most honest prediction there is for configurations already seen.

On CPU cores (g = 0):

- A core count not measured goes to the combined-operator predictor when one is given.
  Else it takes the nearest measured count, assuming no speed-up from more cores
  (conservative) and a proportional slow-down from fewer.
- Between batch sizes it interpolates linearly. Beyond the largest it extrapolates from the
  last two points. When only one batch size was measured (an instance started at batch 1
  times only that), it takes the fallback's curve scaled to that measurement (a model-less
  variant's profile knows the rest).

On a GPU share (g > 0):

- A GPU instance's warm-up times at its share are the best prediction for that exact share,
  at any core count: a GPU batch's time is the device's (the GPU profiles are used for every
  c alike: `gpu_profiles`).
- Every other share goes to the fallback (the GPU profiles), never to the CPU tables: a
  core's time says nothing of a GPU's. What the fallback cannot price raises its reason
  (without a fallback: that no instance measured it).

Pure bookkeeping: no I/O, no clock.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from infless.scaling.predictors import LatencyPredictor


def _interpolate(table: Mapping[int, float], batch_size: int) -> float:
    sizes = sorted(table)
    if batch_size in table:
        return table[batch_size]
    if batch_size < sizes[0]:
        return table[sizes[0]]
    if batch_size > sizes[-1]:
        if len(sizes) == 1:
            return table[sizes[0]] * batch_size / sizes[0]
        b0, b1 = sizes[-2], sizes[-1]
        slope = max(0.0, (table[b1] - table[b0]) / (b1 - b0))
        return table[b1] + slope * (batch_size - b1)
    right = bisect.bisect_left(sizes, batch_size)
    b0, b1 = sizes[right - 1], sizes[right]
    weight = (batch_size - b0) / (b1 - b0)
    return table[b0] + weight * (table[b1] - table[b0])


class MeasuredPredictor:
    def __init__(self, fallback: LatencyPredictor | None = None) -> None:
        self._tables: dict[tuple[str, int, int], dict[int, float]] = {}
        self._fallback = fallback

    def set_fallback(self, fallback: LatencyPredictor | None) -> None:
        self._fallback = fallback

    def observe(
        self,
        model_key: str,
        cpus: int,
        exec_ms_by_batch: Mapping[int, float],
        gpu_pct: int = 0,
    ) -> None:
        """Merge an instance's warm-up table (newer measurements replace older ones)."""
        if exec_ms_by_batch:
            self._tables.setdefault((model_key, cpus, gpu_pct), {}).update(exec_ms_by_batch)

    def known(self, model_key: str) -> bool:
        return any(key == model_key for key, _, _ in self._tables)

    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float:
        if gpu_pct > 0:
            return self._on_gpu(model_key, batch_size, cpus, gpu_pct)
        table = self._tables.get((model_key, cpus, 0))
        if table is not None:
            return self._from_table(table, model_key, batch_size, cpus, 0)
        if self._fallback is not None:
            try:
                return self._fallback.predict_latency_ms(model_key, batch_size, cpus, 0)
            except LookupError:
                pass  # not profiled: fall through to the measured tables
        measured = sorted(c for key, c, g in self._tables if key == model_key and g == 0)
        if not measured:
            raise LookupError(
                f"{model_key}: nothing measured yet (an instance times its batch sizes when it "
                "starts; operator profiles from infless profile predict them before)"
            )
        below = [c for c in measured if c <= cpus]
        base = below[-1] if below else measured[0]
        slowdown = 1.0 if base <= cpus else base / cpus
        return _interpolate(self._tables[(model_key, base, 0)], batch_size) * slowdown

    def _on_gpu(self, model_key: str, batch_size: int, cpus: int, gpu_pct: int) -> float:
        """This share as measured (at these cores, else the nearest measured core count),
        else the fallback."""
        at_share = sorted(c for key, c, g in self._tables if key == model_key and g == gpu_pct)
        if at_share:
            nearest = min(at_share, key=lambda c: (abs(c - cpus), c))
            table = self._tables[(model_key, nearest, gpu_pct)]
            return self._from_table(table, model_key, batch_size, nearest, gpu_pct)
        if self._fallback is None:
            raise LookupError(f"{model_key}: no instance measured {gpu_pct} % of a GPU")
        return self._fallback.predict_latency_ms(model_key, batch_size, cpus, gpu_pct)

    def _from_table(
        self, table: Mapping[int, float], model_key: str, batch_size: int, cpus: int, gpu_pct: int
    ) -> float:
        top = max(table)
        if batch_size > top and len(table) == 1 and self._fallback is not None:
            # beyond what was measured: the profile's shape, scaled to the measurement
            try:
                at_top = self._fallback.predict_latency_ms(model_key, top, cpus, gpu_pct)
                beyond = self._fallback.predict_latency_ms(model_key, batch_size, cpus, gpu_pct)
            except LookupError:
                pass
            else:
                if at_top > 0:
                    return beyond * table[top] / at_top
        return _interpolate(table, batch_size)
