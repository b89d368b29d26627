"""The flags every load mode shares (replay, synthetic, max-rate): target and safety caps,
bodies, request format and route, credentials, progress.

Pure argparse: builds arguments and parses their values, imports nothing heavy (numpy,
aiohttp) so `--help` stays fast; `cli` turns the parsed flags into run options.
"""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_GATEWAY = "http://127.0.0.1:8080"
# Copies of formats.BODY_FORMATS and formats.ROUTES (a test keeps them equal).
BODY_FORMATS = ("json", "msgpack", "raw")
ROUTES = ("function", "v2")


def _seq_len(text: str) -> tuple[int, int]:
    low, _, high = text.partition(":")
    try:
        bounds = (int(low), int(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seq-len {text!r}: use MIN:MAX, e.g. 8:32") from None
    if not 1 <= bounds[0] <= bounds[1]:
        raise argparse.ArgumentTypeError(f"--seq-len {text!r}: need 1 <= MIN <= MAX")
    return bounds


def add_common_flags(p: argparse.ArgumentParser) -> None:
    """Target, caps, bodies, request format and route, credentials, progress."""
    p.add_argument(
        "--gateway", default=DEFAULT_GATEWAY, help=f"gateway URL (default {DEFAULT_GATEWAY})"
    )
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback gateway")
    p.add_argument("--out", type=Path, help="report directory (default loadgen-reports/KIND-TIME)")
    p.add_argument("--seed", type=int, default=0, help="seed for arrivals and bodies (default 0)")
    p.add_argument("--timeout-s", type=float, default=30.0, help="per-request timeout (default 30)")
    p.add_argument(
        "--max-duration-s",
        type=float,
        default=600.0,
        help="hard cap on the time spent sending (default 600)",
    )
    p.add_argument(
        "--max-requests",
        type=int,
        default=10_000,
        help="hard cap on requests per run or per max-rate step (default 10000)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        help="connection pool size (default: sized from the peak rate)",
    )
    p.add_argument(
        "--poll-interval-s",
        type=float,
        default=1.0,
        help="poll /system/instances this often; 0 disables (default 1)",
    )
    p.add_argument("--slo-ms", type=float, help="override every function's SLO")
    p.add_argument(
        "--bodies", type=int, default=16, help="distinct bodies per function (default 16)"
    )
    p.add_argument(
        "--seq-len",
        type=_seq_len,
        default=(8, 32),
        help="length range for -1 dims, MIN:MAX (default 8:32)",
    )
    p.add_argument(
        "--format",
        dest="body_format",
        choices=BODY_FORMATS,
        default="json",
        help="request bodies: json, msgpack or raw tensor bytes (default json)",
    )
    p.add_argument(
        "--route",
        choices=ROUTES,
        default="function",
        help="POST /function/{name} or /v2/models/{name}/infer (default function)",
    )
    p.add_argument("--token", help="bearer token for invoke requests (auth.invoke_token)")
    p.add_argument("--user", help="basic-auth user, sent on every request")
    p.add_argument(
        "--password-file",
        type=Path,
        help="file holding --user's password (default: $OPENFAAS_PASSWORD)",
    )
    p.add_argument(
        "-q",
        "--quiet",
        "--no-progress",
        dest="no_progress",
        action="store_true",
        help="no progress bar (there is none either when stderr is not a terminal)",
    )
