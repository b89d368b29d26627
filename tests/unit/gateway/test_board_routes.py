"""The live board's routes on an in-process gateway (fake clock): the page and its assets,
the event stream (history, snapshot, one more per interval) showing a deployed function's
instance, the bound on pages, a function's detail, and the board turned off."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from infless.app import create_app
from infless.config import parse_config
from tests.support.clock import FakeClock
from tests.support.inprocess import InProcessStarter
from tests.unit.weights.packages import write_package


async def _started(client: TestClient[Any, Any]) -> None:
    async with asyncio.timeout(10):
        while True:
            if await (await client.get("/system/instances")).json():
                return
            await asyncio.sleep(0.01)


@pytest.fixture
async def board(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], FakeClock]]:
    package = write_package(tmp_path / "model", {"w": np.zeros(2, dtype=np.float32)})
    config = parse_config(
        {
            "state": {"dir": str(tmp_path / "state")},
            "store": {"enabled": False},
            "scaling": {"policy": "none"},
            "ui": {"interval_s": 1.0, "max_viewers": 2},
        }
    )
    clock = FakeClock()
    app = create_app(config, clock=clock, starter=InProcessStarter(clock))
    async with TestClient(TestServer(app)) as client:
        deployed = await client.post("/system/functions", json={"service": "fn", "image": str(
            package)})  # fmt: skip
        assert deployed.status == 202
        await _started(client)
        yield client, clock


async def _event(response: ClientResponse) -> tuple[str, dict[str, Any]]:
    """The next server-sent event: its name and its data."""
    name = ""
    while True:
        line = (await response.content.readline()).rstrip(b"\n")
        if line.startswith(b"event: "):
            name = line[len(b"event: ") :].decode()
        elif line.startswith(b"data: "):
            data: dict[str, Any] = orjson.loads(line[len(b"data: ") :])
            return name, data


async def test_the_page_and_its_assets_come_from_the_package(board: Any) -> None:
    client, _ = board
    page = await client.get("/ui")
    assert page.status == 200
    assert page.content_type == "text/html"
    assert "/ui/static/board.js" in await page.text()
    script = await client.get("/ui/static/board.js")
    assert script.content_type == "text/javascript"
    assert "EventSource" in await script.text()
    assert (await client.get("/ui/static/board.css")).content_type == "text/css"
    assert "function chart(" in await (await client.get("/ui/static/draw.js")).text()
    missing = await client.get("/ui/static/secrets.txt")
    assert missing.status == 404
    assert (await missing.json())["code"] == "http_error"


async def test_a_page_gets_the_history_then_a_snapshot_per_interval(board: Any) -> None:
    client, clock = board
    await clock.advance(1.0)  # a point of the function deployed since the board started
    stream = await client.get("/ui/events")
    assert stream.status == 200
    assert stream.headers["Content-Type"] == "text/event-stream"
    name, history = await _event(stream)
    assert name == "history"
    assert "fn" in history["series"]
    name, snapshot = await _event(stream)
    assert name == "snapshot"
    (instance,) = snapshot["instances"]
    assert (instance["function"], instance["state"], instance["cpus"]) == ("fn", "ready", 1)
    (server,) = snapshot["servers"]
    assert server["id"] == instance["server"]
    assert [f["name"] for f in snapshot["functions"]] == ["fn"]
    assert snapshot["fields"][0] == "t"
    await clock.advance(1.0)
    name, later = await _event(stream)
    assert name == "snapshot"
    assert later["t"] == snapshot["t"] + 1.0
    stream.close()


async def test_pages_over_the_bound_get_503_until_one_closes(board: Any) -> None:
    client, clock = board
    open_pages = [await client.get("/ui/events") for _ in range(2)]
    assert all(p.status == 200 for p in open_pages)
    refused = await client.get("/ui/events")
    assert refused.status == 503
    body = await refused.json()
    assert body["code"] == "too_many_viewers"
    assert "ui.max_viewers = 2" in body["error"]
    open_pages[0].close()  # a page closed: its slot frees at its next snapshot's write
    async with asyncio.timeout(10):
        while True:
            await clock.advance(1.0)
            again = await client.get("/ui/events")
            if again.status == 200:
                break
            await asyncio.sleep(0.01)
    again.close()
    open_pages[1].close()


async def test_a_functions_detail_shows_its_instances_batches(board: Any) -> None:
    client, clock = board
    call = asyncio.ensure_future(client.post("/function/fn", json={"inputs": [1.0] * 4}))
    async with asyncio.timeout(10):
        while not call.done():  # the batch waits on the fake clock
            await clock.advance(0.01)
            await asyncio.sleep(0.001)
    assert (await call).status == 200
    detail = await (await client.get("/ui/function/fn")).json()
    assert detail["function"]["name"] == "fn"
    (instance,) = detail["instances"]
    assert instance["recent"][0][0] == 1  # one batch of one, with its service time
    assert "1" in instance["meanMsByBatch"]
    assert detail["admission"]["capacityRps"] >= 0
    assert detail["variants"] is None
    missing = await client.get("/ui/function/nope")
    assert missing.status == 404
    assert (await missing.json())["code"] == "function_not_found"


async def test_the_board_can_be_turned_off(tmp_path: Path) -> None:
    config = parse_config(
        {"state": {"dir": str(tmp_path / "state")}, "store": {"enabled": False},
         "ui": {"enabled": False}}
    )  # fmt: skip
    clock = FakeClock()
    app = create_app(config, clock=clock, starter=InProcessStarter(clock))
    async with TestClient(TestServer(app)) as client:
        assert (await client.get("/ui")).status == 404
        assert (await client.get("/ui/events")).status == 404
