"""`infless metrics [NAME]`: the gateway's Prometheus series, optionally for one function.

Parses `/metrics` with prometheus-client's parser; a table by default (histogram buckets
left out unless `--buckets`), `--json` for scripts, `--raw` for the exposition text.
"""

from __future__ import annotations

import argparse
import json

from infless.client.http import add_gateway_flag, client_for, fail
from infless.client.list_command import table

FUNCTION_LABELS = ("function_name", "model")


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_gateway_flag(parser)
    parser.add_argument("function", nargs="?", help="only series of this function")
    parser.add_argument("--buckets", action="store_true", help="include histogram buckets")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print samples as JSON")
    output.add_argument("--raw", action="store_true", help="print the exposition text")


def run(args: argparse.Namespace) -> int:
    from prometheus_client.parser import text_string_to_metric_families

    reply = client_for(args).call("GET", "/metrics")
    if reply.status >= 400:
        return fail(reply, "reading metrics")
    text = reply.body.decode()
    if args.raw:
        print(text, end="")
        return 0
    samples: list[tuple[str, dict[str, str], float]] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = dict(sample.labels)
            owner = next((labels[k] for k in FUNCTION_LABELS if k in labels), None)
            if args.function and owner != args.function:
                continue
            if sample.name.endswith("_bucket") and not args.buckets:
                continue
            samples.append((sample.name, labels, float(sample.value)))
    if args.json:
        as_json = [{"name": n, "labels": labels, "value": v} for n, labels, v in samples]
        print(json.dumps(as_json, indent=2))
        return 0
    rows = [
        [name, ",".join(f"{k}={v}" for k, v in sorted(labels.items())), f"{value:g}"]
        for name, labels, value in samples
    ]
    print(table(rows, ["Metric", "Labels", "Value"]))
    return 0
