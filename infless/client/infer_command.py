"""`infless infer NAME` (an Open Inference Protocol request from a JSON file or stdin) and
`infless metadata NAME` (the model's V2 signature), as tables or `--json`.

The request is a V2 inference request — `{"inputs": [{"name", "shape", "datatype",
"data"}]}` — sent as JSON; the answer's outputs are printed per tensor. Client side: stdlib
only, no numpy needed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from infless.client.http import add_gateway_flag, client_for, fail
from infless.client.list_command import table

PREVIEW_VALUES = 8


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_gateway_flag(parser)
    parser.add_argument("model", help="function (model) name")
    parser.add_argument("--model-version", default=None, help="model version (only 1 exists)")
    if name == "infer":
        parser.add_argument(
            "-f",
            "--file",
            type=Path,
            default=None,
            help="V2 inference request JSON (default: stdin)",
        )
    parser.add_argument("--json", action="store_true", help="print the JSON answer")
    parser.set_defaults(_verb=name)


def _model_path(args: argparse.Namespace) -> str:
    path = f"/v2/models/{quote(args.model, safe='')}"
    if args.model_version:
        path += f"/versions/{quote(args.model_version, safe='')}"
    return path


def _flatten(data: Any) -> list[Any]:
    if isinstance(data, list):
        return [value for item in data for value in _flatten(item)]
    return [data]


def _preview(output: dict[str, Any]) -> str:
    if "data" not in output:
        return "(binary)"
    values = _flatten(output["data"])
    shown = ", ".join(
        f"{v:.6g}" if isinstance(v, float) else str(v) for v in values[:PREVIEW_VALUES]
    )
    return f"[{shown}{', ...' if len(values) > PREVIEW_VALUES else ''}]"


def _read_request(args: argparse.Namespace) -> bytes:
    raw = args.file.read_bytes() if args.file is not None else sys.stdin.buffer.read()
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise SystemExit(f"infless infer: the request is not valid JSON: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("inputs"), list):
        raise SystemExit(
            'infless infer: expected a V2 request {"inputs": [{"name": ..., "shape": [...], '
            '"datatype": "FP32", "data": [...]}]}; see `infless metadata NAME`'
        )
    return raw


def run(args: argparse.Namespace) -> int:
    client = client_for(args)
    path = _model_path(args)
    if args._verb == "metadata":
        reply = client.call("GET", path)
        if reply.status >= 400:
            return fail(reply, f"metadata of {args.model}")
        data = reply.json()
        if args.json:
            print(json.dumps(data, indent=2))
            return 0
        rows = [
            [kind, t["name"], t["datatype"], str(t["shape"])]
            for kind in ("inputs", "outputs")
            for t in data.get(kind, [])
        ]
        print(f"Model: {data['name']}  versions: {', '.join(data.get('versions', []))}")
        print(table(rows, ["Kind", "Tensor", "Datatype", "Shape"]))
        return 0
    reply = client.call("POST", f"{path}/infer", raw=_read_request(args))
    if reply.status >= 400:
        return fail(reply, f"inferring with {args.model}")
    answer = reply.json()
    if args.json:
        print(json.dumps(answer))
        return 0
    rows = [
        [o["name"], o["datatype"], str(o["shape"]), _preview(o)] for o in answer.get("outputs", [])
    ]
    print(table(rows, ["Output", "Datatype", "Shape", "Values"]))
    return 0
