"""`GET /system/function/{name}` shows the autoscaler's last decision while it owns the
function (in-process workers), and nothing of it once a person scaled the function."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp.test_utils import TestClient, TestServer

from infless.app import PLATFORM_KEY, create_app
from infless.clock import RealClock
from infless.config import parse_config
from tests.support.inprocess import InProcessStarter
from tests.unit.weights.packages import write_package


async def _started(client: TestClient[Any, Any], name: str) -> None:
    async with asyncio.timeout(10):
        while True:
            if await (await client.get(f"/system/instances?function={name}")).json():
                return
            await asyncio.sleep(0.01)


async def test_the_planners_decision_is_part_of_the_functions_document(tmp_path: Path) -> None:
    package = write_package(tmp_path / "model", {"w": np.zeros(2, dtype=np.float32)})
    config = parse_config({"state": {"dir": str(tmp_path / "state")}, "store": {"enabled": False}})
    app = create_app(config, starter=InProcessStarter(RealClock()))
    platform = app[PLATFORM_KEY]
    async with TestClient(TestServer(app)) as client:
        deployed = await client.post("/system/functions", json={"service": "fn", "image": str(
            package)})  # fmt: skip
        assert deployed.status == 202
        await _started(client, "fn")
        assert platform.autoscaler is not None
        platform.autoscaler.tick()
        status: dict[str, Any] = await (await client.get("/system/function/fn")).json()
        planner = status["planner"]
        assert set(planner) == {"demandRps", "regime", "unmetRps", "unpriced"}
        assert planner["regime"] in {"above", "band", "below", "idle"}
        assert isinstance(planner["unpriced"], list)
        scaled = await client.post("/system/scale-function/fn", json={"replicas": 1})
        assert scaled.status in (200, 202)
        status = await (await client.get("/system/function/fn")).json()
        assert status["owner"] == "manual"
        assert "planner" not in status
