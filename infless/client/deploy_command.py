"""`infless deploy` / `infless up`: deploy functions from an INFless stack.yml or from flags.

Like faas-cli: PUT /system/functions first, POST when the gateway answers 404. A stack
function's `latency_target` becomes annotation `com.infless.latency_target`, `requests.cpu`
the cores per instance, `environment` the envVars, `secrets` the secret names and
`limits.memory` the worker's memory limit. An `image` that is a package directory on this
machine (relative to the stack file, or to the working directory with `--image`) is uploaded
unless the gateway has it (`client.packages`) and deployed as `sha256:<hex>`, so the gateway
may be anywhere.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from infless.client.http import GatewayClient, add_gateway_flag, client_for, fail
from infless.client.packages import PackageUploader, UploadFailed, local_package
from infless.progress import progress_for
from infless.registry.deployment import LATENCY_ANNOTATION, MAX_BATCH_LABEL


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_gateway_flag(parser)
    parser.add_argument("-f", "--yaml", type=Path, help="stack.yml with a `functions:` map")
    parser.add_argument("--name", help="function name (deploy without a stack file)")
    parser.add_argument(
        "--image", help="zoo model name, package directory (uploaded), or sha256:<digest>"
    )
    parser.add_argument("--latency-target", help="SLO, e.g. 50ms")
    parser.add_argument("--max-batch", type=int, help="largest batch size")
    parser.add_argument("--label", action="append", default=[], help="KEY=VALUE (repeatable)")
    parser.add_argument("--filter", help="deploy only this function of the stack file")
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no upload progress (none either off a terminal)"
    )


def _stringify(values: dict[str, Any] | None) -> dict[str, str]:
    return {
        str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in (values or {}).items()
    }


def stack_to_deployments(stack: dict[str, Any]) -> list[dict[str, object]]:
    functions = stack.get("functions")
    if not isinstance(functions, dict) or not functions:
        raise SystemExit("infless: the stack file has no `functions:` map")
    deployments = []
    for name, raw_entry in functions.items():
        entry = raw_entry or {}
        labels = _stringify(entry.get("labels"))
        annotations = _stringify(entry.get("annotations"))
        if "latency_target" in entry:
            annotations[LATENCY_ANNOTATION] = str(entry["latency_target"])
        deployment: dict[str, object] = {
            "service": str(name),
            "image": str(entry.get("image", "")),
            "labels": labels,
            "annotations": annotations,
            "envVars": _stringify(entry.get("environment")),
        }
        for key in ("requests", "limits"):
            if isinstance(entry.get(key), dict):
                deployment[key] = _stringify(entry[key])
        secrets = entry.get("secrets")
        if secrets is not None:  # a list of names; anything else is the gateway's 400
            listed = isinstance(secrets, list)
            deployment["secrets"] = [str(s) for s in secrets] if listed else secrets
        if "namespace" in entry:
            deployment["namespace"] = str(entry["namespace"])
        deployments.append(deployment)
    return deployments


def _from_flags(args: argparse.Namespace) -> dict[str, object]:
    if not args.name or not args.image:
        raise SystemExit("infless deploy: give -f stack.yml, or both --name and --image")
    labels = dict(item.split("=", 1) for item in args.label if "=" in item)
    if args.max_batch is not None:
        labels[MAX_BATCH_LABEL] = str(args.max_batch)
    annotations = {LATENCY_ANNOTATION: args.latency_target} if args.latency_target else {}
    return {"service": args.name, "image": args.image, "labels": labels, "annotations": annotations}


def run(args: argparse.Namespace) -> int:
    import yaml

    fallback = None
    base = Path.cwd()
    if args.yaml is not None:
        base = args.yaml.resolve().parent
        stack = yaml.safe_load(args.yaml.read_text(encoding="utf-8")) or {}
        fallback = (stack.get("provider") or {}).get("gateway")
        deployments = stack_to_deployments(stack)
        if args.filter:
            deployments = [d for d in deployments if d["service"] == args.filter]
    else:
        deployments = [_from_flags(args)]
    client = client_for(args, fallback)
    with progress_for(args.quiet) as progress:
        return _deploy(client, deployments, base, PackageUploader(client, progress=progress))


def _deploy(
    client: GatewayClient,
    deployments: list[dict[str, object]],
    base: Path,
    uploader: PackageUploader,
) -> int:
    status = 0
    for deployment in deployments:
        name = deployment["service"]
        package_dir = local_package(str(deployment["image"]), base)
        if package_dir is not None:
            try:
                deployment["image"] = uploader.image_for(package_dir, str(name))
            except UploadFailed as exc:
                print(f"infless: deploying {name} failed: {exc}", file=sys.stderr)
                status = 1
                continue
        reply = client.call("PUT", "/system/functions", deployment)
        if reply.status == 404:
            reply = client.call("POST", "/system/functions", deployment)
        if reply.status >= 400:
            status = fail(reply, f"deploying {name}")
            continue
        print(f"Deployed {name}: {reply.status} ({client.url}/function/{name})")
    sys.stdout.flush()
    return status
