"""The package routes over HTTP (aiohttp's test server, no workers): upload, look up, the
4xx of each bad body, the streamed size cap, and a clean store after every failure; the V2
load's `file:` parameters."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from infless.errors import BadRequest
from infless.gateway.errors import json_errors
from infless.gateway.packages import PackageRoutes
from infless.gateway.v2.repository import load_deployment, load_files
from infless.packaging.archive import Limits
from infless.packaging.store import PackageStore
from tests.support.tarballs import entry, good_entries, tarball, zeros_member

GZIP = {"Content-Type": "application/gzip"}
LIMIT = 64 * 1024


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    routes = PackageRoutes(PackageStore(tmp_path), Limits(LIMIT))
    app = web.Application()
    app.add_routes(
        [
            web.post("/system/packages", json_errors(routes.upload)),
            web.get("/system/packages/{digest}", json_errors(routes.manifest)),
        ]
    )
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


def _store_entries(tmp_path: Path) -> list[str]:
    root = tmp_path / "packages"
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


async def test_upload_then_lookups(
    client: TestClient[web.Request, web.Application], tmp_path: Path
) -> None:
    body = tarball(*good_entries())
    first = await client.post("/system/packages", data=body, headers=GZIP)
    assert first.status == 201, await first.text()
    stored = await first.json()
    assert stored["name"] == "tiny"
    assert stored["image"] == stored["digest"]
    again = await client.post(
        "/system/packages", data=body, headers={"Content-Type": "application/octet-stream"}
    )
    assert again.status == 200
    assert (await again.json())["digest"] == stored["digest"]
    assert _store_entries(tmp_path) == [stored["digest"].removeprefix("sha256:")]

    digest = stored["digest"]
    assert (await client.head(f"/system/packages/{digest}")).status == 200
    manifest = await client.get(f"/system/packages/{digest}")
    assert (await manifest.json())["name"] == "tiny"
    absent = "sha256:" + "0" * 64
    assert (await client.head(f"/system/packages/{absent}")).status == 404
    missing = await client.get(f"/system/packages/{absent}")
    assert missing.status == 404
    assert (await missing.json())["code"] == "package_not_found"
    malformed = await client.get("/system/packages/sha256:..%2f..%2fetc")
    assert malformed.status == 400


@pytest.mark.parametrize(
    ("body", "headers", "status", "words"),
    [
        (tarball(*good_entries()), {"Content-Type": "application/json"}, 415, "tar.gz"),
        (b"plain text", GZIP, 400, "not a readable tar archive"),
        (tarball(entry("../evil", data=b"x")), GZIP, 422, "'../evil'"),
        (tarball(*good_entries(), entry("lnk", b"2", link="/")), GZIP, 422, "'lnk' is a symlink"),
        (tarball(entry("weights.safetensors", data=b"w")), GZIP, 422, r"no manifest.json"),
        (tarball(zeros_member("bomb", LIMIT + 1)), GZIP, 413, "'bomb'"),
        (b"\0" * (LIMIT + 1), GZIP, 413, f"gateway.max_package_bytes = {LIMIT}"),
    ],
)
async def test_bad_uploads_get_their_4xx_and_leave_nothing(
    client: TestClient[web.Request, web.Application],
    tmp_path: Path,
    body: bytes,
    headers: dict[str, str],
    status: int,
    words: str,
) -> None:
    reply = await client.post("/system/packages", data=body, headers=headers)
    assert reply.status == status
    error = await reply.json()
    assert words in error["error"] or words.replace("\\", "") in error["error"]
    assert _store_entries(tmp_path) == []
    assert not (tmp_path.parent / "evil").exists()


async def test_a_streamed_body_is_cut_off_at_the_limit(
    client: TestClient[web.Request, web.Application], tmp_path: Path
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(8):
            yield b"\0" * (LIMIT // 4)

    reply = await client.post("/system/packages", data=chunks(), headers=GZIP)  # chunked
    assert reply.status == 413
    assert _store_entries(tmp_path) == []


def test_v2_load_files_are_decoded_and_deployed_by_digest() -> None:
    parameters = {
        "config": '{"image": "mnist", "labels": {"a": "b"}}',
        "file:1/manifest.json": base64.b64encode(b"{}").decode(),
    }
    assert load_files(parameters) == [("1/manifest.json", b"{}")]
    deployment = load_deployment("digits", parameters, "sha256:abc")
    assert deployment == {"service": "digits", "image": "sha256:abc", "labels": {"a": "b"}}
    assert load_deployment("mnist", {})["image"] == "mnist"
    for bad in ({"file:x": "***"}, {"file:x": 5}):
        with pytest.raises(BadRequest, match=r"parameters\['file:x'\]"):
            load_files(bad)
