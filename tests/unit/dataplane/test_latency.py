"""What the data plane measures: service times at their tail, the smallest sustaining batch,
the overhead outside queue and batch, and the budget steered by the measured p99."""

from __future__ import annotations

import pytest

from infless.dataplane.latency import (
    BUDGET_CEILING,
    TAIL_EVERY,
    ExecModel,
    FunctionLatency,
    LoopLag,
    mean_service_ms,
    mean_tail_ratio,
    quantile,
)
from infless.dataplane.policy import FILL_SLACK, slo_dispatch_at

WARMUP = {1: 1.0, 2: 1.2, 4: 1.6, 8: 2.4, 16: 4.0, 32: 7.2}


def test_quantile_is_the_nearest_rank() -> None:
    assert quantile([], 0.99) == 0.0
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert quantile([float(v) for v in range(100)], 0.95) == 94.0


def test_means_interpolate_between_measured_sizes_and_never_fall() -> None:
    model = ExecModel(WARMUP, max_batch=32)
    assert model.mean_ms(4) == 1.6
    assert model.mean_ms(6) == pytest.approx(2.0)  # halfway between 4 and 8
    assert model.mean_ms(64) == pytest.approx(14.4)  # linear beyond the largest
    # nothing served yet: warm-up timings were taken alone, serving shares the cores
    assert model.tail_ms(8) == pytest.approx(model.mean_ms(8) * 2.0)


def test_the_tail_ratio_follows_the_spread_of_served_batches() -> None:
    model = ExecModel(WARMUP, max_batch=32, tail_quantile=0.95)
    for k in range(64):
        model.observe(8, 2.4 * (3.0 if k % 10 == 0 else 1.0))  # one batch in ten is 3x slower
    assert 2.5 < model.tail_ratio <= 3.0
    assert model.tail_ms(8) == pytest.approx(model.mean_ms(8) * model.tail_ratio)
    model.observe(5, 2.0)  # a size never measured joins the table
    assert 5 in model.by_batch()


def test_only_measured_tail_ratios_are_averaged() -> None:
    """An instance's tail ratio is assumed (2.0) until it served `TAIL_EVERY` batches: the
    model-less capacity averages only the measured ones."""
    fresh = ExecModel(WARMUP, max_batch=32)
    steady, noisy = ExecModel(WARMUP, max_batch=32), ExecModel(WARMUP, max_batch=32)
    for _ in range(TAIL_EVERY):
        steady.observe(8, 2.4)
        noisy.observe(8, 2.4)
    noisy.tail_ratio = 1.5  # as if measured on a noisier core
    assert not fresh.tail_measured
    assert steady.tail_measured
    assert mean_tail_ratio([fresh, None]) is None
    assert mean_tail_ratio([fresh, steady, noisy]) == pytest.approx((steady.tail_ratio + 1.5) / 2)


def test_the_measured_service_times_are_averaged_per_batch_size() -> None:
    fresh = ExecModel(WARMUP, max_batch=32)
    slow, fast = ExecModel(WARMUP, max_batch=32), ExecModel(WARMUP, max_batch=32)
    for _ in range(TAIL_EVERY):
        slow.observe(8, 4.8)
        fast.observe(8, 2.4)
    assert mean_service_ms([fresh, None]) == {}  # nothing measured its tail yet
    got = mean_service_ms([fresh, slow, fast])
    assert set(got) == set(slow.by_batch())
    assert got[8] == pytest.approx((slow.mean_ms(8) + fast.mean_ms(8)) / 2)
    assert 2.4 < got[8] < 4.8


def test_capacity_is_the_best_batch_whose_tail_fits_the_slo() -> None:
    model = ExecModel({1: 10.0, 8: 20.0}, max_batch=8)
    model.tail_ratio = 1.0
    model.observe(1, 10.0)  # the level stays at 1: the tail table is rebuilt
    assert model.capacity_rps(50.0) == pytest.approx(8 * 1000.0 / 20.0)  # b8 within 25 ms
    # b4 interpolates to 14.3 ms: within the 15 a batch may take at a 30-ms SLO
    assert model.capacity_rps(30.0) == pytest.approx(4 * 1000.0 / (10.0 + 3 / 7 * 10.0))
    assert model.capacity_rps(20.0) == pytest.approx(1000.0 / 10.0)  # only b1 fits
    assert model.capacity_rps(5.0) == 0.0


def test_the_smallest_sustaining_batch_grows_with_the_rate() -> None:
    model = ExecModel(WARMUP, max_batch=32)
    assert model.smallest_sustaining(0.0, 0.6) == 1
    assert model.smallest_sustaining(300.0, 0.6) == 1  # 300 rps x 1 ms = 30 % busy
    b = model.smallest_sustaining(2000.0, 0.6)  # needs b / t_exec(b) >= 3333 rps
    assert 4 < b <= 8
    assert 2000.0 * model.mean_ms(b) / 1000.0 / b <= 0.6
    assert model.smallest_sustaining(1e6, 0.6) == 32  # nothing sustains it: the largest


def test_slo_dispatch_goes_at_the_target_and_waits_a_bounded_time_before() -> None:
    assert slo_dispatch_at(0, 4, 0.0, 1.0, 0.001) == float("inf")
    assert slo_dispatch_at(4, 4, 0.0, 1.0, 0.001) == float("-inf")
    # two of four wait, 1 ms apart: no longer than FILL_SLACK x the target's fill time
    assert slo_dispatch_at(2, 4, 10.0, 11.0, 0.001) == pytest.approx(10.0 + FILL_SLACK * 0.004)
    # arrivals too slow to fill before the latest start: go when they fall behind
    assert slo_dispatch_at(1, 4, 10.0, 10.02, 0.05) == pytest.approx(10.02 - 0.15)
    # close to the latest start, the fill time left decides
    assert slo_dispatch_at(1, 8, 10.0, 10.001, 1e-4) == pytest.approx(10.001 - 7e-4)
    # one arrival seen (no gap yet): nothing to wait for
    assert slo_dispatch_at(1, 8, 10.0, 10.001, float("inf")) == float("-inf")


def test_the_budget_is_the_slo_less_overheads_and_shrinks_while_p99_runs_high() -> None:
    latency = FunctionLatency(slo_ms=50.0)
    assert latency.budget_ms(0.0, loop_lag_ms=2.0) == pytest.approx(50.0 - 2.0)  # none measured
    now = 100.0
    for k in range(400):  # answers at 48 ms: above 0.9 x SLO
        latency.answered_in(now + k * 0.01, 48.0, overhead_ms=3.0)
    assert latency.overhead_ms == pytest.approx(3.0)
    assert latency.budget_factor < 0.7
    squeezed = latency.budget_ms(now + 4.0, 0.0)
    assert squeezed < 0.7 * 50.0 - 3.0 + 1e-9
    for k in range(1600):  # then fast answers: it grows back, beyond the SLO to its ceiling
        latency.answered_in(now + 4.0 + k * 0.01, 5.0, overhead_ms=3.0)
    assert latency.budget_factor == BUDGET_CEILING  # predictions are tails; answers show room
    # a query another function could serve is held to the SLO: the factor at most 1
    later = now + 4.0 + 16.0
    assert latency.slo_budget_ms(later, 0.0) == pytest.approx(50.0 - 3.0)
    assert latency.budget_ms(later, 0.0) == pytest.approx(BUDGET_CEILING * 50.0 - 3.0)
    p99 = latency.p99_ms(now + 20.0)
    assert p99 == pytest.approx(5.0)


def test_the_budget_is_steered_on_the_requests_admitted_since_it_last_changed() -> None:
    """A backlog from before a change (a step, met since by a second instance) drains
    late for a second: those answers are not the new budget's evidence and cut nothing
    more; requests admitted since answer fast, and the budget grows back."""
    latency = FunctionLatency(slo_ms=50.0)
    for k in range(20):  # late answers: the factor shrinks once
        latency.answered_in(100.0 + k * 0.001, 48.0, overhead_ms=1.0)
    assert latency.budget_factor == pytest.approx(0.85)
    for k in range(200):  # the backlog: every one of them arrived at 99.952 s
        waited_ms = 1000.0 * (0.02 + k * 0.005) + 48.0
        latency.answered_in(100.02 + k * 0.005, waited_ms, overhead_ms=1.0)
    assert latency.budget_factor == pytest.approx(0.85)
    for k in range(60):  # requests admitted since: fast
        latency.answered_in(101.1 + k * 0.01, 5.0, overhead_ms=1.0)
    assert latency.budget_factor == pytest.approx(0.85 * 1.1)


def test_the_overhead_tail_spans_seconds_not_a_few_batches() -> None:
    """At 2,000 answers a second, two late batches (64 answers) among 4,000 leave the
    overhead's tail where the rest put it; two seconds of slower ones move it."""
    latency = FunctionLatency(slo_ms=50.0)
    at = [100.0 + k * 0.0005 for k in range(8000)]
    for t in at[:4000]:
        latency.answered_in(t, 20.0, overhead_ms=2.0)
    for t in at[4000:4064]:
        latency.answered_in(t, 30.0, overhead_ms=12.0)
    for t in at[4064:4100]:
        latency.answered_in(t, 20.0, overhead_ms=2.0)
    assert latency.overhead_ms == pytest.approx(2.0)
    for t in at[4100:]:
        latency.answered_in(t, 30.0, overhead_ms=12.0)
    assert latency.overhead_ms == pytest.approx(12.0)


def test_an_overhead_no_answer_refreshes_fades() -> None:
    latency = FunctionLatency(slo_ms=50.0)
    for k in range(32):
        latency.answered_in(10.0 + k * 0.001, 40.0, overhead_ms=30.0)  # a burst of slow ones
    assert latency.budget_ms(10.1, 0.0) < 50.0 - 29.0
    # nothing answered since (every request refused): after 1 s the overhead halves per s
    assert latency.budget_ms(13.0, 0.0) > latency.budget_ms(11.5, 0.0) > 50.0 - 30.0


def test_loop_lag_keeps_a_tail_of_recent_probes() -> None:
    lag = LoopLag(tail_quantile=0.95)
    for k in range(40):
        lag.observe(20.0 if k == 39 else 0.5)
    assert lag.tail_ms == 0.5  # one late timer in forty is below the 95th percentile
    for _ in range(4):
        lag.observe(20.0)
    assert lag.tail_ms == 20.0
    lag.observe(-1.0)  # an early wake-up counts as on time
    assert min(lag._lags) == 0.0
