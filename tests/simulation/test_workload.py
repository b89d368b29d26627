"""The simulator's load shapes: bursts and trace scaling, drawn by the shared generator.

The generator itself (`loadgen.arrivals`) is tested in tests/unit/loadgen/test_arrivals.py.
"""

from __future__ import annotations

import random

import pytest

from infless.sim.workload import bursty, constant, from_trace
from loadgen.arrivals import poisson_arrivals


def test_bursts_ramp_hold_and_return() -> None:
    load = bursty(100.0, 500.0, 60.0, period_s=30.0, burst_s=8.0, ramp_s=2.0, first_burst_s=10.0)
    assert load.rate_at(5.0) == 100.0
    assert load.rate_at(11.0) == pytest.approx(300.0)
    assert load.rate_at(15.0) == 500.0
    assert load.rate_at(25.0) == 100.0
    assert load.rate_at(45.0) == 500.0


def test_trace_is_scaled_to_its_peak_and_held_per_point() -> None:
    load = from_trace([1.0, 4.0, 2.0], seconds_per_point=9.0, peak_rps=600.0)
    assert load.rate_at(4.0) == 150.0
    assert load.rate_at(13.0) == 600.0
    assert load.rate_at(20.0) == 300.0


def test_poisson_arrivals_follow_the_schedule() -> None:
    load = bursty(50.0, 250.0, 120.0, period_s=40.0)
    times = list(poisson_arrivals(load, 120.0, random.Random(7)))
    assert times == sorted(times)
    assert all(0.0 <= t < 120.0 for t in times)
    assert len(times) == pytest.approx(load.mean_rps(120.0) * 120.0, rel=0.05)
    again = list(poisson_arrivals(load, 120.0, random.Random(7)))
    assert again == times
    assert list(poisson_arrivals(constant(0.0), 10.0, random.Random(1))) == []


def test_a_trace_shaped_load_holds_each_point_without_ramping_into_the_next() -> None:
    load = from_trace([0.0, 1.0, 0.0], seconds_per_point=10.0, peak_rps=100.0)
    times = list(poisson_arrivals(load, 30.0, random.Random(3)))
    assert all(10.0 <= t < 20.0 for t in times)  # the silent points stay silent
    assert len(times) == pytest.approx(1000, rel=0.1)
