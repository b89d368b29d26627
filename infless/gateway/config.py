"""The `[gateway]`, `[auth]` and `[ui]` config sections: where the gateway listens, its
limits, who may call it, and its live board (`/ui`). Pure data plus `check_gateway` and
`check_ui`; imports nothing of infless.
"""

from __future__ import annotations

import msgspec


class GatewayConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 4 * 1024 * 1024
    # an uploaded function package: the upload's body and its unpacked files, each
    max_package_bytes: int = 2 * 1024 * 1024 * 1024
    request_timeout_s: float = 60.0
    # the listening socket's connections (gateway.connections): a request must arrive
    # whole within read_timeout_s of its first byte (else 408), a connection with nothing
    # begun closes after idle_timeout_s, and at max_connections a new connection takes the
    # place of the one idle longest
    read_timeout_s: float = 30.0
    idle_timeout_s: float = 75.0
    max_connections: int = 4096


class AuthConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    basic_auth: bool = False  # basic auth on /system/* and /v2/repository/*
    user: str = "admin"
    password: str = ""  # empty: read password_file, or generate it on first start
    password_file: str = ""  # empty: <state.dir>/basic_auth_password
    invoke_token: str = ""  # non-empty: /function/* and /v2/models/* need this bearer token


class UiConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = True  # serve the live board at /ui (auth as /system when auth is on)
    interval_s: float = 1.0  # one snapshot per interval, shared by every open page
    history_s: float = 300.0  # the charts' span: per function, one point per interval
    max_viewers: int = 16  # open pages at once; one more gets 503
    max_skipped: int = 30  # snapshots a page may fall behind (skipping) before it is dropped


def check_ui(ui: UiConfig) -> list[str]:
    problems: list[str] = []
    if not 0.1 <= ui.interval_s <= 60:
        problems.append(f"ui.interval_s = {ui.interval_s}: use 0.1 to 60 seconds")
    if ui.history_s < ui.interval_s or ui.history_s > 86400:
        problems.append(
            f"ui.history_s = {ui.history_s}: use ui.interval_s ({ui.interval_s}) to 86400 seconds"
        )
    if not 1 <= ui.max_viewers <= 1024:
        problems.append(f"ui.max_viewers = {ui.max_viewers}: use 1 to 1024")
    if ui.max_skipped < 1:
        problems.append(f"ui.max_skipped = {ui.max_skipped}: use >= 1")
    return problems


def check_gateway(gateway: GatewayConfig, auth: AuthConfig) -> list[str]:
    """Every problem with the two sections, one sentence each."""
    problems: list[str] = []
    if not 0 <= gateway.port <= 65535:
        problems.append(f"gateway.port = {gateway.port}: must be 0..65535 (0 = any free port)")
    if gateway.max_body_bytes < 1024:
        problems.append(f"gateway.max_body_bytes = {gateway.max_body_bytes}: use >= 1024")
    for key, value in (
        ("read_timeout_s", gateway.read_timeout_s),
        ("idle_timeout_s", gateway.idle_timeout_s),
    ):
        if not value > 0:
            problems.append(f"gateway.{key} = {value}: must be > 0 seconds")
    if gateway.max_connections < 1:
        problems.append(f"gateway.max_connections = {gateway.max_connections}: use >= 1")
    if gateway.max_package_bytes < 1024:
        problems.append(f"gateway.max_package_bytes = {gateway.max_package_bytes}: use >= 1024")
    if auth.basic_auth and (not auth.user or ":" in auth.user):
        problems.append(f"auth.user = {auth.user!r}: must be non-empty, without ':'")
    return problems
