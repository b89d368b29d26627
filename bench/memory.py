"""Memory of N instances with the shared tensor store versus private weights, through a gateway.

Same run, same machine: for each model and N in {1, 2, 4, 8, 16}, a real `infless serve`
gateway deploys the function over HTTP, scales it to N, waits until every instance is ready
(warm-up batch 1 ran, so the weights were read), and the bench reads each worker's
`/proc/PID/smaps_rollup` Pss. Three gateways per model:

- `replicas` (the headline baseline): conventional replicas, as Triton, TorchServe or Ray
  Serve run them: every worker a fresh process (`launcher = "subprocess"`) with its own copy
  of the weights (`[store] enabled = false, private_weights = true`: cloned into anonymous
  memory; without the clone, workers would share the safetensors file's page cache);
- `private`: the same private weights, but workers forked from the zygote (`--launcher`),
  so they share the torch import pages: `store` against it is the store's effect alone;
- `store`: `[store] enabled = true` on a tmpfs root of its own: weights are published once
  and mapped by every worker; the workers are forked from the model's template
  (`[workers] templates = true`, the default; `--no-templates` forks them from the zygote).

Memory (the acceptance metric) = sum of the workers' Pss + the templates' Pss (a template
exists only for its instances, so it counts as theirs) + bytes of the files under the
store root (tmpfs pages). That counts store pages mapped by workers twice (once in their
Pss, once as store files); the `dedup` figure subtracts the Pss of the workers' store
mappings, i.e. the physical memory the workers and the store occupy. The zygote's own Pss
(one per server, the same in both modes) is shown but not counted.

Cross-function sharing: the four resnet-50 transfer-learning variants (identical backbone,
different `fc` head), one instance each: private weights, the store with one tenant per
function (dedicated stores: nothing shared across functions), and the store with one tenant
for all four (the backbone stored once).

Prints tables and ends with one JSON line: `reduction_pct` per model and N under the model
name (store vs conventional replicas), `store_only_reduction_pct` (store vs zygote workers
with private weights), `cross_function_reduction_pct` (shared-tenant store vs private
weights), and the absolute MiB under `mib`.

    .venv/bin/python -m bench.memory [--models resnet-50 bert-v1] [--counts 1 2 4 8 16]
        [--no-templates]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.harness import BENCH_MODELS, Gateway, gateway
from bench.memory_report import model_figures, transfer_figures
from bench.memory_samples import (
    MIB,
    ModeRun,
    Sample,
    mem_available_bytes,
    read_process_memory,
    reap_survivors,
    tmpfs_resident_bytes,
)
from infless.models.build import ensure_package

DEFAULT_MODELS = ("resnet-50", "bert-v1")
DEFAULT_COUNTS = (1, 2, 4, 8, 16)
TL_VARIANTS = ("resnet-50-tl-a", "resnet-50-tl-b", "resnet-50-tl-c", "resnet-50-tl-d")
MEMORY_RESERVE_BYTES = 2 * 1024 * MIB  # never scale up past MemAvailable minus this


# -- one gateway, one mode -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Deployment:
    name: str
    image: str
    tenant: str = "default"


def gateway_toml(mode: str, launcher: str, store_root: Path, templates: bool = True) -> str:
    if mode == "replicas":  # conventional replicas: a fresh process, its own copy of the weights
        launcher = "subprocess"
    workers = (
        f'[workers]\nlauncher = "{launcher}"\nstart_timeout_s = 600.0\n'
        f"templates = {str(templates).lower()}\n"
    )
    if mode in ("private", "replicas"):
        return workers + "[store]\nenabled = false\nprivate_weights = true\n"
    return (
        workers + f'[store]\nenabled = true\nroot = "{store_root}"\nclear_on_shutdown = true\n'
        "keepalive_s = 600.0\n"
    )


def call(gw: Gateway, method: str, path: str, body: object) -> Any:
    request = urllib.request.Request(
        gw.url + path,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        data = response.read()
    return json.loads(data) if data else None


def deployment_body(deployment: Deployment, max_instances: int) -> dict[str, object]:
    return {
        "service": deployment.name,
        "image": deployment.image,
        "labels": {
            "com.openfaas.scale.max": str(max(1, max_instances)),
            "com.infless.max.batch": "1",  # warm-up: one batch size (and it reads every weight)
            "com.infless.tenant": deployment.tenant,
        },
        "annotations": {"com.infless.latency_target": "10s"},
    }


def zygote_pid(gw: Gateway) -> int | None:
    for child in psutil.Process(gw.process.pid).children():
        with contextlib.suppress(psutil.Error):
            if "infless.workers.zygote" in " ".join(child.cmdline()):
                return child.pid
    return None


def template_pids(gw: Gateway) -> list[int]:
    return [int(t["pid"]) for t in gw.get("/system/templates") if t["alive"]]


def ready_pids(gw: Gateway, names: Sequence[str]) -> list[int]:
    return [
        int(i["pid"])
        for i in gw.get("/system/instances")
        if i["function"] in names and i["state"] == "ready"
    ]


def measure_mode(
    mode: str,
    deployments: Sequence[Deployment],
    counts: Sequence[int],
    *,
    launcher: str,
    store_root: Path,
    settle_s: float,
    templates: bool = True,
) -> ModeRun:
    """One gateway in `mode`; every deployment scaled through `counts`, measured at each."""
    run = ModeRun(mode)
    names = [d.name for d in deployments]
    with (
        tempfile.TemporaryDirectory(prefix="infless-bench-memory-") as workdir,
        gateway(Path(workdir), "", gateway_toml(mode, launcher, store_root, templates)) as gw,
    ):
        for deployment in deployments:
            call(gw, "POST", "/system/functions", deployment_body(deployment, max(counts)))
        for count in counts:
            previous = run.samples.get(max(run.samples, default=0))
            if previous is not None:
                per_instance = previous.total_bytes / max(1, len(previous.workers))
                needed = per_instance * (count - previous.instances) * len(deployments)
                if mem_available_bytes() - needed < MEMORY_RESERVE_BYTES:
                    run.skipped[count] = (
                        f"needs ~{needed / MIB:.0f} MiB more, "
                        f"MemAvailable {mem_available_bytes() / MIB:.0f} MiB"
                    )
                    break
            for name in names:
                call(gw, "POST", f"/system/scale-function/{name}", {"replicas": count})
            for name in names:
                gw.wait_ready(name, count, timeout_s=900.0)
            time.sleep(settle_s)  # let freed warm-up buffers go back and exits be reaped
            pids = ready_pids(gw, names)
            forked_from = template_pids(gw)
            run.pids_seen.update(pids, forked_from)
            zygote = zygote_pid(gw)
            if zygote is not None:
                run.pids_seen.add(zygote)
            root = store_root if mode != "private" else None
            workers = tuple(read_process_memory(pid, root) for pid in pids)
            template_memory = tuple(read_process_memory(pid, root) for pid in forked_from)
            zygote_pss = 0 if zygote is None else read_process_memory(zygote, None).pss_bytes
            store_bytes = tmpfs_resident_bytes(store_root) if store_root.exists() else 0
            sample = Sample(mode, count, workers, zygote_pss, store_bytes, template_memory)
            run.samples[count] = sample
            print(
                f"  [{mode:>14}] {'+'.join(names)} N={count:<2d} "
                f"workers={len(workers):<2d} total={sample.total_bytes / MIB:8.0f} MiB "
                f"dedup={sample.dedup_bytes / MIB:8.0f} MiB "
                f"templates={len(template_memory)} ({sample.templates_pss_bytes / MIB:.0f} MiB)",
                flush=True,
            )
    reap_survivors(run.pids_seen)
    shutil.rmtree(store_root, ignore_errors=True)
    return run


def run_models(
    models: Sequence[str],
    counts: Sequence[int],
    launcher: str,
    stores: Path,
    settle_s: float,
    templates: bool,
) -> dict[str, dict[str, ModeRun]]:
    """Per model: the private-weights gateway, then the store gateway, scaled through counts."""
    runs: dict[str, dict[str, ModeRun]] = {}
    for model in models:
        deployment = [Deployment(f"bench-{model}", model)]
        runs[model] = {
            mode: measure_mode(
                mode,
                deployment,
                counts,
                launcher=launcher,
                store_root=stores / f"{model}-{mode}",
                settle_s=settle_s,
                templates=templates,
            )
            for mode in ("replicas", "private", "store")
        }
    return runs


def run_transfer(
    launcher: str, stores: Path, settle_s: float, templates: bool
) -> dict[str, Sample]:
    """tl-a..d, one instance each: private, one tenant per function, one shared tenant."""
    variants = {
        "private": [Deployment(f"bench-{v}", v) for v in TL_VARIANTS],
        "store_per_function_tenant": [Deployment(f"bench-{v}", v, tenant=v) for v in TL_VARIANTS],
        "store_shared_tenant": [Deployment(f"bench-{v}", v) for v in TL_VARIANTS],
    }
    transfer: dict[str, Sample] = {}
    for label, deployments in variants.items():
        run = measure_mode(
            label,
            deployments,
            [1],
            launcher=launcher,
            store_root=stores / f"tl-{label}",
            settle_s=settle_s,
            templates=templates,
        )
        transfer[label] = run.samples[1]
    return transfer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--counts", nargs="+", type=int, default=list(DEFAULT_COUNTS))
    parser.add_argument("--launcher", choices=("zygote", "subprocess"), default="zygote")
    parser.add_argument("--settle-s", type=float, default=1.0)
    parser.add_argument("--no-transfer", action="store_true", help="skip the tl-a..d part")
    parser.add_argument(
        "--no-templates", action="store_true", help="fork store workers from the zygote"
    )
    args = parser.parse_args(argv)
    counts = sorted(set(args.counts))
    for image in [*args.models, *([] if args.no_transfer else TL_VARIANTS)]:
        ensure_package(image, BENCH_MODELS)
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    stores = Path(tempfile.mkdtemp(prefix="infless-bench-memory-", dir=shm))
    load_start = os.getloadavg()
    started = time.perf_counter()
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    try:
        templates = not args.no_templates
        runs = run_models(args.models, counts, args.launcher, stores, args.settle_s, templates)
        transfer = {}
        if not args.no_transfer:
            transfer = run_transfer(args.launcher, stores, args.settle_s, templates)
    finally:
        shutil.rmtree(stores, ignore_errors=True)
    elapsed_s = time.perf_counter() - started
    load_end = os.getloadavg()
    figures: dict[str, Any] = {"bench": "memory"}
    absolute: dict[str, Any] = {}
    reductions_dedup = model_figures(runs, figures, absolute)
    if transfer:
        transfer_figures(transfer, figures, absolute)
    figures["reduction_pct_dedup"] = reductions_dedup
    figures["mib"] = absolute
    figures["metric"] = (
        "sum of worker Pss + store tmpfs bytes; reduction_pct: vs conventional replicas (fresh "
        "process, own weights); store_only_reduction_pct: vs zygote workers with own weights"
    )
    figures["launcher"] = args.launcher
    figures["templates"] = not args.no_templates
    figures["load_avg_1m"] = {"start": round(load_start[0], 2), "end": round(load_end[0], 2)}
    figures["elapsed_s"] = round(elapsed_s, 1)
    print(f"\nload average at end: {load_end[0]:.2f}; elapsed {elapsed_s:.0f} s")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
