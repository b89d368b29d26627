"""The stepwise search for the maximum sustainable rate under an SLO: pure decisions only.

Pure: no I/O, no clock. The shell (`runner`) runs one constant-rate step at the rate
`next_rate` returns, judges it with `judge_step`, folds it in with `record_step`, and stops
when `next_rate` returns None. A step passes when p99 <= SLO, no request failed, and the
achieved rate is >= 97 % of the offered rate. A step that loads several functions at once
(a mix) is judged by `judge_mix`: it passes only when every function's step passes.

Search: start at `start_rps`, multiply by `growth` after each pass (capped at
`max_rate_rps`); after the first failure, bisect between the best pass and the lowest
failure until they are within `precision` (relative) of each other. If the very first step
fails, divide by `growth` until a step passes. At most `max_steps` steps, always.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from loadgen.stats import FunctionSummary

MIN_ACHIEVED_FRACTION = 0.97


@dataclass(frozen=True, slots=True)
class SearchConfig:
    start_rps: float = 5.0
    growth: float = 2.0
    max_steps: int = 8
    max_rate_rps: float = 2000.0
    min_rate_rps: float = 0.5
    precision: float = 0.1  # stop bisecting when (fail - pass) / pass <= this
    step_s: float = 10.0
    pause_s: float = 1.0  # idle time between steps, so one step's tail does not hit the next

    def __post_init__(self) -> None:
        if not self.start_rps > 0:
            raise ValueError(f"start_rps={self.start_rps}: must be > 0")
        if not self.growth > 1:
            raise ValueError(f"growth={self.growth}: must be > 1")
        if not 1 <= self.max_steps <= 50:
            raise ValueError(f"max_steps={self.max_steps}: choose 1..50")
        if not self.max_rate_rps >= self.start_rps:
            raise ValueError(f"max_rate_rps={self.max_rate_rps}: must be >= start_rps")
        if not self.step_s > 0:
            raise ValueError(f"step_s={self.step_s}: must be > 0")


@dataclass(frozen=True, slots=True)
class StepVerdict:
    rate_rps: float  # the step's target rate
    offered_rps: float  # what was actually sent (Poisson: differs from the target)
    passed: bool
    reason: str  # "" when passed
    p99_ms: float
    achieved_rps: float
    errors: int
    requests: int


@dataclass(frozen=True, slots=True)
class SearchState:
    steps: tuple[StepVerdict, ...] = ()
    best_pass_rps: float | None = None
    lowest_fail_rps: float | None = None

    @property
    def result_rps(self) -> float | None:
        return self.best_pass_rps


def judge_step(rate_rps: float, summary: FunctionSummary, slo_ms: float | None) -> StepVerdict:
    reasons: list[str] = []
    p99_ms = summary.latency.p99_ms
    if summary.requests == 0:
        reasons.append("no requests were sent")
    if summary.errors:
        reasons.append(f"{summary.errors} error(s) {summary.errors_by_code}")
    if slo_ms is not None and (math.isnan(p99_ms) or p99_ms > slo_ms):
        reasons.append(f"p99 {p99_ms:.1f} ms > SLO {slo_ms:g} ms")
    if summary.achieved_rps < MIN_ACHIEVED_FRACTION * summary.offered_rps:
        reasons.append(
            f"achieved {summary.achieved_rps:.1f} rps < {MIN_ACHIEVED_FRACTION:.0%} of offered "
            f"{summary.offered_rps:.1f} rps"
        )
    return StepVerdict(
        rate_rps=rate_rps,
        offered_rps=summary.offered_rps,
        passed=not reasons,
        reason="; ".join(reasons),
        p99_ms=p99_ms,
        achieved_rps=summary.achieved_rps,
        errors=summary.errors,
        requests=summary.requests,
    )


def judge_mix(
    rate_rps: float,
    summaries: Sequence[FunctionSummary],
    slo_ms_by_function: Mapping[str, float | None],
) -> StepVerdict:
    """One verdict for a step that loaded every function in `summaries` together (`rate_rps`
    is the total): passed only if each function passes `judge_step` on its own; rates and
    counts are summed, p99 is the worst function's, reasons name their function."""
    if not summaries:
        raise ValueError("judge_mix needs at least one function's summary")
    verdicts = [
        (s.function, judge_step(rate_rps, s, slo_ms_by_function.get(s.function))) for s in summaries
    ]
    p99s = [v.p99_ms for _, v in verdicts]
    return StepVerdict(
        rate_rps=rate_rps,
        offered_rps=sum(v.offered_rps for _, v in verdicts),
        passed=all(v.passed for _, v in verdicts),
        reason="; ".join(f"{name}: {v.reason}" for name, v in verdicts if not v.passed),
        p99_ms=math.nan if any(math.isnan(p) for p in p99s) else max(p99s),
        achieved_rps=sum(v.achieved_rps for _, v in verdicts),
        errors=sum(v.errors for _, v in verdicts),
        requests=sum(v.requests for _, v in verdicts),
    )


def record_step(state: SearchState, verdict: StepVerdict) -> SearchState:
    best = state.best_pass_rps
    fail = state.lowest_fail_rps
    if verdict.passed:
        best = verdict.rate_rps if best is None else max(best, verdict.rate_rps)
    else:
        fail = verdict.rate_rps if fail is None else min(fail, verdict.rate_rps)
    return replace(state, steps=(*state.steps, verdict), best_pass_rps=best, lowest_fail_rps=fail)


def next_rate(state: SearchState, config: SearchConfig) -> float | None:
    """The next step's rate, or None when the search is over."""
    if len(state.steps) >= config.max_steps:
        return None
    if not state.steps:
        return config.start_rps
    best, fail = state.best_pass_rps, state.lowest_fail_rps
    if fail is None:  # still climbing
        assert best is not None
        if best >= config.max_rate_rps:
            return None
        return min(best * config.growth, config.max_rate_rps)
    if best is None:  # nothing passed yet: back off
        lower = fail / config.growth
        return lower if lower >= config.min_rate_rps else None
    settled = (fail - best) / best <= config.precision
    return None if settled else (best + fail) / 2.0
