"""What a user sees when one configured function cannot be deployed, and readiness, with
in-process workers on a fake clock: the broken function is `failed` with its reason (listed,
described, named by the 503 its calls get, in the V2 repository index) while the others
serve; the gateway is ready (`/readyz`, `/v2/health/ready`) once each function it started
with serves or failed, and not before; deploying the broken one again, or removing it,
clears it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from infless.app import create_app
from infless.config import parse_config
from tests.support.clock import FakeClock
from tests.support.inprocess import InProcessStarter
from tests.unit.weights.packages import write_package

Client = TestClient[Any, Any]
START_S = 1.0  # an in-process start takes this long on the fake clock
MISSING = "/nonexistent/examples/minilm/build/minilm"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def client(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Client]:
    package = write_package(tmp_path / "model", {"w": np.zeros(2, dtype=np.float32)})
    config = parse_config(
        {
            "state": {"dir": str(tmp_path / "state")},
            "store": {"enabled": False},
            "scaling": {"policy": "none"},
            "functions": [
                {"name": "good", "image": str(package), "slo_ms": 500},
                {"name": "broken", "image": MISSING},
                {"name": "cold", "image": str(package), "instances": 0},
            ],
        }
    )
    starter = InProcessStarter(clock, start_s=START_S)
    async with TestClient(TestServer(create_app(config, clock, starter))) as test_client:
        yield test_client


async def _json(response: Any, status: int) -> Any:
    assert response.status == status, await response.text()
    return await response.json()


async def _advance(clock: FakeClock, seconds: float) -> None:
    for _ in range(round(seconds / 0.05)):
        await clock.advance(0.05)
        await asyncio.sleep(0)


async def test_a_broken_function_fails_alone_and_readiness_waits_for_the_others(
    client: Client, clock: FakeClock
) -> None:
    # the good function's instance is starting: not ready, and why
    for route in ("/readyz", "/v2/health/ready"):
        waiting = await _json(await client.get(route), 503)
        assert waiting["ready"] is False
        assert waiting["code"] == "not_ready"
        assert waiting["starting"] == ["good"]  # `cold` is scaled to zero: it answers
        assert MISSING in waiting["failed"]["broken"]
    assert (await client.get("/healthz")).status == 200  # live all along

    listed = {f["name"]: f for f in await _json(await client.get("/system/functions"), 200)}
    assert set(listed) == {"good", "broken", "cold"}
    assert listed["broken"]["state"] == "failed"
    assert MISSING in listed["broken"]["lastError"]
    assert listed["broken"]["availableReplicas"] == 0
    described = await _json(await client.get("/system/function/broken"), 200)
    assert described["state"] == "failed"
    assert described["lastError"] == listed["broken"]["lastError"]

    called = await _json(await client.post("/function/broken", json={"inputs": [1]}), 503)
    assert called["code"] == "function_failed"
    assert "'broken' failed to deploy" in called["error"]
    assert MISSING in called["error"]
    v2_ready = await _json(await client.get("/v2/models/broken/ready"), 503)
    assert "broken" in v2_ready["error"]
    index = await _json(await client.post("/v2/repository/index"), 200)
    (entry,) = [e for e in index if e["name"] == "broken"]
    assert entry["state"] == "UNAVAILABLE"
    assert MISSING in entry["reason"]

    await _advance(clock, START_S + 0.2)
    ready = await _json(await client.get("/readyz"), 200)
    assert ready["ready"] is True
    assert ready["starting"] == []
    assert set(ready["failed"]) == {"broken"}  # reported, not waited for
    assert (await client.get("/v2/health/ready")).status == 200
    # consistent with the server's readiness: every function that did not fail is ready
    for name in ("good", "cold"):
        assert (await client.get(f"/v2/models/{name}/ready")).status == 200


async def test_a_failed_function_is_cleared_by_deploying_it_again_or_removing_it(
    client: Client, clock: FakeClock, tmp_path: Path
) -> None:
    fixed = {"service": "broken", "image": str(tmp_path / "model")}
    await _json(await client.put("/system/functions", json=fixed), 202)
    described = await _json(await client.get("/system/function/broken"), 200)
    assert described["state"] == "starting"
    assert described["lastError"] is None
    await _advance(clock, START_S + 0.2)
    call = asyncio.ensure_future(client.post("/function/broken", json={"inputs": [1, 2, 3, 4]}))
    await _advance(clock, 0.5)  # its batch takes time on the fake clock
    assert "outputs" in await _json(await call, 200)

    # a deployment whose image is missing is refused at once (a 400 naming it), not failed
    bad = {"service": "another", "image": MISSING}
    refused = await _json(await client.post("/system/functions", json=bad), 400)
    assert MISSING in refused["error"]
    await _json(await client.get("/system/function/another"), 404)


async def test_a_failed_function_can_be_removed(client: Client) -> None:
    removed = await client.delete("/system/functions", json={"functionName": "broken"})
    assert removed.status == 202, await removed.text()
    listed = {f["name"] for f in await _json(await client.get("/system/functions"), 200)}
    assert "broken" not in listed
    gone = await _json(await client.post("/function/broken", json={"inputs": [1]}), 404)
    assert gone["code"] == "function_not_found"
