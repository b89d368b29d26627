"""The open-loop client against an in-process stand-in gateway on 127.0.0.1.

Asserts counts and recorded statuses/headers only, never wall-clock thresholds.
"""

from __future__ import annotations

import math

import msgspec
import pytest

from loadgen.bodies import make_bodies
from loadgen.client import ClientConfig, OpenLoopClient, connection_limit
from loadgen.functions import FunctionInfo, InputSpec
from loadgen.records import NO_RESPONSE
from loadgen.responses import error_code, instance_samples, timing_from_headers
from loadgen.workloads import Arrival, Schedule, SyntheticSpec, synthetic_schedule
from tests.support.fake_gateway import MNIST, FakeGateway, serve

IMAGE = FunctionInfo("mnist", 200.0, 8, (InputSpec("image", "float32", (1, 28, 28)),))


def _bodies(*names: str) -> dict[str, tuple[bytes, ...]]:
    return {n: make_bodies(FunctionInfo(n, None, None, IMAGE.inputs), 4, seed=0) for n in names}


def _fn(name: str) -> dict[str, object]:
    return {**MNIST, "name": name}


async def test_every_scheduled_request_is_sent_and_recorded() -> None:
    gateway = FakeGateway(functions=[MNIST], exec_ms=0.0)
    schedule = synthetic_schedule(
        SyntheticSpec("constant", 100.0, 0.3, seed=0), ["mnist"], 1000, 10.0
    )
    async with serve(gateway) as url, OpenLoopClient(ClientConfig(url), 100.0) as client:
        result = await client.run(schedule, _bodies("mnist"))
    assert len(result.records) == len(schedule.arrivals) == 30
    assert gateway.received["mnist"] == 30
    assert gateway.bad_bodies == []
    assert [r.index for r in result.records] == list(range(30))
    assert all(r.status == 200 and r.error == "" for r in result.records)
    assert [r.scheduled_s for r in result.records] == [a.at_s for a in schedule.arrivals]
    assert all(r.sent_s >= 0 and r.latency_ms > 0 for r in result.records)
    first = result.records[0]
    assert first.cold_start
    assert first.cold_start_ms == 2.0
    assert sum(r.cold_start for r in result.records) == 1
    assert {r.call_id for r in result.records} == {f"mnist-{i}" for i in range(1, 31)}
    assert all(r.instance == "mnist-0" and r.queue_ms == 0.5 for r in result.records)
    assert {r.batch_size for r in result.records} <= set(range(1, 9))
    assert result.not_sent == 0
    assert any(s.function == "mnist" and s.state == "ready" for s in result.instance_samples)


async def test_errors_are_recorded_with_status_and_code() -> None:
    gateway = FakeGateway(functions=[_fn("broken"), _fn("limited")], exec_ms=0.0)
    schedule = Schedule(
        arrivals=tuple(Arrival(0.01 * i, "broken" if i < 3 else "limited") for i in range(7)),
        duration_s=0.1,
        description="test",
    )
    async with serve(gateway) as url, OpenLoopClient(ClientConfig(url), 10.0) as client:
        result = await client.run(schedule, _bodies("broken", "limited"))
    broken = [r for r in result.records if r.function == "broken"]
    limited = [r for r in result.records if r.function == "limited"]
    assert [(r.status, r.error) for r in broken] == [(500, "worker_failed")] * 3
    assert sorted(r.status for r in limited) == [200, 200, 429, 429]
    assert {r.error for r in limited if r.status == 429} == {"overloaded"}


async def test_timeouts_and_refused_connections_have_no_status() -> None:
    gateway = FakeGateway(functions=[MNIST], exec_ms=0.0, delay_ms={"mnist": 400.0})
    schedule = Schedule((Arrival(0.0, "mnist"), Arrival(0.0, "mnist")), 0.1, "test")
    async with (
        serve(gateway) as url,
        OpenLoopClient(ClientConfig(url, timeout_s=0.1), 10.0) as client,
    ):
        result = await client.run(schedule, _bodies("mnist"))
    assert [(r.status, r.error) for r in result.records] == [(NO_RESPONSE, "timeout")] * 2
    assert all(math.isnan(r.latency_ms) for r in result.records)
    # nothing listens on the port any more once the server is gone
    async with OpenLoopClient(ClientConfig(url, poll_interval_s=0), 10.0) as client:
        refused = await client.run(Schedule((Arrival(0.0, "mnist"),), 0.1, "t"), _bodies("mnist"))
    assert refused.records[0].status == NO_RESPONSE
    assert refused.records[0].error.startswith("Client")


async def test_the_duration_cap_stops_sending() -> None:
    gateway = FakeGateway(functions=[MNIST], exec_ms=0.0)
    schedule = Schedule(
        (Arrival(0.0, "mnist"), Arrival(0.05, "mnist"), Arrival(3600.0, "mnist")),
        3601.0,
        "one far in the future",
    )
    async with (
        serve(gateway) as url,
        OpenLoopClient(ClientConfig(url, max_duration_s=1.0), 1.0) as c,
    ):
        result = await c.run(schedule, _bodies("mnist"))
    assert len(result.records) == 2
    assert result.not_sent == 1


async def test_missing_bodies_are_refused_before_sending() -> None:
    schedule = Schedule((Arrival(0.0, "ghost"),), 1.0, "t")
    async with OpenLoopClient(ClientConfig("http://127.0.0.1:9"), 1.0) as client:
        with pytest.raises(ValueError, match="ghost"):
            await client.run(schedule, _bodies("mnist"))


def test_header_parsing() -> None:
    timing = timing_from_headers(
        {
            "X-Call-Id": "c1",
            "X-Duration-Seconds": "0.25",
            "X-Infless-Instance": "i-3",
            "X-Infless-Batch-Size": "4",
            "X-Infless-Queue-Ms": "1.5",
            "X-Infless-Exec-Ms": "7",
            "X-Infless-Cold-Start": "true",
            "X-Infless-Cold-Start-Ms": "900",
            "Retry-After": "2",
        }
    )
    assert timing == {
        "call_id": "c1",
        "instance": "i-3",
        "batch_size": 4,
        "queue_ms": 1.5,
        "exec_ms": 7.0,
        "cold_start": True,
        "cold_start_ms": 900.0,
        "duration_ms": 250.0,
        "retry_after_s": 2.0,
    }
    empty = timing_from_headers({"X-Infless-Batch-Size": "x"})
    assert empty["batch_size"] == 0
    assert math.isnan(empty["queue_ms"])
    assert math.isnan(empty["retry_after_s"])
    assert empty["cold_start"] is False


def test_error_codes_and_instance_samples() -> None:
    assert error_code(429, b'{"error": "busy", "code": "overloaded"}') == "overloaded"
    assert error_code(502, b"<html>bad gateway</html>") == "http_502"
    packed = msgspec.msgpack.encode({"error": "x", "code": "invalid_input"})
    assert error_code(422, packed, "application/msgpack") == "invalid_input"
    assert error_code(422, packed, "application/json") == "http_422"
    samples = instance_samples(
        1.0, [{"function": "a", "state": "ready"}] * 2 + [{"function": "a", "state": "starting"}]
    )
    assert [(s.state, s.count) for s in samples] == [("ready", 2), ("starting", 1)]
    assert instance_samples(1.0, {"not": "a list"}) == []


def test_connection_limit_follows_the_peak_rate() -> None:
    assert connection_limit(0.0) == 16
    assert connection_limit(100.0) == 116
    assert connection_limit(1e6) <= 1024
    assert connection_limit(1e6, override=8) == 8
