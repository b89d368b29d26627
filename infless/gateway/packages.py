"""The package routes: `POST /system/packages` uploads a function package as a tar.gz,
`GET /system/packages/{digest}` answers its manifest (HEAD: is it stored?), so a client
uploads only what the gateway lacks.

HTTP only: the body is read as it arrives, capped by `gateway.max_package_bytes` (not
`max_body_bytes`), into a staging directory of the store; unpacking, checking and storing
are `packaging.archive` / `packaging.store`'s, run in a thread. `read_capped` reads a JSON
body under the same cap (the V2 repository's load with files). Registered in `routes`.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import orjson
from aiohttp import web

from infless.errors import PackageNotFound, PayloadTooLarge, UnsupportedMediaType
from infless.packaging.archive import Limits
from infless.packaging.store import PackageStore, StoredPackage

log = logging.getLogger(__name__)

ARCHIVE_TYPES = frozenset(
    {
        "application/gzip",
        "application/x-gzip",
        "application/x-tar+gzip",
        "application/x-compressed-tar",
        "application/x-tar",
        "application/octet-stream",
    }
)
ARCHIVE_FILE = "upload.tar"  # the body, inside the staging directory
_FLUSH_BYTES = 1 << 20


def _too_large(limits: Limits) -> PayloadTooLarge:
    return PayloadTooLarge(f"body exceeds {limits.setting} = {limits.max_bytes} bytes")


def _check_length(request: web.Request, limits: Limits) -> None:
    length = request.content_length
    if length is not None and length > limits.max_bytes:
        raise _too_large(limits)


async def read_capped(request: web.Request, limits: Limits) -> bytes:
    """The whole body, refused with 413 once it exceeds `limits.max_bytes`."""
    _check_length(request, limits)
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > limits.max_bytes:
            raise _too_large(limits)
    return bytes(body)


async def stream_to_file(request: web.Request, path: Path, limits: Limits) -> int:
    """Write the body to `path` as it arrives (writes off the loop); returns its size."""
    _check_length(request, limits)
    size = 0
    pending = bytearray()
    with path.open("wb") as file:
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > limits.max_bytes:
                raise _too_large(limits)
            pending += chunk
            if len(pending) >= _FLUSH_BYTES:
                await asyncio.to_thread(file.write, bytes(pending))
                pending.clear()
        await asyncio.to_thread(file.write, bytes(pending))
    return size


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


class PackageRoutes:
    def __init__(self, store: PackageStore, limits: Limits) -> None:
        self._store = store
        self._limits = limits

    async def upload(self, request: web.Request) -> web.Response:
        if request.content_type not in ARCHIVE_TYPES:
            raise UnsupportedMediaType(
                f"Content-Type {request.content_type!r}: send the package as a tar.gz "
                f"({', '.join(sorted(ARCHIVE_TYPES))})"
            )
        store = self._store
        staging = await asyncio.to_thread(store.new_staging)
        try:
            archive = staging / ARCHIVE_FILE
            await stream_to_file(request, archive, self._limits)
        except BaseException:
            await asyncio.to_thread(store.discard, staging)
            raise
        stored = await asyncio.to_thread(self._add, staging, archive)
        log.info(
            "package %s (%s, %d bytes) %s",
            stored.digest,
            stored.manifest.name,
            stored.bytes,
            "stored" if stored.created else "was stored already",
        )
        return _json(stored.to_json(), status=201 if stored.created else 200)

    def _add(self, staging: Path, archive: Path) -> StoredPackage:
        try:
            with archive.open("rb") as file:
                return self._store.add_archive(staging, file, self._limits)
        finally:
            self._store.discard(staging)

    async def manifest(self, request: web.Request) -> web.Response:
        digest = request.match_info["digest"]
        manifest = await asyncio.to_thread(self._store.manifest_bytes, digest)
        if manifest is None:
            raise PackageNotFound(
                f"package {digest} is not stored on this gateway; upload it with "
                "POST /system/packages"
            )
        return web.Response(body=manifest, content_type="application/json")
