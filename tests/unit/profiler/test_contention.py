"""Contended repetitions: the scheduler's run-queue delay decides, and retries are bounded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from infless.profiler import operators
from infless.profiler.contention import RepetitionGuard, contended, run_delay_ns


def test_run_delay_sums_the_second_field_of_every_thread_and_skips_bad_lines() -> None:
    lines = ["965844 1000 2\n", "10 250 1", "garbage", ""]
    assert run_delay_ns(lines) == 1250
    assert run_delay_ns([]) == 0


def test_a_repetition_is_contended_when_waiting_exceeds_a_share_of_its_time() -> None:
    assert not contended(0.0, 10.0)
    assert not contended(0.04, 1.0)  # a wake-up latency, below the floor
    assert not contended(0.15, 10.0)  # 1.5% of the repetition
    assert contended(0.3, 10.0)  # 3%
    assert contended(0.3, 10.0, max_share=0.02, min_wait_ms=0.05)
    assert not contended(0.3, 10.0, max_share=0.05)


def test_the_guard_redoes_a_contended_repetition_a_bounded_number_of_times() -> None:
    guard = RepetitionGuard(max_redos=2)
    assert guard.accept(False)
    assert not guard.accept(True)
    assert guard.accept(False)  # redone once, then clean
    assert (guard.redone, guard.kept) == (1, 0)
    assert not guard.accept(True)
    assert not guard.accept(True)
    assert guard.accept(True)  # retries ran out: kept, and counted as such
    assert (guard.redone, guard.kept) == (3, 1)
    assert not guard.accept(True)  # the next repetition has its own retries


def test_measurement_redoes_the_multi_thread_repetitions_a_neighbour_interfered_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # every third reading pair of the run-queue delay shows 5 ms of waiting
    def delays() -> Iterator[float]:
        total, pair = 0.0, 0
        while True:
            yield total
            pair += 1
            total += 5.0 if pair % 6 == 1 else 0.0
            yield total

    source = delays()
    monkeypatch.setattr(operators, "_run_delay_ms", lambda: next(source))
    found = operators.measure_threads(
        lambda: sum(range(200)), (1, 2), budget_s=0.0, min_reps=6, max_reps=6
    )
    assert found[1].redone == 0  # one thread: its CPU clock leaves waiting out
    assert found[2].reps == 6
    assert found[2].redone >= 1
    assert found[2].contended == 0


def test_a_neighbour_that_never_leaves_costs_bounded_retries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter(float(i) for i in range(10**6))  # 1 ms of waiting between every reading
    monkeypatch.setattr(operators, "_run_delay_ms", lambda: next(clock))
    found = operators.measure_threads(
        lambda: None, (2,), budget_s=0.0, min_reps=4, max_reps=4, max_spread=10.0
    )
    assert found[2].reps == 4
    assert found[2].contended == 4
    assert found[2].redone == 4 * RepetitionGuard().max_redos


def test_without_schedstat_nothing_is_redone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(operators, "_run_delay_ms", lambda: None)
    found = operators.measure_threads(lambda: None, (2,), budget_s=0.0, min_reps=3, max_reps=3)
    assert (found[2].redone, found[2].contended) == (0, 0)
