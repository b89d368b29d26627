"""Report maths (percentiles, violations, rates, breakdown) and the max-rate search logic."""

from __future__ import annotations

import math

import pytest

from loadgen.maxrate import (
    SearchConfig,
    SearchState,
    judge_mix,
    judge_step,
    next_rate,
    record_step,
)
from loadgen.records import InstanceSample, RequestRecord
from loadgen.stats import (
    OVERALL,
    instance_series,
    percentile,
    rate_series,
    summarize,
    summarize_function,
    summary_to_json,
)


def _ok(
    index: int, latency_ms: float, function: str = "a", sent_s: float = 0.0, **kw: object
) -> RequestRecord:
    return RequestRecord(
        index=index,
        function=function,
        scheduled_s=sent_s,
        sent_s=sent_s,
        latency_ms=latency_ms,
        status=200,
        error="",
        **kw,  # type: ignore[arg-type]  # kw: optional fields, typed object here
    )


def _fail(index: int, status: int, error: str, function: str = "a") -> RequestRecord:
    return RequestRecord(
        index=index,
        function=function,
        scheduled_s=0.0,
        sent_s=0.0,
        latency_ms=math.nan if status == 0 else 1.0,
        status=status,
        error=error,
    )


def test_percentile_interpolates_linearly() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))


def test_violations_count_late_and_failed_requests() -> None:
    records = [
        _ok(0, 10.0),
        _ok(1, 30.0),
        _ok(2, 90.0),
        _fail(3, 429, "overloaded"),
        _fail(4, 0, "timeout"),
    ]
    summary = summarize_function("a", records, {"a": 50.0}, window_s=1.0)
    assert summary.slo_violations == 3  # 90 ms, the 429, the timeout
    assert summary.slo_violation_rate == pytest.approx(0.6)
    assert summary.errors_by_status == {"0": 1, "429": 1}
    assert summary.errors_by_code == {"overloaded": 1, "timeout": 1}
    assert summary.latency.p50_ms == 30.0  # over the 3 successes only
    assert summary.latency.max_ms == 90.0


def test_without_an_slo_only_failures_violate() -> None:
    summary = summarize_function("a", [_ok(0, 1e6), _fail(1, 500, "x")], {"a": None}, 1.0)
    assert summary.slo_violations == 1


def test_rates_use_the_window_or_the_last_reply() -> None:
    records = [_ok(i, 100.0, sent_s=i * 0.1) for i in range(10)]  # last reply at 1.0 s
    on_time = summarize_function("a", records, {"a": None}, window_s=2.0)
    assert on_time.offered_rps == 5.0
    assert on_time.achieved_rps == 5.0
    late = summarize_function("a", [_ok(0, 3000.0)], {"a": None}, window_s=1.0)
    assert late.achieved_rps == pytest.approx(1 / 3)


def test_breakdown_stacks_to_the_mean_latency() -> None:
    records = [
        _ok(0, 100.0, cold_start=True, cold_start_ms=60.0, queue_ms=10.0, exec_ms=20.0),
        _ok(1, 40.0, queue_ms=5.0, exec_ms=20.0),
    ]
    summary = summarize_function("a", records, {"a": None}, 1.0)
    b = summary.breakdown
    assert (b.cold_start_ms, b.queue_ms, b.exec_ms) == (30.0, 7.5, 20.0)
    assert b.cold_start_ms + b.queue_ms + b.exec_ms + b.other_ms == pytest.approx(70.0)
    assert summary.cold_starts == 1
    assert summary.cold_start_ms_mean == 60.0


def test_summarize_per_function_and_overall() -> None:
    records = [
        _ok(0, 10.0, "a", batch_size=2),
        _ok(1, 20.0, "b", batch_size=2),
        _ok(2, 30.0, "b", batch_size=4),
    ]
    summaries = summarize(records, {"a": 15.0, "b": 25.0, "idle": 5.0}, window_s=1.0)
    assert list(summaries) == ["a", "b", "idle", OVERALL]
    assert summaries["idle"].requests == 0
    assert summaries[OVERALL].slo_violations == 1  # b's 30 ms against b's SLO
    assert summaries[OVERALL].slo_ms is None  # SLOs differ
    assert summaries["b"].batch_sizes == {"2": 1, "4": 1}
    as_json = summary_to_json(summaries["idle"])
    assert as_json["latency"]["p99_ms"] is None


def test_rate_series_bins_by_send_and_completion() -> None:
    records = [_ok(0, 1500.0, sent_s=0.2), _ok(1, 10.0, sent_s=0.5), _fail(2, 500, "x")]
    starts, offered, achieved = rate_series(records, window_s=2.0)
    assert starts == [0.0, 1.0]
    assert offered == [3.0, 0.0]
    assert achieved == [1.0, 1.0]


def test_instance_series_sums_ready_instances_per_poll() -> None:
    samples = [
        InstanceSample(0.0, "a", "ready", 1),
        InstanceSample(0.0, "b", "ready", 2),
        InstanceSample(0.0, "b", "starting", 1),
        InstanceSample(1.0, "a", "starting", 1),
    ]
    assert instance_series(samples) == ([0.0, 1.0], [3, 0])


def _verdict_for(rate_rps: float, capacity_rps: float, state: SearchState) -> SearchState:
    """A pretend system that meets the SLO below `capacity_rps`."""
    latency_ms = 10.0 if rate_rps <= capacity_rps else 500.0
    n = max(1, int(rate_rps))
    records = [_ok(i, latency_ms, sent_s=i / rate_rps) for i in range(n)]
    summary = summarize_function("a", records, {"a": 100.0}, window_s=1.0)
    return record_step(state, judge_step(rate_rps, summary, 100.0))


def test_search_climbs_then_bisects_to_the_capacity() -> None:
    config = SearchConfig(
        start_rps=10.0, growth=2.0, max_steps=20, max_rate_rps=10_000, precision=0.05
    )
    state = SearchState()
    rates = []
    while (rate := next_rate(state, config)) is not None:
        rates.append(rate)
        state = _verdict_for(rate, 100.0, state)
    assert rates[:5] == [10.0, 20.0, 40.0, 80.0, 160.0]
    assert state.result_rps is not None
    assert 95.0 <= state.result_rps <= 100.0
    assert len(rates) <= config.max_steps


def test_search_is_bounded_in_steps_and_rate() -> None:
    state = SearchState()
    config = SearchConfig(start_rps=1.0, growth=2.0, max_steps=3, max_rate_rps=1000)
    while (rate := next_rate(state, config)) is not None:
        state = _verdict_for(rate, 1e9, state)
    assert [s.rate_rps for s in state.steps] == [1.0, 2.0, 4.0]
    capped = SearchConfig(start_rps=10.0, growth=10.0, max_steps=10, max_rate_rps=50)
    state = SearchState()
    while (rate := next_rate(state, capped)) is not None:
        state = _verdict_for(rate, 1e9, state)
    assert [s.rate_rps for s in state.steps] == [10.0, 50.0]


def test_search_backs_off_when_the_first_step_fails() -> None:
    config = SearchConfig(start_rps=40.0, growth=2.0, max_steps=10, min_rate_rps=1.0)
    state = SearchState()
    while (rate := next_rate(state, config)) is not None:
        state = _verdict_for(rate, 12.0, state)
    assert [s.rate_rps for s in state.steps][:3] == [40.0, 20.0, 10.0]
    assert state.result_rps is not None
    assert state.result_rps <= 12.0


def test_judge_step_reasons() -> None:
    summary = summarize_function(
        "a", [_ok(0, 500.0), _fail(1, 503, "no_instance")], {"a": 100.0}, 10.0
    )
    verdict = judge_step(0.2, summary, 100.0)
    assert not verdict.passed
    assert "1 error(s)" in verdict.reason
    assert "p99" in verdict.reason


def test_judge_mix_passes_only_when_every_function_passes() -> None:
    slos = {"a": 100.0, "b": 50.0}
    fast_a = summarize_function("a", [_ok(i, 10.0, "a", i / 10) for i in range(10)], slos, 1.0)
    fast_b = summarize_function("b", [_ok(i, 20.0, "b", i / 10) for i in range(10)], slos, 1.0)
    slow_b = summarize_function("b", [_ok(i, 80.0, "b", i / 10) for i in range(10)], slos, 1.0)
    ok = judge_mix(20.0, [fast_a, fast_b], slos)
    assert ok.passed
    assert ok.reason == ""
    assert ok.rate_rps == 20.0
    assert ok.requests == 20
    assert ok.p99_ms == pytest.approx(20.0)
    assert ok.offered_rps == pytest.approx(20.0)
    late = judge_mix(20.0, [fast_a, slow_b], slos)  # 80 ms meets a's SLO but not b's
    assert not late.passed
    assert late.reason.startswith("b: p99")
    assert late.p99_ms == pytest.approx(80.0)
    state = record_step(SearchState(), late)
    assert state.lowest_fail_rps == 20.0
    assert state.best_pass_rps is None
    with pytest.raises(ValueError, match="at least one"):
        judge_mix(1.0, [], slos)
