"""MeasuredPredictor: batch latencies from what the instances measured at warm-up.

Every instance times its batch sizes when it starts; those tables, keyed by (model, cores),
are the most honest prediction there is for configurations already seen. For a core count
not measured it falls back to the combined-operator predictor when one is given, else to
the nearest measured count, assuming no speed-up from more cores (conservative) and a
proportional slow-down from fewer. Between batch sizes it interpolates linearly; beyond the
largest it extrapolates from the last two points — or, when only one batch size was
measured (an instance started at batch 1 times only that), takes the fallback's curve scaled
to that measurement (a model-less variant's profile knows the rest).
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
        self._tables: dict[tuple[str, int], dict[int, float]] = {}
        self._fallback = fallback

    def set_fallback(self, fallback: LatencyPredictor | None) -> None:
        self._fallback = fallback

    def observe(self, model_key: str, cpus: int, exec_ms_by_batch: Mapping[int, float]) -> None:
        """Merge an instance's warm-up table (newer measurements replace older ones)."""
        if exec_ms_by_batch:
            self._tables.setdefault((model_key, cpus), {}).update(exec_ms_by_batch)

    def known(self, model_key: str) -> bool:
        return any(key == model_key for key, _ in self._tables)

    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float:
        table = self._tables.get((model_key, cpus))
        if table is not None and gpu_pct == 0:
            top = max(table)
            if batch_size > top and len(table) == 1 and self._fallback is not None:
                # beyond what was measured: the profile's shape, scaled to the measurement
                try:
                    at_top = self._fallback.predict_latency_ms(model_key, top, cpus, 0)
                    beyond = self._fallback.predict_latency_ms(model_key, batch_size, cpus, 0)
                except LookupError:
                    pass
                else:
                    if at_top > 0:
                        return beyond * table[top] / at_top
            return _interpolate(table, batch_size)
        if self._fallback is not None:
            try:
                return self._fallback.predict_latency_ms(model_key, batch_size, cpus, gpu_pct)
            except LookupError:
                pass  # not profiled: fall through to the measured tables
        if gpu_pct:
            raise LookupError(f"{model_key}: no GPU measurements")
        measured = sorted(c for key, c in self._tables if key == model_key)
        if not measured:
            raise LookupError(f"{model_key}: nothing measured yet")
        below = [c for c in measured if c <= cpus]
        base = below[-1] if below else measured[0]
        slowdown = 1.0 if base <= cpus else base / cpus
        return _interpolate(self._tables[(model_key, base)], batch_size) * slowdown
