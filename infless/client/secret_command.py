"""`infless secret create|update|list|remove`: OpenFaaS's secrets from the command line.

Like faas-cli: `secret create NAME --from-literal VALUE`, `--from-file PATH`, or the value
piped on stdin (files and stdin travel as `rawValue`, so any bytes survive); `update` takes
the same sources; `list` (`ls`) prints the names; `remove` (`rm`) deletes one. A value is
never printed. Client side: stdlib only.
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path

from infless.client.http import add_gateway_flag, client_for, fail

ENDPOINT = "/system/secrets"


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, text in (("create", "create a secret"), ("update", "replace a secret's value")):
        sub = verbs.add_parser(verb, help=text, description=text)
        add_gateway_flag(sub)
        sub.add_argument("name", help="secret name (lowercase letters, digits, '-', '.')")
        source = sub.add_mutually_exclusive_group()
        source.add_argument("--from-literal", metavar="VALUE", help="the value, as text")
        source.add_argument("--from-file", type=Path, metavar="PATH", help="the value: a file")
    for verb in ("list", "ls"):
        sub = verbs.add_parser(verb, help="list secret names", description="list secret names")
        add_gateway_flag(sub)
    for verb in ("remove", "rm"):
        sub = verbs.add_parser(verb, help="remove a secret", description="remove a secret")
        add_gateway_flag(sub)
        sub.add_argument("name", help="secret name")


def _body(args: argparse.Namespace) -> dict[str, str]:
    if args.from_literal is not None:
        return {"name": args.name, "value": args.from_literal}
    if args.from_file is not None:
        try:
            raw = args.from_file.read_bytes()
        except OSError as exc:
            message = f"infless secret {args.verb}: cannot read {args.from_file}: {exc}"
            raise SystemExit(message) from None
    elif sys.stdin.isatty():
        raise SystemExit(
            f"infless secret {args.verb}: give --from-literal VALUE, --from-file PATH, "
            "or pipe the value on stdin"
        )
    else:
        raw = sys.stdin.buffer.read()
    return {"name": args.name, "rawValue": base64.b64encode(raw).decode()}


def run(args: argparse.Namespace) -> int:
    client = client_for(args)
    verb = args.verb
    if verb in ("list", "ls"):
        reply = client.call("GET", ENDPOINT)
        if reply.status >= 400:
            return fail(reply, "listing secrets")
        print("NAME")
        for secret in reply.json():
            print(secret["name"])
        return 0
    if verb in ("remove", "rm"):
        reply = client.call("DELETE", ENDPOINT, {"name": args.name})
        if reply.status >= 400:
            return fail(reply, f"removing secret {args.name}")
        print(f"Removed secret {args.name}")
        return 0
    method = "POST" if verb == "create" else "PUT"
    reply = client.call(method, ENDPOINT, _body(args))
    if reply.status >= 400:
        return fail(reply, f"{'creating' if verb == 'create' else 'updating'} secret {args.name}")
    print(f"{'Created' if verb == 'create' else 'Updated'} secret {args.name}")
    return 0
