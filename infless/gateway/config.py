"""The `[gateway]` and `[auth]` config sections: where the gateway listens, its limits, and
who may call it. Pure data plus `check_gateway`; imports nothing of infless.
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
