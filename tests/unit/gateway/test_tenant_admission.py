"""Where tenants cannot be kept apart (`[isolation] enabled = "off"` here), the gateway says
so in /system/info and refuses a second tenant's function with a JSON 409, unless the
operator allowed shared tenants."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp.test_utils import TestClient, TestServer

from infless.app import create_app
from infless.clock import RealClock
from infless.config import parse_config
from tests.support.inprocess import InProcessStarter
from tests.unit.weights.packages import write_package

Client = TestClient[Any, Any]


@asynccontextmanager
async def _client(tmp_path: Path, allow_shared: bool) -> AsyncIterator[Client]:
    config = parse_config(
        {
            "state": {"dir": str(tmp_path / "state")},
            "store": {"enabled": False},
            "isolation": {"enabled": "off", "allow_shared_tenants": allow_shared},
        }
    )
    app = create_app(config, starter=InProcessStarter(RealClock()))
    async with TestClient(TestServer(app)) as client:
        yield client


def _body(package: Path, name: str, tenant: str) -> dict[str, Any]:
    return {"service": name, "image": str(package), "labels": {"com.infless.tenant": tenant}}


async def test_a_second_tenant_is_refused_where_tenants_cannot_be_kept_apart(
    tmp_path: Path,
) -> None:
    package = write_package(tmp_path / "model", {"w": np.zeros(2, dtype=np.float32)})
    async with _client(tmp_path, allow_shared=False) as client:
        info = await (await client.get("/system/info")).json()
        assert info["isolation"]["active"] is False
        assert 'isolation.enabled = "off"' in info["isolation"]["missing"][0]
        first = await client.post("/system/functions", json=_body(package, "a1", "alice"))
        assert first.status == 202
        same = await client.post("/system/functions", json=_body(package, "a2", "alice"))
        assert same.status == 202
        other = await client.post("/system/functions", json=_body(package, "m1", "mallory"))
        assert other.status == 409
        body = await other.json()
        assert body["code"] == "tenants_not_isolated"
        assert "tenant 'mallory'" in body["error"]
        assert "isolation.allow_shared_tenants = true" in body["error"]


async def test_shared_tenants_are_deployed_when_the_operator_allows_them(tmp_path: Path) -> None:
    package = write_package(tmp_path / "model", {"w": np.zeros(2, dtype=np.float32)})
    async with _client(tmp_path, allow_shared=True) as client:
        for name, tenant in (("a1", "alice"), ("m1", "mallory")):
            response = await client.post("/system/functions", json=_body(package, name, tenant))
            assert response.status == 202, await response.text()
