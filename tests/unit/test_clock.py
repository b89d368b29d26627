"""Ticker: ticks on the injected clock, survives a failing tick, stops cleanly."""

from __future__ import annotations

import pytest

from infless.clock import Ticker
from tests.support.clock import FakeClock


async def test_ticks_follow_the_clock_and_survive_a_failing_tick(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    calls: list[float] = []

    def tick() -> None:
        calls.append(clock.now())
        if len(calls) == 2:
            raise RuntimeError("a bad tick")

    ticker = Ticker(clock, 0.5, tick, "test")
    ticker.start()
    for _ in range(4):
        await clock.advance(0.5)
    await ticker.stop()
    assert calls == [1000.5, 1001.0, 1001.5, 1002.0]
    assert "tick failed" in caplog.text
    await clock.advance(1.0)
    assert len(calls) == 4  # stopped: no more ticks


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval"):
        Ticker(FakeClock(), 0.0, lambda: None, "test")
