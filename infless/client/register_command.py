"""`infless register -f model.yml` (model-less: generate and profile a model's variants) and
`infless variants MODEL` (its variants, their profiles and live states).

model.yml:

    model: textcnn               # queries go to /function/textcnn
    image: textcnn-69            # a zoo model, a local package directory, or sha256:<digest>
    slo_ms: 50
    max_batch: 16                # optional
    validation:
      generate: 128              # seeded random inputs; or  file: ./validation.npz
    metric: top1-agreement       # optional: top1-labels, top1-agreement, cosine
    variants: [fp32, bf16, int8] # optional: all of them by default
    apps:                        # optional: applications and their goals
      - id: chat
        latency_ms: 20
        min_accuracy: 0.99
        cost_weight: 1
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path
from typing import Any

from infless.client.http import GatewayClient, add_gateway_flag, client_for, fail
from infless.clock import pause_s, perf_s
from infless.progress import Quiet, Reporter, progress_for

POLL_S = 1.0  # how often a waiting `register` reads the registration's progress
_APP_KEYS = {
    "id": "id",
    "latency_ms": "latencyMs",
    "min_accuracy": "minAccuracy",
    "cost_weight": "costWeight",
}


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_gateway_flag(parser)
    if name == "register":
        parser.add_argument("-f", "--yaml", type=Path, required=True, help="the model.yml")
        parser.add_argument(
            "--no-wait", action="store_true", help="return once the gateway accepted it"
        )
        parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait")
        parser.add_argument(
            "-q", "--quiet", action="store_true", help="no progress (none either off a terminal)"
        )
    else:
        parser.add_argument("model", help="a registered model")
        parser.add_argument("--json", action="store_true", help="print the gateway's JSON")
    parser.set_defaults(_verb=name)


def registration(
    document: dict[str, Any], base: Path, client: GatewayClient, progress: Reporter | None = None
) -> dict[str, Any]:
    """The JSON body of `POST /system/register` from a model.yml (a local package uploaded)."""
    from infless.client.packages import PackageUploader, UploadFailed, local_package

    missing = [k for k in ("model", "image", "slo_ms", "validation") if k not in document]
    if missing:
        raise SystemExit(f"infless register: model.yml lacks {', '.join(missing)}")
    image = str(document["image"])
    package_dir = local_package(image, base)
    if package_dir is not None:
        try:
            uploader = PackageUploader(client, progress=progress)
            image = uploader.image_for(package_dir, str(document["model"]))
        except UploadFailed as exc:
            raise SystemExit(f"infless register: {exc}") from None
    validation = document["validation"] or {}
    body_validation: dict[str, Any] = {}
    if "generate" in validation:
        body_validation["generate"] = int(validation["generate"])
    elif "file" in validation:
        path = Path(str(validation["file"])).expanduser()
        path = path if path.is_absolute() else base / path
        body_validation = {
            "filename": path.name,
            "data": base64.b64encode(path.read_bytes()).decode(),
        }
    body: dict[str, Any] = {
        "model": document["model"],
        "image": image,
        "sloMs": float(document["slo_ms"]),
        "validation": body_validation,
    }
    for key, wire in (
        ("max_batch", "maxBatch"),
        ("metric", "metric"),
        ("variants", "variants"),
        ("cpus", "cpus"),
    ):
        if key in document:
            body[wire] = document[key]
    body["apps"] = [
        {_APP_KEYS[k]: v for k, v in app.items() if k in _APP_KEYS}
        for app in document.get("apps") or []
    ]
    return body


def run(args: argparse.Namespace) -> int:
    client = client_for(args)
    if args._verb == "variants":
        return show(client, args.model, args.json)
    import yaml

    document = yaml.safe_load(args.yaml.read_text(encoding="utf-8")) or {}
    with progress_for(args.quiet) as progress:
        body = registration(document, args.yaml.resolve().parent, client, progress)
    model = str(body["model"])
    reply = client.call("POST", "/system/register", body)
    if reply.status >= 400:
        return fail(reply, f"registering {model}")
    if not args.quiet:
        print(f"Registering {model}: generating and profiling its variants ...", flush=True)
    if args.no_wait:
        return 0
    with progress_for(args.quiet) as progress:
        document = wait_ready(client, model, args.timeout, progress)
    return report(model, document, args.timeout)


def wait_ready(
    client: GatewayClient,
    model: str,
    timeout_s: float,
    progress: Reporter | None = None,
    poll_s: float = POLL_S,
) -> dict[str, Any] | None:
    """Poll until the registration is ready or failed (its document), showing the
    variants generated so far; None when `timeout_s` passed first."""
    progress = progress or Quiet()
    progress.begin(f"registering {model}")
    deadline = perf_s() + timeout_s
    while perf_s() < deadline:
        pause_s(poll_s)
        reply = client.call("GET", f"/system/variants/{model}")
        if reply.status >= 400:
            return {"status": "failed", "error": f"reading it: {reply.error_text}"}
        document: dict[str, Any] = reply.json()
        if document["status"] in ("failed", "ready"):
            return document
        step = document.get("progress") or {}
        if step:
            progress.update(step["done"], step["total"], note=str(step.get("step", "")))
    return None


def report(model: str, document: dict[str, Any] | None, timeout_s: float) -> int:
    """Print a registration's outcome: its variants, or why it is not ready."""
    if document is None:
        print(f"infless: {model} still generating after {timeout_s:g} s", file=sys.stderr)
        return 1
    if document["status"] == "failed":
        print(f"infless: registering {model} failed: {document['error']}", file=sys.stderr)
        return 1
    print(format_variants(document))
    return 0


def show(client: GatewayClient, model: str, as_json: bool) -> int:
    reply = client.call("GET", f"/system/variants/{model}")
    if reply.status >= 400:
        return fail(reply, f"reading {model}")
    if as_json:
        print(reply.body.decode())
        return 0
    print(format_variants(reply.json()))
    return 0


def _fmt(value: object, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def format_variants(document: dict[str, Any]) -> str:
    """The model's status line and one row per variant."""
    lines = [
        f"{document['model']}: {document['status']}  (SLO {document['slo_ms']:g} ms, "
        f"metric {document.get('metric') or '-'}, target {document.get('target') or '-'}, "
        f"switches {document.get('switches', 0)})"
    ]
    if document.get("error"):
        lines.append(f"  error: {document['error']}")
    header = (
        f"{'VARIANT':<14}{'STATUS':<16}{'STATE':<12}{'ACCURACY':>9}{'B1 MS':>9}"
        f"{'CONFIG':>10}{'QPS':>9}{'LOAD MS':>9}{'PEAK MB':>9}"
    )
    lines.append(header)
    for v in document.get("variants", []):
        b1 = [p["measured_ms"] for p in v.get("latency", []) if p["batch_size"] == 1]
        config = v.get("config") or {}
        shape = f"b{config['batchSize']}c{config['cpus']}" if config else "-"
        if v.get("meetsSlo") is False:
            shape = "over SLO"
        peak = v.get("peak_memory_bytes")
        lines.append(
            f"{v['name']:<14}{v['status']:<16}{v.get('state', '-'):<12}"
            f"{_fmt(v.get('accuracy'), '.4f'):>9}{_fmt(min(b1) if b1 else None, '.2f'):>9}"
            f"{shape:>10}{_fmt(config.get('qps'), '.0f'):>9}{_fmt(v.get('load_ms'), '.0f'):>9}"
            f"{_fmt(None if peak is None else peak / 2**20, '.0f'):>9}"
        )
        if v.get("error"):
            lines.append(f"    {v['error'][:160]}")
        if v.get("sloProblem"):
            lines.append(f"    {v['sloProblem']}")
    for app_id, goals in (document.get("apps") or {}).items():
        lines.append(f"  app {app_id}: {goals}")
    return "\n".join(lines)
