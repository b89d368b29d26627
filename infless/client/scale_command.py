"""`infless scale NAME N` and `infless remove NAME` (or `remove -f stack.yml`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from infless.client.http import add_gateway_flag, client_for, fail


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_gateway_flag(parser)
    if name == "scale":
        parser.add_argument("function", help="function name")
        parser.add_argument("replicas", type=int, help="number of instances (0 = scale to zero)")
    else:
        parser.add_argument("function", nargs="?", help="function name")
        parser.add_argument("-f", "--yaml", type=Path, help="remove every function of a stack file")
    parser.set_defaults(_verb=name)


def run(args: argparse.Namespace) -> int:
    client = client_for(args)
    if args._verb == "scale":
        reply = client.call(
            "POST",
            f"/system/scale-function/{args.function}",
            {"serviceName": args.function, "replicas": args.replicas},
        )
        if reply.status >= 400:
            return fail(reply, f"scaling {args.function}")
        print(f"Scaled {args.function} to {args.replicas} instance(s)")
        return 0
    names = [args.function] if args.function else []
    if args.yaml is not None:
        import yaml

        stack = yaml.safe_load(args.yaml.read_text(encoding="utf-8")) or {}
        names += list((stack.get("functions") or {}).keys())
    if not names:
        raise SystemExit("infless remove: name a function or give -f stack.yml")
    status = 0
    for name in names:
        reply = client.call("DELETE", "/system/functions", {"functionName": name})
        if reply.status >= 400:
            status = fail(reply, f"removing {name}")
        else:
            print(f"Removed {name}")
    return status
