"""Instance start time to `Ready`: fresh process vs zygote fork, with an empty or a warm store.

Same run, same machine, modes interleaved within every repetition so load drifts hit all
modes alike. For resnet-50 and bert-v1, the clock starts when the instance is asked for and
stops when its `Ready` message arrives (no warm-up batches: `warmup_batch_sizes=[]`):

- `fresh`: `SubprocessLauncher` starts `python -m infless.workers.main`, which imports torch
  and loads the weights from the package's safetensors file (no store);
- `zygote_empty_store`: the store holds none of the model's tensors (reclaimed first); the
  instance publishes them (first-time sharing copies package → tmpfs), is forked from the
  pre-started zygote, builds on `meta` and maps the stored files;
- `zygote_warm_store`: the tensors are already stored; publish only finds them, then the
  same fork + build + attach (`[workers] templates = false`, or no template possible);
- `template`: warm store, an instance of a model that has two running, with templates on
  (the gateway's default): the second one started the model's template (which built,
  attached and ran it once); the timed third is forked from it, nothing to build or attach;
- `zygote_sandboxed` (as root only): `zygote_warm_store`, and the worker enters a tenant's
  sandbox before it builds (`workers.sandbox`: namespaces, the mount view, the uid drop):
  the cost of isolation on a start is its p50 minus `zygote_warm_store`'s.

The zygote is started before timing (once per server, like the gateway does); one untimed
round per model warms the page cache and the zygotes. The store root is a temporary
directory under /dev/shm, removed at the end. Prints p50/p90 and the mean breakdown
(publish, spawn, build, attach, rest = interpreter start + torch import for `fresh`, socket
round trips) and ends with one JSON line: `p50_ms` per model and mode, `p90_ms`,
`speedup_warm_vs_fresh` and `sandbox_overhead_ms` (p50, as root).

    .venv/bin/python -m bench.startup [--models resnet-50 bert-v1] [--repetitions 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import BENCH_MODELS
from infless.clock import RealClock
from infless.models.build import ensure_package
from infless.weights.store import TensorStore
from infless.weights.stored import StoredTensor
from infless.workers import protocol as p
from infless.workers.handle import ProcessWorkerHandle
from infless.workers.launcher import LaunchedWorker, SubprocessLauncher
from infless.workers.sandbox import DEFAULT_SCRATCH
from infless.workers.templates import TemplateCache
from infless.workers.zygote import ZygoteLauncher

DEFAULT_MODELS = ("resnet-50", "bert-v1")
MODES = ("fresh", "zygote_empty_store", "zygote_warm_store", "template")
TENANT = "bench"
BENCH_UID = 299999  # the tenant's uid and gid in `zygote_sandboxed`
LOAD_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class StartSample:
    total_ms: float  # "start instance" asked → Ready received
    publish_ms: float  # store.publish (0 for fresh)
    spawn_ms: float  # launcher: exec (fresh) or fork round trip (zygote)
    build_ms: float  # worker: manifest + meta build
    attach_ms: float  # worker: weights mapped (store) or read (package) + load_state_dict
    copied_bytes: int  # written into the store by this start

    @property
    def rest_ms(self) -> float:
        """Interpreter start + imports (fresh only) + socket round trips."""
        return self.total_ms - self.publish_ms - self.spawn_ms - self.build_ms - self.attach_ms


@dataclass(frozen=True, slots=True)
class Launchers:
    fresh: SubprocessLauncher
    zygote: ZygoteLauncher
    templates: TemplateCache

    async def launch(
        self, mode: str, package_dir: Path, instance_id: str, stored: list[StoredTensor] | None
    ) -> LaunchedWorker:
        if mode == "fresh":
            return await self.fresh.launch(instance_id)
        if mode == "template" and stored is not None:
            launched = await self.templates.launch(instance_id, TENANT, str(package_dir), stored)
            if launched is not None:
                return launched
        return await self.zygote.launch(instance_id)


async def start_once(
    mode: str,
    package_dir: Path,
    launchers: Launchers,
    store: TensorStore,
    instance_id: str,
) -> StartSample:
    """Start one instance in `mode`, time it to Ready, then stop it and release its holds.

    `template` first starts (untimed) two other instances of the model and waits for the
    template the second one starts: the timed instance is the model's third.
    """
    if mode == "zygote_empty_store":
        store.reclaim([], RealClock().now())  # keep-alive 0: every unheld tensor goes
        assert store.shared_bytes_for(package_dir, TENANT) == 0, "the store is not empty"
    handles: list[tuple[str, ProcessWorkerHandle]] = []
    stored: list[StoredTensor] | None = None
    try:
        for other_id in [f"{instance_id}-{n}" for n in (1, 2)] if mode == "template" else []:
            stored = store.publish(package_dir, TENANT, holder=other_id)
            other = await launchers.launch(mode, package_dir, other_id, stored)
            handles.append((other_id, ProcessWorkerHandle(other)))
            await launchers.templates.wait_started(other_id)
        started = time.perf_counter()
        copied_bytes = 0
        if mode != "fresh":
            outcome = await asyncio.to_thread(
                store.publish_with_stats, package_dir, TENANT, holder=instance_id
            )
            stored, copied_bytes = outcome.tensors, outcome.copied_bytes
        published = time.perf_counter()
        launched = await launchers.launch(mode, package_dir, instance_id, stored)
        handle = ProcessWorkerHandle(launched)
        handles.append((instance_id, handle))
        request = p.LoadModel(
            package_dir=str(package_dir),
            cpus=1,
            warmup_batch_sizes=[],
            store_tensors=stored,
            sandbox=sandbox_for(package_dir, store) if mode == "zygote_sandboxed" else None,
        )
        ready = await handle.load(request, LOAD_TIMEOUT_S)
        done = time.perf_counter()
    finally:
        for held_by, running in handles:
            await running.stop(10.0)
            if mode.startswith("zygote"):
                await launchers.zygote.wait_exit(running.pid)
            launchers.templates.release(held_by)
            store.release(held_by)
    return StartSample(
        total_ms=(done - started) * 1000.0,
        publish_ms=(published - started) * 1000.0,
        spawn_ms=launched.spawn_ms,
        build_ms=ready.start.build_ms,
        attach_ms=ready.start.attach_ms,
        copied_bytes=copied_bytes,
    )


def sandbox_for(package_dir: Path, store: TensorStore) -> p.Sandbox:
    """What a gateway would give the bench tenant's worker: the model repository and the
    store hidden, the package and the tenant's store directory bound back."""
    hidden = [str(BENCH_MODELS), str(store.root)]  # absolute: REPO_ROOT is
    keep = [str(package_dir), str(store.root / TENANT)]
    return p.Sandbox(BENCH_UID, BENCH_UID, hide=hidden, keep=keep, scratch=list(DEFAULT_SCRATCH))


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


async def run(
    models: list[str], repetitions: int, store_root: Path, modes: tuple[str, ...]
) -> dict[str, Any]:
    gids = {TENANT: BENCH_UID} if "zygote_sandboxed" in modes else None  # its files readable
    store = TensorStore(store_root, RealClock(), keepalive_s=0.0, tenant_gid=gids)
    zygote = ZygoteLauncher()
    templates = TemplateCache(zygote, store, LOAD_TIMEOUT_S)
    launchers = Launchers(SubprocessLauncher(), zygote, templates)
    samples: dict[str, dict[str, list[StartSample]]] = {}
    counter = 0
    try:
        zygote_started = time.perf_counter()
        await zygote.start()
        zygote_start_ms = (time.perf_counter() - zygote_started) * 1000.0
        print(f"zygote started in {zygote_start_ms:.0f} ms (once per server, not timed below)")
        for model in models:
            package_dir = BENCH_MODELS / model
            samples[model] = {mode: [] for mode in modes}
            for repetition in range(repetitions + 1):  # round 0 warms caches, not recorded
                for mode in modes:
                    counter += 1
                    sample = await start_once(
                        mode, package_dir, launchers, store, f"bench-{counter}"
                    )
                    if repetition > 0:
                        samples[model][mode].append(sample)
                    print(
                        f"  {model:10} {mode:22} rep {repetition}: {sample.total_ms:8.1f} ms"
                        f"{'' if repetition else ' (warm-up, discarded)'}",
                        flush=True,
                    )
    finally:
        await templates.close()
        await zygote.close()
        store.close()
    return {"samples": samples, "zygote_start_ms": zygote_start_ms}


def summarise(samples: dict[str, dict[str, list[StartSample]]]) -> dict[str, Any]:
    """Print the table; p50/p90 per model and mode, mean breakdown, speed-ups."""
    print(
        f"\n{'model':10} {'mode':22} {'p50 ms':>8} {'p90 ms':>8} | mean: {'publish':>8} "
        f"{'spawn':>7} {'build':>7} {'attach':>7} {'rest':>7} {'copied MiB':>10}"
    )
    p50: dict[str, dict[str, float]] = {}
    p90: dict[str, dict[str, float]] = {}
    breakdown: dict[str, dict[str, dict[str, float]]] = {}
    speedup: dict[str, float] = {}
    overhead: dict[str, float] = {}
    for model, by_mode in samples.items():
        p50[model], p90[model], breakdown[model] = {}, {}, {}
        for mode, runs in by_mode.items():
            totals = [s.total_ms for s in runs]
            p50[model][mode] = round(percentile(totals, 50), 1)
            p90[model][mode] = round(percentile(totals, 90), 1)
            mean = {
                "publish_ms": float(np.mean([s.publish_ms for s in runs])),
                "spawn_ms": float(np.mean([s.spawn_ms for s in runs])),
                "build_ms": float(np.mean([s.build_ms for s in runs])),
                "attach_ms": float(np.mean([s.attach_ms for s in runs])),
                "rest_ms": float(np.mean([s.rest_ms for s in runs])),
            }
            copied_mib = float(np.mean([s.copied_bytes for s in runs])) / (1024 * 1024)
            breakdown[model][mode] = {k: round(v, 1) for k, v in mean.items()}
            print(
                f"{model:10} {mode:22} {p50[model][mode]:8.1f} {p90[model][mode]:8.1f} | "
                f"      {mean['publish_ms']:8.1f} {mean['spawn_ms']:7.1f} "
                f"{mean['build_ms']:7.1f} {mean['attach_ms']:7.1f} {mean['rest_ms']:7.1f} "
                f"{copied_mib:10.1f}"
            )
        fresh = p50[model]["fresh"]
        speedup[model] = round(fresh / p50[model]["zygote_warm_store"], 1)
        print(f"{model}: warm-store start is {speedup[model]:.1f}× faster than a fresh process")
        if "zygote_sandboxed" in p50[model]:
            overhead[model] = round(
                p50[model]["zygote_sandboxed"] - p50[model]["zygote_warm_store"], 1
            )
            print(f"{model}: entering the sandbox adds {overhead[model]:.1f} ms (p50)")
    return {
        "sandbox_overhead_ms": overhead,
        "p50_ms": p50,
        "p90_ms": p90,
        "speedup_warm_vs_fresh": speedup,
        "mean_breakdown_ms": breakdown,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args(argv)
    modes: tuple[str, ...] = MODES + (("zygote_sandboxed",) if os.geteuid() == 0 else ())
    repetitions = max(1, args.repetitions)
    for model in args.models:
        ensure_package(model, BENCH_MODELS)
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    directory = Path(tempfile.mkdtemp(prefix="infless-bench-startup-", dir=shm))
    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    try:
        result = asyncio.run(run(args.models, repetitions, directory / "store", modes))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    load_end = os.getloadavg()
    figures: dict[str, Any] = {"bench": "startup", **summarise(result["samples"])}
    figures["repetitions"] = repetitions
    figures["zygote_start_ms"] = round(result["zygote_start_ms"], 1)
    figures["load_avg_1m"] = {"start": round(load_start[0], 2), "end": round(load_end[0], 2)}
    print(f"load average at end: {load_end[0]:.2f}")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
