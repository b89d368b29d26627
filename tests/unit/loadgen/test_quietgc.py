"""The load generator runs without full garbage collections (`loadgen.quietgc`)."""

from __future__ import annotations

import gc
import time

import pytest

from loadgen import client
from loadgen.client import ClientConfig, OpenLoopClient
from loadgen.formats import PreparedRequest
from loadgen.quietgc import NEVER, young_collections_only
from loadgen.workloads import SyntheticSpec, synthetic_schedule
from tests.unit.loadgen.http_stub import Stub, serve

BODY = (PreparedRequest("/function/count", "application/json", b'{"inputs": [1]}'),)


def test_no_full_collection_runs_while_load_is_driven_and_the_settings_come_back() -> None:
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    with young_collections_only():
        assert gc.get_freeze_count() > 0  # the heap from before is not walked again
        full_before = gc.get_stats()[2]["collections"]
        young_before = gc.get_stats()[0]["collections"]
        kept = [[k] for k in range(300_000)]  # records a run keeps: promoted, never walked
        assert gc.get_stats()[2]["collections"] == full_before
        assert gc.get_stats()[0]["collections"] > young_before  # young ones go on
    assert len(kept) == 300_000
    assert gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == frozen


async def test_the_collection_before_a_run_is_over_before_its_clock_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Entering costs a full collection (hundreds of ms in a large process): it must not
    fall inside the schedule, where it would delay the first sends and every reply."""
    quiet_at_clock: list[bool] = []

    def clock() -> float:
        quiet_at_clock.append(gc.get_threshold()[2] == NEVER)
        return time.perf_counter()

    monkeypatch.setattr(client, "_now", clock)
    schedule = synthetic_schedule(SyntheticSpec("constant", 50.0, 0.1, 1), ["f"], 5, 5.0)
    async with (
        serve(Stub()) as url,
        OpenLoopClient(ClientConfig(url, poll_interval_s=0), 50.0) as open_loop,
    ):
        result = await open_loop.run(schedule, {"f": BODY})
    assert len(result.records) == 5
    assert quiet_at_clock[0]  # the run's t0 was taken with collections already quiet
    assert gc.get_threshold()[2] != NEVER
