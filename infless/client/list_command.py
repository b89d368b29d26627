"""`infless list`, `describe NAME`, `instances`: what runs, for people or scripts (`--json`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from infless.client.http import add_gateway_flag, client_for, fail


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_gateway_flag(parser)
    if name == "describe":
        parser.add_argument("function", help="function name")
    if name == "instances":
        parser.add_argument("--function", help="only this function's instances")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(_verb=name)


def table(rows: list[list[str]], header: list[str]) -> str:
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
    print(table(rows, ["Function", "Invocations", "Replicas", "Ready", "SLO", "MaxBatch", "Image"]))


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
        table(rows, ["Instance", "Function", "State", "PID", "Batch", "Cores", "Served", "Queue"])
    )


def _signature(tensors: list[dict[str, Any]]) -> str:
    return ", ".join(f"{t['name']}: {t['dtype']}{t['shape']}" for t in tensors)


def _print_description(f: dict[str, Any], url: str) -> None:
    """faas-cli describe's layout, plus infless's serving fields."""
    signature = f.get("signature") or {}
    rows = [
        ("Name", f["name"]),
        ("Status", "Ready" if f["availableReplicas"] > 0 else "Not Ready"),
        ("Replicas", f["replicas"]),
        ("Available Replicas", f["availableReplicas"]),
        ("Invocations", int(f["invocationCount"])),
        ("Image", f["image"]),
        ("SLO", f"{f['latencyTargetMs']:g}ms"),
        ("Max batch", f["maxBatch"]),
        ("Cold starts", f.get("coldStarts", 0)),
        ("Inputs", _signature(signature.get("inputs", []))),
        ("Outputs", _signature(signature.get("outputs", []))),
        ("Function URL", f"{url}/function/{f['name']}"),
        ("V2 URL", f"{url}/v2/models/{f['name']}/infer"),
    ]
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        print(f"{label + ':':<{width}}{value}")


def run(args: argparse.Namespace) -> int:
    client = client_for(args)
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
    if args.json:
        print(json.dumps(data, indent=2))
    elif verb == "describe":
        _print_description(data, client.url)
    elif verb == "instances":
        _print_instances(data)
    else:
        _print_functions(data)
    return 0
