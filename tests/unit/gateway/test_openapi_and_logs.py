"""The OpenAPI document describes exactly the routes the gateway registers; the log buffer
keeps bounded per-function lines, attributes gateway records to instances, and follows."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from infless.app import PLATFORM_KEY, Platform, create_app
from infless.config import parse_config
from infless.gateway.logs import GatewayLogHandler, LogBuffer
from infless.gateway.openapi import openapi_document
from infless.gateway.openapi_route import ERRORS


def test_every_registered_route_is_documented_and_nothing_else(tmp_path: Path) -> None:
    config = parse_config(
        {
            "state": {"dir": str(tmp_path / "state")},
            "store": {"enabled": False},
            "auth": {"basic_auth": True, "password": "x"},
        }
    )
    app = create_app(config)
    platform = app[PLATFORM_KEY]
    assert isinstance(platform, Platform)
    try:
        registered = set()
        for route in app.router.routes():
            if route.method == "HEAD":
                continue
            path = route.resource.canonical if route.resource is not None else ""
            method = "post" if route.method == "*" else route.method.lower()
            registered.add((method, path))
    finally:
        platform.registry.close()
    document = openapi_document()
    documented = {
        (method, path) for path, operations in document["paths"].items() for method in operations
    }
    assert registered == documented
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert operation["summary"], (method, path)
            for status in operation["responses"]:
                assert int(status) < 400 or int(status) in ERRORS
    infer = document["paths"]["/v2/models/{name}/infer"]["post"]
    assert set(infer["requestBody"]["content"]) == {"application/json", "application/octet-stream"}
    assert "503" in infer["responses"]


def test_log_buffer_is_bounded_filtered_and_attributes_records() -> None:
    buffer = LogBuffer(lambda: 1_700_000_000.0, lines_per_function=3)
    for i in range(5):
        buffer.append("mnist", f"mnist-00000{i % 2}", f"line {i}\n", 1_700_000_000.0 + i)
    entries = buffer.entries("mnist")
    assert [e.text for e in entries] == ["line 2", "line 3", "line 4"]
    assert [e.text for e in buffer.entries("mnist", instance="mnist-000001")] == ["line 3"]
    assert [e.text for e in buffer.entries("mnist", since_s=1_700_000_004.0)] == ["line 4"]
    line = entries[0].to_json("openfaas-fn")
    assert line.endswith(b"\n")
    assert b'"timestamp":"2023-11-14T22:13:22.000000Z"' in line

    logger = logging.getLogger("infless.test-logs")
    handler = GatewayLogHandler(buffer)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logger.info("instance %s ready: pid %d", "resnet-20-a1b2c3", 42)
        logger.info("nothing about an instance: %s", "hello")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    (entry,) = buffer.entries("resnet-20")
    assert entry.instance == "resnet-20-a1b2c3"
    assert entry.text == "INFO instance resnet-20-a1b2c3 ready: pid 42"


async def test_followers_get_new_lines_and_stop_on_close() -> None:
    buffer = LogBuffer(lambda: 0.0)
    buffer.bind(asyncio.get_running_loop())
    buffer.append("mnist", "mnist-aaaaaa", "old", 0.0)
    seen: list[str] = []

    async def follow() -> None:
        async for entry in buffer.follow("mnist", None, lambda: True):
            seen.append(entry.text)
            if len(seen) == 2:
                buffer.close()

    task = asyncio.create_task(follow())
    await asyncio.sleep(0)
    buffer.append("mnist", "mnist-aaaaaa", "new 1", 0.0)
    buffer.append("other", "other-aaaaaa", "not mine", 0.0)
    buffer.append("mnist", "mnist-aaaaaa", "new 2", 0.0)
    await asyncio.wait_for(task, 5.0)
    assert seen == ["new 1", "new 2"]
