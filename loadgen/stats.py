"""Report maths: percentiles, rates, SLO violations, breakdowns, from recorded requests.

Pure: no I/O, no clock. Definitions (also in loadgen/README.md):

* latency percentiles use successful (200) requests only, numpy's `linear` method;
* an SLO violation is a request that failed (any status but 200, or no response) or took
  longer than its function's SLO; the violation rate divides by all requests;
* offered rate = requests / run window; achieved rate = successful responses / max(run window,
  last completion), so replies that arrive late pull it down;
* breakdown means are over successful requests: cold start (0 when warm), queue, exec, and
  "other" = latency minus those three (HTTP, gateway, client), floored at 0.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from loadgen.records import InstanceSample, RequestRecord

OVERALL = "(all)"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation; NaN for no values."""
    if len(values) == 0:
        return math.nan
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="linear"))


def nan_mean(values: Sequence[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return sum(present) / len(present) if present else math.nan


def violates_slo(record: RequestRecord, slo_ms: float | None) -> bool:
    if not record.ok:
        return True
    return slo_ms is not None and record.latency_ms > slo_ms


@dataclass(frozen=True, slots=True)
class LatencyStats:
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float

    @staticmethod
    def of(latencies_ms: Sequence[float]) -> LatencyStats:
        return LatencyStats(
            p50_ms=percentile(latencies_ms, 50),
            p90_ms=percentile(latencies_ms, 90),
            p99_ms=percentile(latencies_ms, 99),
            max_ms=max(latencies_ms) if latencies_ms else math.nan,
            mean_ms=nan_mean(latencies_ms),
        )


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Mean ms per successful request, stacking up to the mean latency."""

    cold_start_ms: float
    queue_ms: float
    exec_ms: float
    other_ms: float


@dataclass(frozen=True, slots=True)
class FunctionSummary:
    function: str
    slo_ms: float | None
    requests: int
    ok: int
    errors: int
    errors_by_status: dict[str, int]
    errors_by_code: dict[str, int]
    offered_rps: float
    achieved_rps: float
    latency: LatencyStats
    slo_violations: int
    slo_violation_rate: float
    cold_starts: int
    cold_start_ms_mean: float  # over cold requests only
    queue_ms_mean: float
    exec_ms_mean: float
    breakdown: Breakdown
    batch_sizes: dict[str, int] = field(default_factory=dict)
    send_lag_ms_p99: float = math.nan


def breakdown_of(ok_records: Sequence[RequestRecord]) -> Breakdown:
    if not ok_records:
        return Breakdown(math.nan, math.nan, math.nan, math.nan)

    def part(value: float) -> float:
        return 0.0 if math.isnan(value) else value

    cold = [part(r.cold_start_ms) if r.cold_start else 0.0 for r in ok_records]
    queue = [part(r.queue_ms) for r in ok_records]
    execute = [part(r.exec_ms) for r in ok_records]
    other = [
        max(0.0, r.latency_ms - c - q - e)
        for r, c, q, e in zip(ok_records, cold, queue, execute, strict=True)
    ]
    n = len(ok_records)
    return Breakdown(sum(cold) / n, sum(queue) / n, sum(execute) / n, sum(other) / n)


def achieved_window_s(records: Sequence[RequestRecord], window_s: float) -> float:
    last_s = max((r.completed_s for r in records if r.ok), default=0.0)
    return max(window_s, last_s, 1e-9)


def summarize_function(
    function: str,
    records: Sequence[RequestRecord],
    slo_ms_by_function: Mapping[str, float | None],
    window_s: float,
) -> FunctionSummary:
    """Summary of `records` (one function's, or all of them for OVERALL)."""
    ok_records = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    latencies = [r.latency_ms for r in ok_records]
    violations = sum(1 for r in records if violates_slo(r, slo_ms_by_function.get(r.function)))
    cold = [r for r in ok_records if r.cold_start]
    batches = Counter(r.batch_size for r in ok_records if r.batch_size > 0)
    slos = {slo_ms_by_function.get(r.function) for r in records}
    slo_ms = slo_ms_by_function.get(function)
    if function == OVERALL:  # one SLO only when every function shares it
        slo_ms = next(iter(slos)) if len(slos) == 1 else None
    return FunctionSummary(
        function=function,
        slo_ms=slo_ms,
        requests=len(records),
        ok=len(ok_records),
        errors=len(failed),
        errors_by_status=dict(sorted(Counter(str(r.status) for r in failed).items())),
        errors_by_code=dict(sorted(Counter(r.error or "?" for r in failed).items())),
        offered_rps=len(records) / window_s if window_s > 0 else math.nan,
        achieved_rps=len(ok_records) / achieved_window_s(records, window_s),
        latency=LatencyStats.of(latencies),
        slo_violations=violations,
        slo_violation_rate=violations / len(records) if records else math.nan,
        cold_starts=len(cold),
        cold_start_ms_mean=nan_mean([r.cold_start_ms for r in cold]),
        queue_ms_mean=nan_mean([r.queue_ms for r in ok_records]),
        exec_ms_mean=nan_mean([r.exec_ms for r in ok_records]),
        breakdown=breakdown_of(ok_records),
        batch_sizes={str(k): v for k, v in sorted(batches.items())},
        send_lag_ms_p99=percentile([r.send_lag_ms for r in records], 99),
    )


def summarize(
    records: Sequence[RequestRecord],
    slo_ms_by_function: Mapping[str, float | None],
    window_s: float,
) -> dict[str, FunctionSummary]:
    """Per function (in first-seen order, plus functions with an SLO but no requests) and
    OVERALL last."""
    names = list(dict.fromkeys([*slo_ms_by_function, *(r.function for r in records)]))
    result = {
        name: summarize_function(
            name, [r for r in records if r.function == name], slo_ms_by_function, window_s
        )
        for name in names
    }
    result[OVERALL] = summarize_function(OVERALL, records, slo_ms_by_function, window_s)
    return result


def rate_series(
    records: Sequence[RequestRecord], window_s: float, bin_s: float = 1.0
) -> tuple[list[float], list[float], list[float]]:
    """(bin start s, offered rps by send time, achieved rps by completion time)."""
    end_s = max([window_s, *(r.completed_s for r in records if r.ok)])
    bins = max(1, math.ceil(end_s / bin_s))
    offered = [0] * bins
    achieved = [0] * bins
    for r in records:
        offered[min(int(r.sent_s // bin_s), bins - 1)] += 1
        if r.ok:
            achieved[min(int(r.completed_s // bin_s), bins - 1)] += 1
    starts = [i * bin_s for i in range(bins)]
    return starts, [n / bin_s for n in offered], [n / bin_s for n in achieved]


def instance_series(
    samples: Sequence[InstanceSample], state: str = "ready"
) -> tuple[list[float], list[int]]:
    """Total instances in `state` at each poll time."""
    totals: dict[float, int] = {}
    for s in samples:
        totals.setdefault(s.t_s, 0)
        if s.state == state:
            totals[s.t_s] += s.count
    times = sorted(totals)
    return times, [totals[t] for t in times]


def latency_cdf(latencies_ms: Sequence[float]) -> tuple[list[float], list[float]]:
    """Sorted latencies and their empirical CDF values (i / n)."""
    ordered = sorted(latencies_ms)
    n = len(ordered)
    return ordered, [(i + 1) / n for i in range(n)]


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else round(value, 6)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def summary_to_json(summary: FunctionSummary) -> dict[str, Any]:
    """A plain dict for summary.json: NaN becomes null, floats keep 6 decimals."""
    result: dict[str, Any] = _jsonable(asdict(summary))
    return result
