"""A small synchronous HTTP client for the CLI (stdlib only), with faas-cli's gateway choice.

The gateway is `--gateway`, else `$OPENFAAS_URL`, else http://127.0.0.1:8080 — read here,
in the CLI layer, and nowhere else.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

DEFAULT_GATEWAY = "http://127.0.0.1:8080"


def add_gateway_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-g",
        "--gateway",
        default=None,
        help=f"gateway URL (default: $OPENFAAS_URL or {DEFAULT_GATEWAY})",
    )


def gateway_url(args: argparse.Namespace, fallback: str | None = None) -> str:
    url = args.gateway or os.environ.get("OPENFAAS_URL") or fallback or DEFAULT_GATEWAY
    return str(url).rstrip("/")


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
    def __init__(self, url: str, timeout_s: float = 300.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise SystemExit(f"infless: gateway URL {url!r} must start with http:// or https://")
        self.url = url
        self._timeout_s = timeout_s

    def call(self, method: str, path: str, body: object = None, raw: bytes | None = None) -> Reply:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"} if data is not None else {}
        request = urllib.request.Request(self.url + path, data, headers, method=method)  # noqa: S310 (scheme checked above)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:  # noqa: S310
                return Reply(response.status, dict(response.headers), response.read())
        except urllib.error.HTTPError as error:
            return Reply(error.code, dict(error.headers), error.read())
        except urllib.error.URLError as error:
            raise SystemExit(
                f"infless: cannot reach the gateway at {self.url}: {error.reason}"
            ) from None


def fail(reply: Reply, what: str) -> int:
    print(f"infless: {what} failed ({reply.status}): {reply.error_text}", file=sys.stderr)
    return 1
