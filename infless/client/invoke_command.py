"""`infless invoke NAME`: send stdin to /function/NAME and print the answer (like faas-cli)."""

from __future__ import annotations

import argparse
import sys

from infless.client.http import add_gateway_flag, client_for, fail


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_gateway_flag(parser)
    parser.add_argument("function", help="function name")
    parser.add_argument("-v", "--verbose", action="store_true", help="print timing headers too")


def run(args: argparse.Namespace) -> int:
    body = sys.stdin.buffer.read()
    client = client_for(args)
    reply = client.call("POST", f"/function/{args.function}", raw=body)
    if reply.status >= 400:
        return fail(reply, f"invoking {args.function}")
    if args.verbose:
        for key, value in sorted(reply.headers.items()):
            if key.lower().startswith(("x-infless", "x-duration", "x-call-id")):
                print(f"{key}: {value}", file=sys.stderr)
    sys.stdout.write(reply.body.decode())
    sys.stdout.write("\n")
    return 0
