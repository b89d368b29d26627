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
import signal
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.harness import BENCH_MODELS, Gateway, gateway
from infless.models.build import ensure_package

MIB = 1024 * 1024
KIB = 1024
DEFAULT_MODELS = ("resnet-50", "bert-v1")
DEFAULT_COUNTS = (1, 2, 4, 8, 16)
TL_VARIANTS = ("resnet-50-tl-a", "resnet-50-tl-b", "resnet-50-tl-c", "resnet-50-tl-d")
MEMORY_RESERVE_BYTES = 2 * 1024 * MIB  # never scale up past MemAvailable minus this


# -- /proc accounting -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    pid: int
    pss_bytes: int
    pss_anon_bytes: int
    pss_file_bytes: int
    pss_shmem_bytes: int
    store_mapped_pss_bytes: int  # Pss of this process's mappings of files under the store root


def _kib_fields(text: str) -> dict[str, int]:
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            fields[name] = int(parts[0])
    return fields


def store_mapped_pss_bytes(pid: int, store_root: Path | None) -> int:
    """Sum of Pss over the process's mappings whose file lies under `store_root`."""
    if store_root is None:
        return 0
    prefix = str(store_root) + "/"
    total_kib = 0
    in_store = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if head and "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            in_store = len(head) == 6 and head[5].startswith(prefix)
        elif in_store and line.startswith("Pss:"):
            total_kib += int(line.split()[1])
    return total_kib * KIB


def read_process_memory(pid: int, store_root: Path | None) -> ProcessMemory:
    fields = _kib_fields(Path(f"/proc/{pid}/smaps_rollup").read_text())
    return ProcessMemory(
        pid=pid,
        pss_bytes=fields["Pss"] * KIB,
        pss_anon_bytes=fields.get("Pss_Anon", 0) * KIB,
        pss_file_bytes=fields.get("Pss_File", 0) * KIB,
        pss_shmem_bytes=fields.get("Pss_Shmem", 0) * KIB,
        store_mapped_pss_bytes=store_mapped_pss_bytes(pid, store_root),
    )


def tmpfs_resident_bytes(root: Path) -> int:
    """Bytes allocated to the regular files under `root` (tmpfs: resident in memory)."""
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                info = (Path(directory) / name).lstat()
                total += info.st_blocks * 512
    return total


def mem_available_bytes() -> int:
    return _kib_fields(Path("/proc/meminfo").read_text())["MemAvailable"] * KIB


# -- one gateway, one mode -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Deployment:
    name: str
    image: str
    tenant: str = "default"


@dataclass(frozen=True, slots=True)
class Sample:
    mode: str
    instances: int  # per function
    workers: tuple[ProcessMemory, ...]
    zygote_pss_bytes: int
    store_bytes: int
    templates: tuple[ProcessMemory, ...] = ()

    @property
    def workers_pss_bytes(self) -> int:
        return sum(w.pss_bytes for w in self.workers)

    @property
    def templates_pss_bytes(self) -> int:
        return sum(t.pss_bytes for t in self.templates)

    @property
    def total_bytes(self) -> int:
        """The acceptance metric: workers' and templates' Pss + the store's tmpfs bytes."""
        return self.workers_pss_bytes + self.templates_pss_bytes + self.store_bytes

    @property
    def dedup_bytes(self) -> int:
        """Physical memory: store pages counted once (not also in the processes' Pss)."""
        mapped = sum(w.store_mapped_pss_bytes for w in (*self.workers, *self.templates))
        return self.total_bytes - mapped


@dataclass
class ModeRun:
    mode: str
    samples: dict[int, Sample] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)
    pids_seen: set[int] = field(default_factory=set)


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


def reap_survivors(pids: set[int]) -> None:
    """Workers end on EOF of their socket and the zygote with the gateway; check, by pid."""
    deadline = time.monotonic() + 10.0
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {pid for pid in alive if psutil.pid_exists(pid) and not _is_zombie(pid)}
        if alive:
            time.sleep(0.2)
    for pid in alive:
        print(f"  warning: pid {pid} outlived its gateway; sending SIGKILL", flush=True)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _is_zombie(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


# -- report ----------------------------------------------------------------------------------


def reduction_pct(baseline_bytes: int, shared_bytes: int) -> float:
    return round(100.0 * (1.0 - shared_bytes / baseline_bytes), 1) if baseline_bytes else 0.0


def mib(value_bytes: float) -> float:
    return round(value_bytes / MIB, 1)


def print_model_table(model: str, private: ModeRun, store: ModeRun) -> None:
    print(f"\n{model}: sum of worker Pss + store tmpfs bytes (MiB); zygote Pss not counted")
    print(
        f"{'N':>3} {'private':>9} {'store':>9} {'reduct%':>8} {'store dedup':>12} "
        f"{'reduct% dedup':>14} {'priv/worker':>12} {'store/worker':>13} {'store files':>12} "
        f"{'templates':>9} {'zygote':>7}"
    )
    for count, base in private.samples.items():
        shared = store.samples.get(count)
        if shared is None:
            continue
        print(
            f"{count:3d} {base.total_bytes / MIB:9.0f} {shared.total_bytes / MIB:9.0f} "
            f"{reduction_pct(base.total_bytes, shared.total_bytes):8.1f} "
            f"{shared.dedup_bytes / MIB:12.0f} "
            f"{reduction_pct(base.total_bytes, shared.dedup_bytes):14.1f} "
            f"{base.workers_pss_bytes / len(base.workers) / MIB:12.1f} "
            f"{shared.workers_pss_bytes / len(shared.workers) / MIB:13.1f} "
            f"{shared.store_bytes / MIB:12.1f} {shared.templates_pss_bytes / MIB:9.1f} "
            f"{shared.zygote_pss_bytes / MIB:7.0f}"
        )
    for run in (private, store):
        for count, reason in run.skipped.items():
            print(f"  {run.mode}: N={count} and above skipped: {reason}")
    largest = max((c for c in private.samples if c in store.samples), default=None)
    if largest is not None:
        worker = store.samples[largest].workers[0]
        base_worker = private.samples[largest].workers[0]
        print(
            f"  one worker at N={largest} (MiB): private anon "
            f"{base_worker.pss_anon_bytes / MIB:.1f} file "
            f"{base_worker.pss_file_bytes / MIB:.1f}; store anon "
            f"{worker.pss_anon_bytes / MIB:.1f} file {worker.pss_file_bytes / MIB:.1f} "
            f"shmem {worker.pss_shmem_bytes / MIB:.1f} (store maps "
            f"{worker.store_mapped_pss_bytes / MIB:.1f})"
        )


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


def model_figures(
    runs: dict[str, dict[str, ModeRun]], figures: dict[str, Any], absolute: dict[str, Any]
) -> dict[str, dict[str, float]]:
    """Print each model's table; fill `figures` (reduction_pct) and `absolute` (MiB)."""
    reductions_dedup: dict[str, dict[str, float]] = {}
    store_only: dict[str, dict[str, float]] = figures.setdefault("store_only_reduction_pct", {})
    for model, modes in runs.items():
        replicas, private, store = modes["replicas"], modes["private"], modes["store"]
        print("\nbaseline: conventional replicas (a fresh process each, its own weights)")
        print_model_table(model, replicas, store)
        print("\nbaseline: zygote-forked workers with private weights (the store's effect alone)")
        print_model_table(model, private, store)
        common = [c for c in replicas.samples if c in store.samples]
        figures[model] = {
            str(c): reduction_pct(replicas.samples[c].total_bytes, store.samples[c].total_bytes)
            for c in common
        }
        store_only[model] = {
            str(c): reduction_pct(private.samples[c].total_bytes, store.samples[c].total_bytes)
            for c in private.samples
            if c in store.samples
        }
        reductions_dedup[model] = {
            str(c): reduction_pct(replicas.samples[c].total_bytes, store.samples[c].dedup_bytes)
            for c in common
        }
        first = next(iter(store.samples.values()), None)
        absolute[model] = {
            "replicas": {str(c): mib(s.total_bytes) for c, s in replicas.samples.items()},
            "private": {str(c): mib(s.total_bytes) for c, s in private.samples.items()},
            "store": {str(c): mib(s.total_bytes) for c, s in store.samples.items()},
            "store_dedup": {str(c): mib(s.dedup_bytes) for c, s in store.samples.items()},
            "store_files": {str(c): mib(s.store_bytes) for c, s in store.samples.items()},
            "zygote_pss": None if first is None else mib(first.zygote_pss_bytes),
        }
        skipped = {
            f"{r.mode}:{c}": why for r in (replicas, private, store) for c, why in r.skipped.items()
        }
        if skipped:
            absolute[model]["skipped"] = skipped
    return reductions_dedup


def transfer_figures(
    transfer: dict[str, Sample], figures: dict[str, Any], absolute: dict[str, Any]
) -> None:
    base = transfer["private"].total_bytes
    print("\nresnet-50-tl-a..d, one instance each (MiB)")
    print(f"{'mode':28} {'total':>8} {'dedup':>8} {'store files':>12} {'reduct% vs private':>19}")
    for label, sample in transfer.items():
        print(
            f"{label:28} {sample.total_bytes / MIB:8.0f} {sample.dedup_bytes / MIB:8.0f} "
            f"{sample.store_bytes / MIB:12.1f} {reduction_pct(base, sample.total_bytes):19.1f}"
        )
    shared = transfer["store_shared_tenant"]
    separate = transfer["store_per_function_tenant"]
    figures["cross_function_reduction_pct"] = reduction_pct(base, shared.total_bytes)
    figures["cross_function_reduction_pct_dedup"] = reduction_pct(base, shared.dedup_bytes)
    figures["cross_function_reduction_vs_per_function_store_pct"] = reduction_pct(
        separate.total_bytes, shared.total_bytes
    )
    absolute["transfer_learning"] = {
        label: {"total": mib(s.total_bytes), "dedup": mib(s.dedup_bytes)}
        for label, s in transfer.items()
    }


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
