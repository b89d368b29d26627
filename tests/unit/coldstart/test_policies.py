"""Each policy's decisions on hand-made idle-time sequences, time passed in explicitly."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from infless.coldstart.config import FixedConfig, HistogramConfig, LsthConfig
from infless.coldstart.policies import (
    ColdStartPolicy,
    FixedPolicy,
    HhpPolicy,
    LsthPolicy,
    Windows,
    build_policy,
)


def run(policy: ColdStartPolicy[Any], arrivals_s: Iterable[float]) -> tuple[Windows, Any]:
    """Feed arrivals (zero-length executions) and return the last windows and state."""
    state = policy.initial_state()
    windows = None
    for t in arrivals_s:
        state = policy.observe(state, t)
        windows, state = policy.decide(state, t)
    assert windows is not None
    return windows, state


PERIODIC_30_MIN = [30.0 + 1800.0 * k for k in range(21)]  # 20 idle times of exactly 30 min
# then 60 idle times of 90 s; the last arrival is at 41 430 s (minute 690)
PERIODIC_THEN_BURST = PERIODIC_30_MIN + [36_030.0 + 90.0 * j for j in range(1, 61)]


def test_fixed_keeps_alive_for_its_keep_alive_and_never_prewarms() -> None:
    windows, state = run(FixedPolicy(FixedConfig(keepalive_s=300.0)), [0.0, 50.0, 4000.0])
    assert windows == Windows(0.0, 300.0)
    assert state.last_end_s == 4000.0
    assert FixedPolicy().decide(FixedPolicy().initial_state(), 0.0)[0] == Windows(0.0, 600.0)


def test_hhp_uses_standard_keep_alive_until_it_has_ten_idle_times() -> None:
    policy = HhpPolicy()
    assert run(policy, PERIODIC_30_MIN[:10])[0] == Windows(0.0, 14_400.0)  # 9 ITs
    windows, state = run(policy, PERIODIC_30_MIN[:11])  # 10 ITs, all in bin 30
    assert windows.prewarm_s == pytest.approx(0.9 * 30 * 60)
    assert windows.alive_until_s == pytest.approx(1.1 * 31 * 60)
    assert state.histogram.counts[30] == 10


def test_hhp_long_tail_keeps_the_instance_until_the_rare_long_gaps() -> None:
    windows, _ = run(HhpPolicy(), PERIODIC_THEN_BURST)
    # 60 ITs in bin 1 and 20 in bin 30: head bin 1, the 99th percentile is bin 30
    assert windows.prewarm_s == pytest.approx(54.0)
    assert windows.alive_until_s == pytest.approx(2046.0)


def test_hhp_out_of_bounds_idle_times_switch_to_the_arima_forecast() -> None:
    arrivals = [0.0, 18_000.0, 36_000.0, 57_000.0]  # ITs of 5 h, 5 h, 5 h 50 min
    windows, _ = run(HhpPolicy(), arrivals)
    mean_s = (18_000.0 + 18_000.0 + 21_000.0) / 3
    assert windows.prewarm_s == pytest.approx(0.85 * mean_s)
    assert windows.alive_until_s == pytest.approx(1.15 * mean_s)


def test_arrivals_while_an_execution_is_in_flight_record_zero_idle_time() -> None:
    policies: list[ColdStartPolicy[Any]] = [HhpPolicy(), LsthPolicy()]
    for policy in policies:
        state = policy.initial_state()
        _, state = policy.decide(policy.observe(state, 100.0), 200.0)  # execution ends at 200
        state = policy.observe(state, 150.0)  # clock skew: arrival before the end -> 0
        state = policy.observe(state, 900.0, busy=True)  # another execution in flight
        state = policy.observe(state, 1000.0)  # idle since 200: 800 s, bin 13
        counts = state.histogram.counts if isinstance(policy, HhpPolicy) else state.long.counts
        assert (counts[0], counts[13]) == (2, 1)


def test_lsth_blends_long_and_short_windows_with_gamma() -> None:
    # long (24 h): head bin 1, tail bin 30 -> (54 s, 1992 s); short (last hour): 40 ITs of
    # 90 s -> head = tail = bin 1 -> (54 s, 78 s).
    expected = {1.0: 1992.0, 0.5: 0.5 * 1992.0 + 0.5 * 78.0, 0.0: 78.0}
    for gamma, keepalive_s in expected.items():
        windows, state = run(LsthPolicy(LsthConfig(gamma=gamma)), PERIODIC_THEN_BURST)
        assert windows.prewarm_s == pytest.approx(54.0)
        assert windows.keepalive_s == pytest.approx(keepalive_s)
    assert state.short.in_range == 40
    assert state.long.in_range == 80


def test_lsth_with_gamma_one_matches_hhp_on_a_day() -> None:
    lsth, _ = run(LsthPolicy(LsthConfig(gamma=1.0)), PERIODIC_THEN_BURST)
    assert lsth == run(HhpPolicy(), PERIODIC_THEN_BURST)[0]


def test_lsth_falls_back_to_the_long_windows_when_the_short_history_is_thin() -> None:
    arrivals = [*PERIODIC_THEN_BURST, 41_430.0 + 7200.0]  # one IT of 2 h after an idle hour
    windows, state = run(LsthPolicy(), arrivals)
    assert state.short.in_range == 1  # fewer than 5 ITs in the last hour
    assert windows == run(HhpPolicy(), arrivals)[0]
    assert windows.alive_until_s == pytest.approx(1.1 * 121 * 60)


def busy_with_pauses(pause_min: int = 3, bursts: int = 12) -> list[float]:
    """A busy function: 50 requests in each of 4 minutes, then `pause_min` minutes idle."""
    arrivals: list[float] = []
    minute = 0
    for _ in range(bursts):
        for m in range(minute, minute + 4):
            arrivals += [m * 60.0 + 1.0 + j for j in range(50)]
        minute += 4 + pause_min
    return arrivals


def test_lsth_short_histogram_samples_each_active_minute_once() -> None:
    windows, state = run(LsthPolicy(), busy_with_pauses())
    # the last hour holds 8 or 9 bursts: 4 active minutes each, one IT per minute
    assert state.short.in_range <= 36
    assert state.long.in_range == 12 * 4 * 50 - 1  # every request but the first
    per_request, request_state = run(
        LsthPolicy(LsthConfig(short_per_minute=False)), busy_with_pauses()
    )
    assert request_state.short.in_range > 1000
    # per minute, a pause is one IT in 4: the tail sees the pauses (191 s); per request it
    # is one in 200 and the tail is bin 0 (kept about a minute: every pause ends cold)
    assert windows.alive_until_s > 191.0
    assert per_request.alive_until_s < 2 * 60.0


def test_lsth_per_minute_short_histogram_keeps_a_busy_function_through_its_pauses() -> None:
    arrivals = busy_with_pauses()
    hhp, _ = run(HhpPolicy(), arrivals)
    lsth, _ = run(LsthPolicy(), arrivals)
    pause_s = 3 * 60.0 + 11.0  # from the last request of a burst to the next burst
    assert hhp.alive_until_s < pause_s  # HHP's tail (per request) is bin 0
    assert lsth.prewarm_s == 0.0
    assert lsth.alive_until_s > pause_s


def test_lsth_long_window_forgets_old_idle_times() -> None:
    policy = LsthPolicy(LsthConfig(long_window_min=120, short_window_min=30))
    # ITs observed in minutes 20, 40 and 60; the short window at minute 60 is (30, 60]
    _, state = run(policy, [0.0, 1200.0, 2400.0, 3600.0])
    assert (state.long.in_range, state.short.in_range) == (3, 2)
    windows, state = policy.decide(state, 3600.0 + 7200.0)  # minute 180: all expired
    assert (state.long.in_range, state.short.in_range) == (0, 0)
    assert state.log == ()
    assert windows == Windows(0.0, 14_400.0)


def test_lsth_keeps_out_of_bounds_idle_times_for_the_arima_branch() -> None:
    arrivals = [0.0, 18_000.0, 36_000.0]
    windows, state = run(LsthPolicy(), arrivals)
    assert state.long.oob_count == 2
    assert windows.prewarm_s == pytest.approx(0.85 * 18_000.0)


def test_build_policy_by_name_with_parameters() -> None:
    assert build_policy("fixed", {"keepalive_s": 60.0}) == FixedPolicy(FixedConfig(60.0))
    assert build_policy("hhp", {"range_min": 120}) == HhpPolicy(HistogramConfig(range_min=120))
    lsth = build_policy("lsth", {"gamma": 0.3, "min_its": 5})
    assert lsth == LsthPolicy(LsthConfig(gamma=0.3, histogram=HistogramConfig(min_its=5)))
    assert build_policy("lsth").name == "lsth"
    by_request = build_policy("lsth", {"short_per_minute": False})
    assert by_request == LsthPolicy(LsthConfig(short_per_minute=False))


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("lru", {}, "unknown; choose one of fixed, hhp, lsth"),
        ("hhp", {"gamma": 0.5}, "unknown parameter"),
        ("lsth", {"gamma": 1.5}, "gamma=1.5"),
        ("fixed", {"keepalive_s": 0.0}, "keepalive_s"),
        ("lsth", {"short_window_min": 2000}, "short_window_min"),
        ("lsth", {"short_per_minute": 1}, "short_per_minute=1: must be true or false"),
    ],
)
def test_build_policy_rejects_bad_input_with_the_field(
    name: str, params: dict[str, float], message: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        build_policy(name, params)
