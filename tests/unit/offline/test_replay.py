"""The vectorised replay: arrival synthesis, outcome accounting, and agreement with a
step-by-step replay through the pure policies."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from infless.coldstart.config import HistogramConfig, LsthConfig
from infless.coldstart.histogram import Branch, hhp_windows
from infless.coldstart.policies import (
    ColdStartPolicy,
    HhpPolicy,
    LsthPolicy,
)
from infless.offline.coldstart.replay import (
    Arrivals,
    fixed_windows,
    hhp_rows,
    histogram_rows,
    lsth_rows,
    replay,
    synthesize_arrivals,
)


def hand_made(rows: list[tuple[int, int, float, float]], horizon_s: float) -> Arrivals:
    """One function; rows of (minute, count, first_s, last_s)."""
    minute, count, first, last = (np.array(c) for c in zip(*rows, strict=True))
    return Arrivals(
        func=np.zeros(len(rows), dtype=np.int64),
        minute=minute.astype(np.int64),
        count=count.astype(np.int64),
        first_s=first.astype(np.float64),
        last_s=last.astype(np.float64),
        offsets=np.array([0, len(rows)], dtype=np.int64),
        n_functions=1,
        horizon_s=horizon_s,
    )


ROWS = [(0, 1, 30.0, 30.0), (5, 3, 310.0, 350.0), (40, 1, 2430.0, 2430.0)]


def test_arrivals_lie_inside_their_minute_and_depend_only_on_the_seed() -> None:
    counts = np.random.default_rng(7).poisson(0.7, size=(20, 300)).astype(np.int64)
    a = synthesize_arrivals(counts, seed=3)
    start = a.minute * 60.0
    assert np.all((start <= a.first_s) & (a.first_s <= a.last_s) & (a.last_s < start + 60.0))
    assert np.array_equal(a.first_s[a.count == 1], a.last_s[a.count == 1])
    assert int(a.count.sum()) == int(counts.sum())
    again = synthesize_arrivals(counts, seed=3)
    assert np.array_equal(a.first_s, again.first_s)
    assert not np.array_equal(a.first_s, synthesize_arrivals(counts, seed=4).first_s)


def test_first_and_last_are_order_statistics_of_uniform_arrivals() -> None:
    counts = np.full((1, 20_000), 2, dtype=np.int64)  # two arrivals in every minute
    a = synthesize_arrivals(counts, seed=0)
    # the range of 2 uniforms on 60 s has mean 20 s; their max has mean 40 s
    assert float(np.mean(a.last_s - a.first_s)) == pytest.approx(20.0, abs=0.5)
    assert float(np.mean(a.last_s - a.minute * 60.0)) == pytest.approx(40.0, abs=0.5)


def test_fixed_keep_alive_outcome_by_hand() -> None:
    arrivals = hand_made(ROWS, horizon_s=3000.0)
    o = replay(arrivals, *fixed_windows(arrivals, 600.0))
    assert (int(o.invocations[0]), int(o.cold_starts[0]), int(o.loads[0])) == (5, 2, 2)
    # gap 280 s warm + 40 s inside minute 5 + 600 s kept before the 2080 s gap + 570 s tail
    assert float(o.idle_warm_s[0]) == pytest.approx(280 + 40 + 600 + 570)


def test_warm_up_excludes_early_invocations_and_idle_time() -> None:
    arrivals = hand_made(ROWS, horizon_s=3000.0)
    o = replay(arrivals, *fixed_windows(arrivals, 600.0), warmup_min=5)
    assert (int(o.invocations[0]), int(o.cold_starts[0])) == (4, 1)
    assert float(o.idle_warm_s[0]) == pytest.approx(10 + 40 + 600 + 570)


def test_prewarm_window_makes_a_timely_arrival_warm_and_counts_the_load() -> None:
    arrivals = hand_made(ROWS[:2], horizon_s=400.0)
    pw, ka = np.array([100.0, 0.0]), np.array([200.0, 60.0])
    o = replay(arrivals, pw, ka)
    assert (int(o.cold_starts[0]), int(o.loads[0])) == (1, 2)  # first is cold, 1 prewarm
    assert float(o.idle_warm_s[0]) == pytest.approx(180 + 40 + 50)  # tail ends at horizon
    early = replay(arrivals, np.array([300.0, 0.0]), ka)  # loads at 330, request at 310
    assert int(early.cold_starts[0]) == 2
    assert float(early.idle_warm_s[0]) == pytest.approx(40 + 50)


def _step_by_step(
    policy: ColdStartPolicy[Any], arrivals: Arrivals, f: int, rng: np.random.Generator
) -> tuple[int, float]:
    """Replay one function invocation by invocation through the pure policy."""
    times: list[float] = []
    for r in range(int(arrivals.offsets[f]), int(arrivals.offsets[f + 1])):
        k, first, last = int(arrivals.count[r]), arrivals.first_s[r], arrivals.last_s[r]
        inner = sorted(rng.uniform(first, last, max(k - 2, 0)).tolist())
        times += [float(first), *inner] + ([float(last)] if k > 1 else [])
    state = policy.initial_state()
    cold, idle_s, prev, windows = 0, 0.0, None, None
    for t in times:
        if prev is None or windows is None:
            cold += 1
        elif math.floor(t / 60) == math.floor(prev / 60):
            idle_s += t - prev  # burst grace inside a trace minute
        else:
            load_at = prev + windows.prewarm_s
            cold += not (load_at <= t <= load_at + windows.keepalive_s)
            idle_s += max(0.0, min(load_at + windows.keepalive_s, t) - load_at)
        state = policy.observe(state, t)
        windows, state = policy.decide(state, t)
        prev = t
    if prev is not None and windows is not None:
        load_at = prev + windows.prewarm_s
        idle_s += max(0.0, min(load_at + windows.keepalive_s, arrivals.horizon_s) - load_at)
    return cold, idle_s


@pytest.mark.parametrize("short_per_minute", [True, False])
def test_vectorised_replay_matches_the_pure_policies_step_by_step(short_per_minute: bool) -> None:
    rng = np.random.default_rng(11)
    minutes = 600
    rates = np.repeat([0.005, 0.02, 0.1, 0.4, 1.5], 4)
    counts = rng.poisson(rates[:, None], size=(rates.size, minutes)).astype(np.int64)
    counts[0, ::37] += 1  # a periodic one
    counts[1, :] = 0
    counts[1, [5, 200, 400, 590]] = 1  # long gaps: out-of-bounds with a 1 h range
    hist = HistogramConfig(range_min=60, min_its=3)
    lsth_cfg = LsthConfig(
        gamma=0.3,
        long_window_min=180,
        short_window_min=20,
        short_min_its=3,
        short_per_minute=short_per_minute,
        histogram=hist,
    )
    arrivals = synthesize_arrivals(counts, seed=5)
    _, _, branches = hhp_windows(histogram_rows(arrivals, hist, None), hist)
    assert set(branches.tolist()) == {int(b) for b in Branch}  # every branch is exercised
    hhp = replay(arrivals, *hhp_rows(arrivals, hist))
    lsth = replay(
        arrivals,
        *lsth_rows(
            arrivals,
            hist,
            gammas=[0.3],
            long_window_min=180,
            short_window_min=20,
            short_min_its=3,
            short_per_minute=short_per_minute,
        )[0.3],
    )
    for policy, outcome in ((HhpPolicy(hist), hhp), (LsthPolicy(lsth_cfg), lsth)):
        for f in range(arrivals.n_functions):
            cold, idle_s = _step_by_step(policy, arrivals, f, rng)
            assert cold == outcome.cold_starts[f], (policy.name, f)
            assert idle_s == pytest.approx(float(outcome.idle_warm_s[f]), rel=1e-9, abs=1e-6)


def test_per_minute_sampling_keeps_one_idle_time_per_active_minute() -> None:
    # minute 0: 3 arrivals; minute 5: 4 arrivals (gap 280 s, bin 4); minute 6: 1 (gap < 60 s)
    arrivals = hand_made([(0, 3, 5.0, 50.0), (5, 4, 330.0, 350.0), (6, 1, 370.0, 370.0)], 600.0)
    hist = HistogramConfig(range_min=60)
    every = histogram_rows(arrivals, hist, None)
    sampled = histogram_rows(arrivals, hist, None, per_minute=True)
    # per request: 2 + (1 + 3) + 1 idle times; per minute: the gaps before minutes 5 and 6
    assert every.n_in.tolist() == [2, 6, 7]
    assert sampled.n_in.tolist() == [0, 1, 2]
    assert sampled.tail_bin.tolist() == [0, 4, 4]
    assert every.tail_bin.tolist() == [0, 4, 4]
    assert sampled.head_bin.tolist() == [0, 4, 0]
