"""`infless list`, `describe NAME`, `instances`: what runs, for people or scripts (`--json`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from infless.client.http import GatewayClient, add_gateway_flag, fail, gateway_url


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_gateway_flag(parser)
    if name == "describe":
        parser.add_argument("function", help="function name")
    if name == "instances":
        parser.add_argument("--function", help="only this function's instances")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(_verb=name)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


def _print_functions(items: list[dict[str, Any]]) -> None:
    rows = [
        [
            f["name"],
            str(int(f["invocationCount"])),
            str(f["replicas"]),
            str(f["availableReplicas"]),
            f"{f['latencyTargetMs']:g}ms",
            str(f["maxBatch"]),
            f["image"],
        ]
        for f in items
    ]
    print(
        _table(rows, ["Function", "Invocations", "Replicas", "Ready", "SLO", "MaxBatch", "Image"])
    )


def _print_instances(items: list[dict[str, Any]]) -> None:
    rows = [
        [
            i["id"],
            i["function"],
            i["state"],
            str(i["pid"]),
            str(i["batchSize"]),
            ",".join(map(str, i["cpuIds"])),
            str(i["served"]),
            str(i["queueLength"]),
        ]
        for i in items
    ]
    print(
        _table(rows, ["Instance", "Function", "State", "PID", "Batch", "Cores", "Served", "Queue"])
    )


def run(args: argparse.Namespace) -> int:
    client = GatewayClient(gateway_url(args))
    verb = args._verb
    if verb == "describe":
        reply = client.call("GET", f"/system/function/{args.function}")
    elif verb == "instances":
        suffix = f"?function={args.function}" if args.function else ""
        reply = client.call("GET", f"/system/instances{suffix}")
    else:
        reply = client.call("GET", "/system/functions")
    if reply.status >= 400:
        return fail(reply, verb)
    data = reply.json()
    if args.json or verb == "describe":
        print(json.dumps(data, indent=2))
    elif verb == "instances":
        _print_instances(data)
    else:
        _print_functions(data)
    return 0
