"""`infless login` / `infless logout`: save or forget basic-auth credentials per gateway.

Like `faas-cli login`: the credentials are checked with `GET /system/functions` first, then
stored in `~/.infless/credentials.json` (or `$INFLESS_CONFIG_DIR`), file mode 0600. Later
commands use them when no `--username/--password` or `$OPENFAAS_*` variables are given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from infless.client.http import (
    Credentials,
    GatewayClient,
    add_gateway_flag,
    credentials_file,
    fail,
    gateway_url,
    saved_logins,
)


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_gateway_flag(parser, auth_flags=False)
    if name == "login":
        parser.add_argument("-u", "--username", default="admin", help="user (default admin)")
        secret = parser.add_mutually_exclusive_group()
        secret.add_argument("-p", "--password", default=None, help="password (prefer stdin)")
        secret.add_argument(
            "-s", "--password-stdin", action="store_true", help="read the password from stdin"
        )
    parser.set_defaults(_verb=name)


def _save(logins: dict[str, dict[str, str]]) -> None:
    path = credentials_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        json.dump({"gateways": logins}, file, indent=2)
    temporary.replace(path)


def run(args: argparse.Namespace) -> int:
    url = gateway_url(args)
    logins = saved_logins()
    if args._verb == "logout":
        if logins.pop(url, None) is None:
            print(f"infless: no saved login for {url}", file=sys.stderr)
            return 1
        _save(logins)
        print(f"Logged out of {url}")
        return 0
    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else args.password
    if not password:
        raise SystemExit("infless login: give --password-stdin (or --password)")
    client = GatewayClient(url, timeout_s=30.0, auth=Credentials(args.username, password))
    reply = client.call("GET", "/system/functions")
    if reply.status >= 400:
        return fail(reply, f"logging in to {url}")
    logins[url] = {"username": args.username, "password": password}
    _save(logins)
    print(f"Credentials saved for {args.username} at {url} ({credentials_file()})")
    return 0
