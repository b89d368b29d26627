"""Gateway authentication, OpenFaaS style: basic auth on management routes, an optional
bearer token on invoke routes.

Management routes (`/system/*`, `/v2/repository/*`) and the live board (`/ui`, `/ui/*`: it
shows what `/system` shows) need basic auth when `auth.basic_auth` is on; invoke routes
(`/function/*`, `/v2/models/*`) are open unless `auth.invoke_token` is set (then a `Bearer`
token, or the admin's basic credentials, passes). Health, metrics and the OpenAPI document
stay open. With auth off nothing is checked, so faas-cli's empty `Authorization: Bearer ` is
ignored. A 401 says only "invalid credentials". Secrets are compared in constant time. Must
not log or echo a secret, except the one-time announcement of a generated password.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import secrets
import string
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from infless.config import Config
from infless.errors import ConfigError, Unauthorized
from infless.gateway.errors import Handler, error_response

PASSWORD_FILE = "basic_auth_password"  # noqa: S105 (a file name, not a secret)
MANAGEMENT_PREFIXES = ("/system/", "/v2/repository/", "/ui/")
BOARD_PAGE = "/ui"  # the live board: as /system (its stream and assets are under /ui/)
INVOKE_PREFIXES = ("/function/", "/v2/models/")
REALM = 'realm="Restricted"'


@dataclass(frozen=True, slots=True)
class AuthSettings:
    user: bytes | None = None  # None: basic auth is off
    password: bytes = b""
    invoke_token: bytes | None = None

    @property
    def enabled(self) -> bool:
        return self.user is not None or self.invoke_token is not None


def _announce(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def password_path(config: Config) -> Path:
    configured = config.auth.password_file
    return Path(configured) if configured else config.state_dir / PASSWORD_FILE


def resolve_password(config: Config, announce: Callable[[str], None] = _announce) -> str:
    """The configured password, else the stored one, else a new one stored with mode 0600."""
    if config.auth.password:
        return config.auth.password
    path = password_path(config)
    try:
        stored = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        stored = ""
    except OSError as exc:
        raise ConfigError(f"auth.password_file = {str(path)!r}: cannot read it: {exc}") from exc
    if stored:
        return stored
    # letters and digits only: a password that starts with "-" reads as a flag on command lines
    password = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(32))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another gateway on this state dir won the race
        return path.read_text(encoding="utf-8").strip()
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(password + "\n")
    announce(
        f"infless: basic auth is on and no password was set: generated one for user "
        f"{config.auth.user!r}, stored in {path} (mode 0600)\n"
        f"infless: password: {password}"
    )
    return password


def load_auth(config: Config, announce: Callable[[str], None] = _announce) -> AuthSettings:
    auth = config.auth
    token = auth.invoke_token.encode() if auth.invoke_token else None
    if not auth.basic_auth:
        return AuthSettings(invoke_token=token)
    password = resolve_password(config, announce)
    return AuthSettings(auth.user.encode(), password.encode(), token)


def _same(given: bytes, expected: bytes) -> bool:
    return hmac.compare_digest(given, expected)


def basic_ok(header: str | None, settings: AuthSettings) -> bool:
    if settings.user is None or not header or not header.startswith("Basic "):
        return False
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    user, _, password = decoded.partition(b":")
    # Both comparisons always run: the answer's timing says nothing about which one failed.
    return _same(user, settings.user) & _same(password, settings.password)


def bearer_ok(header: str | None, settings: AuthSettings) -> bool:
    if settings.invoke_token is None or not header or not header.startswith("Bearer "):
        return False
    return _same(header[7:].strip().encode(), settings.invoke_token)


def invoke_allowed(header: str | None, settings: AuthSettings) -> bool:
    """Whether an invoke with this Authorization header may run (no token set: always)."""
    if settings.invoke_token is None:
        return True
    return bearer_ok(header, settings) or basic_ok(header, settings)


def _denied(scheme: str) -> web.Response:
    response = error_response(Unauthorized("invalid credentials"))
    response.headers["WWW-Authenticate"] = f"{scheme} {REALM}"
    return response


def auth_middleware(
    settings: AuthSettings,
) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """The aiohttp middleware enforcing `settings` (install it only when enabled)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        header = request.headers.get("Authorization")
        if path == BOARD_PAGE or path.startswith(MANAGEMENT_PREFIXES):
            if settings.user is not None and not basic_ok(header, settings):
                return _denied("Basic")
        elif (
            path.startswith(INVOKE_PREFIXES)
            and settings.invoke_token is not None
            and not (bearer_ok(header, settings) or basic_ok(header, settings))
        ):
            return _denied("Bearer")
        return await handler(request)

    return check
