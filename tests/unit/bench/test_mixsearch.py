"""The pure helpers of the throughput bench's mix search: warm-up exclusion, config snapshots."""

from __future__ import annotations

import math

from bench.mixsearch import InstanceConfigCount, instance_configs, measured_records
from loadgen.records import RequestRecord


def _record(index: int, function: str, at_s: float) -> RequestRecord:
    return RequestRecord(
        index=index,
        function=function,
        scheduled_s=at_s,
        sent_s=at_s + 0.001,
        latency_ms=10.0,
        status=200,
        error="",
    )


def test_measured_records_drop_the_warmup_and_start_the_window_at_zero() -> None:
    records = [
        _record(0, "a", 1.0),
        _record(1, "b", 4.9),
        _record(2, "a", 5.0),
        _record(3, "b", 7.5),
    ]
    by_function = measured_records(records, warmup_s=5.0)
    assert sorted(by_function) == ["a", "b"]
    assert [r.index for r in by_function["a"]] == [2]
    assert by_function["a"][0].scheduled_s == 0.0
    assert math.isclose(by_function["b"][0].sent_s, 2.501)
    assert by_function["b"][0].latency_ms == 10.0


def test_instance_configs_group_ready_instances_and_count_starting_ones() -> None:
    polled = [
        {"function": "a", "state": "ready", "batchSize": 4, "cpus": 1},
        {"function": "a", "state": "ready", "batchSize": 4, "cpus": 1},
        {"function": "a", "state": "ready", "batchSize": 1, "cpus": 2},
        {"function": "b", "state": "starting", "batchSize": 8, "cpus": 1},
        {"function": "b", "state": "draining", "batchSize": 8, "cpus": 1},
        "junk",
    ]
    configs, starting = instance_configs(polled)
    assert configs == (InstanceConfigCount("a", 1, 2, 1), InstanceConfigCount("a", 4, 1, 2))
    assert starting == 1
    assert configs[1].to_json() == {"function": "a", "batchSize": 4, "cpus": 1, "count": 2}
    assert instance_configs({"not": "a list"}) == ((), 0)
