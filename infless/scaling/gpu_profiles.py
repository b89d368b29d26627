"""GPU shares priced from measurements: `GpuCurve` (one model's points on one device) and
`GpuProfilePredictor` (the planner's predictor for g > 0, from `infless profile --gpu` rows).

A curve holds the batch times a model measured on one kind of device at several shares
(`profiler.gpu_profile`: one process per share under MPS). It prices <b, g>:

- over the batch size, linearly between measured sizes (as `TablePredictor`); below the
  smallest, the smallest's time; beyond the largest: `LookupError` naming it (a batch never
  run may not fit the device's memory or the share);
- over the share, **linearly in 1/g** between the two measured shares around g. MPS limits
  the SMs a client's kernels may occupy to g %: a kernel with work enough for every SM runs
  in time ∝ 1/g, one that cannot fill even the smaller share (launch-bound, small batches)
  in about the same time at any share; t(g) ≈ a + w/g covers both, and that is a straight
  line in 1/g. A straight line in g would overestimate between two shares of a
  compute-bound model (w/g is convex in g), so a share between two measured ones would be
  priced too slow and seldom chosen;
- below the smallest measured share: `LookupError` ("… measured down to 20 %"): a smaller
  share can fall off a cliff (ResNet-50 bf16 on an H200: 3.9 ms at 25 %, 8.1 ms at 10 %),
  so it is never extrapolated;
- above the largest measured share: the largest's time (a larger share is never slower).

The host-side cores c are not a dimension: a GPU batch's time is the device's, and one core
keeps up with dispatching its kernels and copies. Profiles are measured at c = 1 and used
for every c (the planner then prefers the fewest cores: same rate, fewer units).

`GpuProfilePredictor` holds curves per (device name as NVML reports it, model): the profiles
of an H100 do not price an A10. For a server whose devices carry several names it prices a
share on each and takes the slowest (the planner does not know on which device an instance
lands); a name without a profile of the model makes the share unpriced, with the command
that profiles it. g = 0 goes to the fallback (the CPU predictors).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import Protocol

from infless.scaling.predictors import LatencyPredictor, interpolate


class GpuMeasurement(Protocol):
    """One measured GPU point (`profiler.database.GpuLatencyRow` is one)."""

    @property
    def device_name(self) -> str: ...

    @property
    def model_key(self) -> str: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def gpu_pct(self) -> int: ...

    @property
    def exec_ms(self) -> float: ...


class GpuCurve:
    """t_exec over <batch size, share> of one model on one kind of device (module docstring).

    `points` are (batch_size, gpu_pct, exec_ms); a later point at the same <b, g> replaces an
    earlier one; points that are not measurements (g outside 1..100, a time not > 0) are
    ignored.
    """

    def __init__(self, points: Iterable[tuple[int, int, float]]) -> None:
        by_share: dict[int, dict[int, float]] = {}
        for batch_size, gpu_pct, exec_ms in points:
            if batch_size >= 1 and 0 < gpu_pct <= 100 and math.isfinite(exec_ms) and exec_ms > 0:
                by_share.setdefault(gpu_pct, {})[batch_size] = float(exec_ms)
        self._curves = {g: sorted(times.items()) for g, times in sorted(by_share.items())}
        self.shares_pct: tuple[int, ...] = tuple(self._curves)

    def exec_ms(self, batch_size: float, gpu_pct: int) -> float:
        """t_exec at <batch_size, gpu_pct> (a mean batch may be fractional); `LookupError`
        saying what was not measured."""
        if not self.shares_pct:
            raise LookupError("no GPU points were measured")
        if gpu_pct < self.shares_pct[0]:
            raise LookupError(
                f"{gpu_pct} % is below the smallest share profiled (measured down to "
                f"{self.shares_pct[0]} %)"
            )
        if gpu_pct >= self.shares_pct[-1]:
            return self._at(self.shares_pct[-1], batch_size)
        right = bisect.bisect_left(self.shares_pct, gpu_pct)
        g1 = self.shares_pct[right]
        if g1 == gpu_pct:
            return self._at(g1, batch_size)
        g0 = self.shares_pct[right - 1]
        t0, t1 = self._at(g0, batch_size), self._at(g1, batch_size)
        weight = (1.0 / g0 - 1.0 / gpu_pct) / (1.0 / g0 - 1.0 / g1)  # linear in 1/g
        return t0 + weight * (t1 - t0)

    def _at(self, gpu_pct: int, batch_size: float) -> float:
        try:
            return interpolate(self._curves[gpu_pct], batch_size)
        except LookupError as exc:
            raise LookupError(f"{exc} at {gpu_pct} %") from None


class GpuProfilePredictor:
    """Prices g > 0 from measured GPU profiles of this server's devices; g = 0: `fallback`."""

    def __init__(
        self,
        measurements: Iterable[GpuMeasurement],
        device_names: Sequence[str],
        fallback: LatencyPredictor | None = None,
    ) -> None:
        self.device_names = tuple(dict.fromkeys(device_names))
        points: dict[tuple[str, str], list[tuple[int, int, float]]] = {}
        for m in measurements:
            if m.device_name in self.device_names:
                points.setdefault((m.device_name, m.model_key), []).append(
                    (m.batch_size, m.gpu_pct, m.exec_ms)
                )
        self._curves = {key: GpuCurve(found) for key, found in points.items()}
        self._fallback = fallback

    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float:
        if gpu_pct <= 0:
            if self._fallback is None:
                raise LookupError(f"{model_key!r}: no CPU latency predictor beside GPU profiles")
            return self._fallback.predict_latency_ms(model_key, batch_size, cpus, 0)
        if not self.device_names:
            raise LookupError(f"{model_key}: no GPU on this server to hold {gpu_pct} %")
        slowest = 0.0
        for device in self.device_names:
            curve = self._curves.get((device, model_key))
            if curve is None:
                raise LookupError(
                    f"no GPU profile of {model_key} on {device} "
                    f"(run infless profile --gpu {model_key})"
                )
            try:
                slowest = max(slowest, curve.exec_ms(batch_size, gpu_pct))
            except LookupError as exc:
                raise LookupError(
                    f"GPU profile of {model_key} on {device}: {exc} "
                    f"(infless profile --gpu {model_key} measures more)"
                ) from None
        return slowest
