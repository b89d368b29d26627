"""A small synchronous HTTP client for the CLI (stdlib only), with faas-cli's gateway choice
and credentials.

The gateway is `--gateway`, else `$OPENFAAS_URL`, else http://127.0.0.1:8080. Credentials:
`--username/--password`, else `$OPENFAAS_USERNAME/$OPENFAAS_PASSWORD`, else what `infless
login` saved for that gateway; the invoke token is `--token`, else `$INFLESS_TOKEN`. The
environment is read here, in the CLI layer, and nowhere else.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.client import HTTPResponse
from pathlib import Path
from typing import Any, Protocol

DEFAULT_GATEWAY = "http://127.0.0.1:8080"


class Readable(Protocol):
    """A request body read as it is sent (an upload's file, or one counting its bytes)."""

    def read(self, size: int = -1, /) -> bytes: ...


INVOKE_PREFIXES = ("/function/", "/v2/models/")


def add_gateway_flag(parser: argparse.ArgumentParser, auth_flags: bool = True) -> None:
    parser.add_argument(
        "-g",
        "--gateway",
        default=None,
        help=f"gateway URL (default: $OPENFAAS_URL or {DEFAULT_GATEWAY})",
    )
    if auth_flags:
        parser.add_argument(
            "--username", default=None, help="basic-auth user (default: $OPENFAAS_USERNAME)"
        )
        parser.add_argument(
            "--password", default=None, help="basic-auth password (default: $OPENFAAS_PASSWORD)"
        )
        parser.add_argument(
            "-k", "--token", default=None, help="invoke bearer token (default: $INFLESS_TOKEN)"
        )


def gateway_url(args: argparse.Namespace, fallback: str | None = None) -> str:
    url = args.gateway or os.environ.get("OPENFAAS_URL") or fallback or DEFAULT_GATEWAY
    return str(url).rstrip("/")


@dataclass(frozen=True)
class Credentials:
    username: str | None = None
    password: str | None = None
    token: str | None = None

    def header(self, path: str) -> str | None:
        """The Authorization header for a path: the token on invoke routes, else basic."""
        if self.token and path.startswith(INVOKE_PREFIXES):
            return f"Bearer {self.token}"
        if self.username and self.password is not None:
            raw = f"{self.username}:{self.password}".encode()
            return "Basic " + base64.b64encode(raw).decode()
        return None


def credentials_file() -> Path:
    root = os.environ.get("INFLESS_CONFIG_DIR") or Path.home() / ".infless"
    return Path(root) / "credentials.json"


def saved_logins() -> dict[str, dict[str, str]]:
    try:
        data = json.loads(credentials_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    gateways = data.get("gateways") if isinstance(data, dict) else None
    return gateways if isinstance(gateways, dict) else {}


def credentials(args: argparse.Namespace, url: str) -> Credentials:
    saved = saved_logins().get(url, {})
    username = getattr(args, "username", None) or os.environ.get("OPENFAAS_USERNAME")
    password = getattr(args, "password", None) or os.environ.get("OPENFAAS_PASSWORD")
    if username is None and password is None:
        username, password = saved.get("username"), saved.get("password")
    elif username is None:
        username = "admin"  # faas-cli's default user
    token = getattr(args, "token", None) or os.environ.get("INFLESS_TOKEN")
    return Credentials(username, password, token)


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error_text(self) -> str:
        try:
            return str(self.json().get("error", self.body.decode(errors="replace")))
        except (ValueError, AttributeError):
            return self.body.decode(errors="replace")


class GatewayClient:
    def __init__(self, url: str, timeout_s: float = 300.0, auth: Credentials | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise SystemExit(f"infless: gateway URL {url!r} must start with http:// or https://")
        self.url = url
        self._timeout_s = timeout_s
        self._auth = auth or Credentials()

    def _request(
        self,
        method: str,
        path: str,
        body: object,
        raw: bytes | Readable | None,
        headers: dict[str, str] | None = None,
    ) -> urllib.request.Request:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = headers or ({"Content-Type": "application/json"} if data is not None else {})
        authorization = self._auth.header(path)
        if authorization:
            headers["Authorization"] = authorization
        return urllib.request.Request(self.url + path, data, headers, method=method)  # noqa: S310 (scheme checked above)

    def call(self, method: str, path: str, body: object = None, raw: bytes | None = None) -> Reply:
        return self._send(self._request(method, path, body, raw))

    def upload(self, path: str, file: Readable, length: int, content_type: str) -> Reply:
        """POST a file's content as it is read (never whole in memory)."""
        headers = {"Content-Type": content_type, "Content-Length": str(length)}
        return self._send(self._request("POST", path, None, file, headers))

    def _send(self, request: urllib.request.Request) -> Reply:
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:  # noqa: S310
                return Reply(response.status, dict(response.headers), response.read())
        except urllib.error.HTTPError as error:
            return Reply(error.code, dict(error.headers), error.read())
        except urllib.error.URLError as error:
            raise SystemExit(
                f"infless: cannot reach the gateway at {self.url}: {error.reason}"
            ) from None

    @contextlib.contextmanager
    def stream(self, path: str) -> Iterator[HTTPResponse | Reply]:
        """A GET whose body is read as it arrives (log following); a Reply on error."""
        request = self._request("GET", path, None, None)
        try:
            with urllib.request.urlopen(request, timeout=None) as response:  # noqa: S310
                yield response
        except urllib.error.HTTPError as error:
            yield Reply(error.code, dict(error.headers), error.read())
        except urllib.error.URLError as error:
            raise SystemExit(
                f"infless: cannot reach the gateway at {self.url}: {error.reason}"
            ) from None


def client_for(args: argparse.Namespace, fallback: str | None = None) -> GatewayClient:
    """The gateway client a command's flags and environment ask for."""
    url = gateway_url(args, fallback)
    return GatewayClient(url, auth=credentials(args, url))


def fail(reply: Reply, what: str) -> int:
    print(f"infless: {what} failed ({reply.status}): {reply.error_text}", file=sys.stderr)
    return 1
