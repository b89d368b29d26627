"""`/system/secrets` and what a deployment's runtime fields do at the gateway, with in-process
workers: statuses faas-cli expects, values never shown, unknown secrets and unenforceable
limits refused with a 400 that names them, the runtime handed to the starter, and a worker
killed for memory reported in lastError and the logs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from infless.app import create_app
from infless.clock import RealClock
from infless.config import parse_config
from infless.types import WorkerRuntime
from infless.workers.starting import RuntimeSupport
from tests.support.inprocess import InProcessStarter
from tests.unit.weights.packages import write_package

Client = TestClient[Any, Any]


async def _client(tmp_path: Path, starter: InProcessStarter) -> AsyncIterator[Client]:
    config = parse_config({"state": {"dir": str(tmp_path / "state")}, "store": {"enabled": False}})
    async with TestClient(TestServer(create_app(config, starter=starter))) as client:
        yield client


@pytest.fixture
def package(tmp_path: Path) -> Path:
    return write_package(tmp_path / "model", {"w": np.zeros(2, dtype=np.float32)})


@pytest.fixture
def starter() -> InProcessStarter:
    return InProcessStarter(RealClock())


@pytest.fixture
async def client(tmp_path: Path, starter: InProcessStarter) -> AsyncIterator[Client]:
    async for made in _client(tmp_path, starter):
        yield made


async def _error(response: Any, status: int) -> str:
    assert response.status == status, await response.text()
    body = await response.json()
    return str(body["error"])


async def test_secrets_api_statuses_and_values_never_shown(client: Client) -> None:
    secret = {"name": "db-password", "value": "hunter2"}
    assert (await client.post("/system/secrets", json=secret)).status == 201
    duplicate = await client.post("/system/secrets", json=secret)
    assert "already exists" in await _error(duplicate, 409)
    listed = await client.get("/system/secrets")
    assert await listed.json() == [{"name": "db-password", "namespace": "openfaas-fn"}]
    assert "hunter2" not in await listed.text()
    assert (await client.put("/system/secrets", json={**secret, "value": "new"})).status == 200
    absent = await client.put("/system/secrets", json={"name": "nope", "value": "x"})
    assert "'nope' does not exist" in await _error(absent, 404)
    bad = await client.post("/system/secrets", json={"name": "Bad", "value": "x"})
    assert (await _error(bad, 400)).startswith("name = 'Bad': ")
    malformed = await client.post("/system/secrets", data=b"{not json")
    assert "not valid JSON" in await _error(malformed, 400)
    assert (await client.delete("/system/secrets", json={"name": "db-password"})).status == 200
    gone = await client.delete("/system/secrets", json={"name": "db-password"})
    assert (await gone.json())["code"] == "secret_not_found"
    assert await (await client.get("/system/secrets")).json() == []


async def test_a_deployment_names_an_unknown_secret_then_gets_its_runtime(
    client: Client, starter: InProcessStarter, package: Path
) -> None:
    deployment = {
        "service": "fn",
        "image": str(package),
        "envVars": {"GREETING": "hi"},
        "secrets": ["db-password"],
        "limits": {"memory": "128Mi"},
    }
    refused = await client.post("/system/functions", json=deployment)
    message = await _error(refused, 400)
    assert message.startswith("secrets: secret 'db-password' does not exist")
    bad_env = await client.post(
        "/system/functions", json={**deployment, "envVars": {"LD_PRELOAD": "/x.so"}}
    )
    assert (await _error(bad_env, 400)).startswith("envVars.LD_PRELOAD: may not be set")

    await client.post("/system/secrets", json={"name": "db-password", "value": "hunter2"})
    assert (await client.post("/system/functions", json=deployment)).status == 202
    await _ready(client, "fn")
    (order,) = starter.orders
    assert order.runtime == WorkerRuntime({"GREETING": "hi"}, ("db-password",), 128 * 2**20)
    assert (order.function, order.instance) == ("fn", order.instance_id)
    status = await (await client.get("/system/function/fn")).json()
    assert (status["secrets"], status["limits"]) == (["db-password"], {"memory": "128Mi"})
    assert "hunter2" not in str(status)


async def test_what_the_server_cannot_enforce_is_refused(tmp_path: Path, package: Path) -> None:
    support = RuntimeSupport(memory_limit="no memory controller", secrets="unshare: EPERM")
    async for client in _client(tmp_path, InProcessStarter(RealClock(), support=support)):
        base = {"service": "fn", "image": str(package)}
        limited = await client.post("/system/functions", json={**base, "limits": {"memory": "1Gi"}})
        message = await _error(limited, 400)
        assert message.startswith("limits.memory = '1Gi': this server cannot enforce")
        assert "(no memory controller)" in message
        await client.post("/system/secrets", json={"name": "s", "value": "v"})
        private = await client.post("/system/functions", json={**base, "secrets": ["s"]})
        message = await _error(private, 400)
        assert message.startswith("secrets = ['s']: this server cannot mount secrets privately")
        assert "(unshare: EPERM)" in message
        plain = await client.post("/system/functions", json=base)  # asks for neither: fine
        assert plain.status == 202


async def _ready(client: Client, name: str, other_than: str = "") -> dict[str, Any]:
    async with asyncio.timeout(10):
        while True:
            listing = await (await client.get(f"/system/instances?function={name}")).json()
            ready = [i for i in listing if i["state"] == "ready" and i["id"] != other_than]
            if ready:
                return dict(ready[0])
            await asyncio.sleep(0.01)


async def test_a_worker_killed_for_memory_is_reported_and_replaced(
    client: Client, starter: InProcessStarter, package: Path
) -> None:
    deployment = {"service": "fn", "image": str(package), "limits": {"memory": "128Mi"}}
    assert (await client.post("/system/functions", json=deployment)).status == 202
    instance = await _ready(client, "fn")
    (order,) = starter.orders
    killed = "killed: out of memory (limit 128 MiB)"
    starter.death_causes[order.instance_id] = killed
    starter.handles[order.instance_id].die()
    status = await (await client.get("/system/function/fn")).json()
    assert status["lastError"] == f"instance {instance['id']}: {killed}"
    logs = await (await client.get("/system/logs?name=fn")).text()
    assert f"worker pid 0 {killed}" in logs
    async with asyncio.timeout(10):
        while True:  # the pool starts a replacement
            if len(starter.orders) == 2:
                break
            await asyncio.sleep(0.01)
    assert starter.orders[1].instance == instance["id"]
    assert starter.orders[1].instance_id == f"{instance['id']}-r1"
