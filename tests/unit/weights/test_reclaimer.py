from __future__ import annotations

from collections.abc import Iterable

import pytest

from infless.weights.reclaimer import Reclaimer, TensorEntry, reclaim_decision
from tests.support.clock import FakeClock


def entry(key: str, size: int = 100, last_used: float = 0.0, tenant: str = "t") -> TensorEntry:
    return TensorEntry(tenant, key, size, last_used)


def keys(entries: Iterable[TensorEntry]) -> list[str]:
    return [e.key for e in entries]


def test_unreferenced_tensors_outlive_the_keepalive_window_only() -> None:
    entries = [entry("a", last_used=0.0), entry("b", last_used=5.0)]
    assert reclaim_decision(entries, set(), now=9.9, keepalive_s=10.0, capacity_bytes=None) == []
    freed = reclaim_decision(entries, set(), now=10.0, keepalive_s=10.0, capacity_bytes=None)
    assert keys(freed) == ["a"]
    assert keys(reclaim_decision(entries, set(), 15.0, 10.0, None)) == ["a", "b"]


def test_live_tensors_are_never_freed() -> None:
    entries = [entry("a"), entry("b")]
    live = {("t", "a")}
    assert keys(reclaim_decision(entries, live, now=1e9, keepalive_s=0.0, capacity_bytes=0)) == [
        "b"
    ]


def test_over_capacity_frees_least_recently_used_unreferenced_first() -> None:
    entries = [
        entry("old", last_used=1.0),
        entry("live", last_used=0.0),
        entry("mid", last_used=2.0),
        entry("new", last_used=3.0),
    ]
    live = {("t", "live")}
    # 400 stored, capacity 250: free 200 bytes, oldest unreferenced first; "live" stays.
    freed = reclaim_decision(entries, live, now=4.0, keepalive_s=100.0, capacity_bytes=250)
    assert keys(freed) == ["old", "mid"]


def test_capacity_counts_expired_frees_first() -> None:
    entries = [entry("expired", last_used=0.0), entry("fresh", last_used=50.0)]
    freed = reclaim_decision(entries, set(), now=60.0, keepalive_s=30.0, capacity_bytes=100)
    assert keys(freed) == ["expired"]


def test_live_set_can_keep_the_store_over_capacity() -> None:
    entries = [entry("a"), entry("b")]
    live = {("t", "a"), ("t", "b")}
    assert reclaim_decision(entries, live, now=10.0, keepalive_s=0.0, capacity_bytes=1) == []


def test_tenants_are_distinct_refs() -> None:
    entries = [entry("same", tenant="x"), entry("same", tenant="y")]
    freed = reclaim_decision(
        entries, {("x", "same")}, now=10.0, keepalive_s=0.0, capacity_bytes=None
    )
    assert [(e.tenant, e.key) for e in freed] == [("y", "same")]


def test_invalid_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="keepalive_s"):
        reclaim_decision([], set(), 0.0, -1.0, None)
    with pytest.raises(ValueError, match="capacity_bytes"):
        reclaim_decision([], set(), 0.0, 1.0, -1)


class RecordingStore:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], float]] = []

    def reclaim(self, running: Iterable[str], now: float) -> list[TensorEntry]:
        self.calls.append((list(running), now))
        return [entry(f"k{len(self.calls)}", size=10)]


async def test_shell_ticks_on_the_injected_clock() -> None:
    clock = FakeClock(start=100.0)
    store = RecordingStore()
    freed: list[TensorEntry] = []
    reclaimer = Reclaimer(store, clock, lambda: ["i1"], interval_s=5.0, on_freed=freed.extend)
    reclaimer.start()
    await clock.advance(0)
    assert store.calls == []
    await clock.advance(4.9)
    assert store.calls == []
    await clock.advance(0.1)
    assert store.calls == [(["i1"], 105.0)]
    await clock.advance(5.0)
    assert [now for _, now in store.calls] == [105.0, 110.0]
    assert reclaimer.ticks == 2
    assert reclaimer.freed_bytes == 20
    assert keys(freed) == ["k1", "k2"]
    await reclaimer.stop()
    await clock.advance(50.0)
    assert len(store.calls) == 2


class FailingStore:
    def reclaim(self, running: Iterable[str], now: float) -> list[TensorEntry]:
        raise OSError("disk on fire")


async def test_shell_survives_a_failing_pass(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    reclaimer = Reclaimer(FailingStore(), clock, list, interval_s=1.0)
    reclaimer.start()
    await clock.advance(1.0)
    await clock.advance(1.0)
    assert reclaimer.ticks == 2
    assert "reclaim failed" in caplog.text
    await reclaimer.stop()
