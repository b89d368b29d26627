"""OpenFaaS's secrets API, `/system/secrets`: list names, create, update, delete.

Bodies are faas-provider's `Secret` (`registry.secrets.parse_secret`). GET answers names
(and the namespace) only: a value never leaves the gateway except into the tmpfs of a
worker that mounts it. Statuses are those faas-cli (OpenFaaS's go-sdk) accepts: POST 201
(409 when the name is taken), PUT 200 (404 when absent), DELETE 200 (404 when absent).
"""

from __future__ import annotations

import orjson
from aiohttp import web

from infless.errors import MalformedBody
from infless.registry.secrets import SECRETS_NAMESPACE, SecretStore, parse_secret


async def _body(request: web.Request) -> object:
    try:
        return orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        raise MalformedBody(f"the body is not valid JSON: {exc}") from None


class SecretsRoutes:
    def __init__(self, store: SecretStore) -> None:
        self._store = store

    async def list(self, request: web.Request) -> web.Response:
        namespace = request.query.get("namespace") or SECRETS_NAMESPACE
        names = self._store.names() if namespace == SECRETS_NAMESPACE else []
        listing = [{"name": name, "namespace": SECRETS_NAMESPACE} for name in names]
        return web.Response(body=orjson.dumps(listing), content_type="application/json")

    async def create(self, request: web.Request) -> web.Response:
        self._store.create(parse_secret(await _body(request)))
        return web.Response(status=201)

    async def update(self, request: web.Request) -> web.Response:
        self._store.replace(parse_secret(await _body(request)))
        return web.Response(status=200)

    async def delete(self, request: web.Request) -> web.Response:
        self._store.delete(parse_secret(await _body(request), with_value=False).name)
        return web.Response(status=200)
