"""`infless logs NAME`: a function's log lines from `/system/logs`, like `faas-cli logs`.

Flags follow faas-cli, including its inversion: `--tail` (default true) means *follow*,
`--lines N` asks for the last N lines, `--since 5m` or `--since-time RFC3339` for a start;
`-o plain|keyvalue|json` picks the format. Client side: stdlib only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from infless.client.http import Reply, add_gateway_flag, client_for, fail

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")
_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_gateway_flag(parser)
    parser.add_argument("function", help="function name")
    parser.add_argument(
        "--tail",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        help="keep following new lines (default true; --tail=false prints and exits)",
    )
    parser.add_argument("--lines", type=int, default=-1, help="only the last N lines")
    parser.add_argument("--since", default=None, help="only lines newer than this, e.g. 5m")
    parser.add_argument("--since-time", default=None, help="only lines after an RFC 3339 time")
    parser.add_argument("--instance", default=None, help="only this instance's lines")
    parser.add_argument(
        "-o", "--output", choices=["plain", "keyvalue", "json"], default="plain", help="format"
    )


def since_time(args: argparse.Namespace, now: datetime) -> str | None:
    if args.since_time:
        return str(args.since_time)
    if not args.since:
        return None
    match = _DURATION.match(args.since.strip())
    if match is None:
        raise SystemExit(f"infless logs: --since {args.since!r}: expected e.g. 30s, 5m, 1h")
    start = now - timedelta(seconds=float(match[1]) * _UNITS_S[match[2]])
    return start.strftime("%Y-%m-%dT%H:%M:%SZ")


def format_entry(entry: dict[str, Any], output: str) -> str:
    if output == "json":
        return json.dumps(entry)
    if output == "keyvalue":
        return " ".join(
            f"{k}={entry.get(k, '')}" for k in ("name", "instance", "timestamp", "text")
        )
    return f"{entry.get('timestamp', '')} {entry.get('instance', '')} {entry.get('text', '')}"


def run(args: argparse.Namespace) -> int:
    query: dict[str, str] = {"name": args.function, "follow": str(args.tail).lower()}
    if args.lines > 0:
        query["tail"] = str(args.lines)
    since = since_time(args, datetime.now(UTC))
    if since:
        query["since"] = since
    if args.instance:
        query["instance"] = args.instance
    client = client_for(args)
    with client.stream(f"/system/logs?{urlencode(query)}") as response:
        if isinstance(response, Reply):
            return fail(response, f"reading logs of {args.function}")
        try:
            for line in response:
                if line.strip():
                    print(format_entry(json.loads(line), args.output), flush=True)
        except KeyboardInterrupt:
            return 130
    sys.stdout.flush()
    return 0
