"""Start latency via warm-instance transformation (Optimus) against infless's own fast starts.

For each (source, destination) pair of `infless.models.zoo.TRANSFORM_PAIRS` (within the
ResNet, VGG and BERT families both ways, across families both ways, two heads on one BERT),
one run, the same machine, modes interleaved within every repetition:

- `transform`: an idle worker that serves the source (started untimed) is told to transform
  into the destination by the planner's plan (`TransformModel`): publish, meta-operators;
- `fresh`: a new `python -m infless.workers.main` (imports torch, reads the package);
- `zygote`: forked from the zygote, the store warm (the destination's tensors stored);
- `template`: forked from the destination's template (two instances already run it).

Each start is timed from "start it" to `Ready` (no warm-up batches) and to the answer of
its first batch of one (`e2e`: what the first request of a cold function waits for, beside
its queueing). Meta-operator costs are profiled first (`infless.transform.profile`, into a
temporary profile database), then the gateway's own choice is replayed: the predicted cost
of the transformation against the predicted zygote start (`transform.choice.StartCosts`,
fed with the zygote starts measured so far), the path it picks, predicted vs measured.
Also the planning time of BERT-base ↔ BERT-mini and ResNet-152 ↔ VGG-19 (median of 200),
and, on the pairs small enough, how far the group-based plan's cost is above the optimal
assignment's (`transform.optimal`, Hungarian).
Ends with one JSON line.

    .venv/bin/python -m bench.transform [--repetitions 5] [--pairs resnet-34:resnet-50 ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import BENCH_MODELS
from bench.startup import Launchers
from infless.clock import RealClock
from infless.models.build import ensure_package
from infless.models.zoo import TRANSFORM_PAIRS
from infless.transform import profile
from infless.transform.choice import Candidate, StartCosts, choose
from infless.transform.costs import MetaOpCosts
from infless.transform.describe import describe_package
from infless.transform.optimal import optimal_cost_ms
from infless.transform.planner import build_cost_ms, plan_transformation
from infless.transform.records import StartPath
from infless.transform.structure import ModelStructure
from infless.weights.store import TensorStore
from infless.workers import protocol as p
from infless.workers.handle import ProcessWorkerHandle
from infless.workers.launcher import SubprocessLauncher
from infless.workers.model import LoadedModel
from infless.workers.templates import TemplateCache
from infless.workers.zygote import ZygoteLauncher

TENANT = "bench"
TIMEOUT_S = 180.0
BASELINES = ("fresh", "zygote", "template")
OPTIMAL_MAX_OPS = 120


@dataclass(frozen=True, slots=True)
class Sample:
    ready_ms: float  # asked -> Ready
    e2e_ms: float  # asked -> first batch of one answered
    worker_ms: float  # what the gateway records: transform_ms, or spawn + build + attach


def _first_batch(package_dir: Path) -> p.RunBatch:
    from infless.models.package import load_manifest

    example = LoadedModel(load_manifest(package_dir), None).example_inputs(1)
    return p.RunBatch(1, example)


async def _stop(launchers: Launchers, store: TensorStore, held: list[tuple[str, Any]]) -> None:
    for holder, handle in held:
        await handle.stop(10.0)
        launchers.templates.release(holder)
        store.release(holder)


async def baseline_once(
    mode: str, package_dir: Path, launchers: Launchers, store: TensorStore, worker_id: str
) -> Sample:
    held: list[tuple[str, ProcessWorkerHandle]] = []
    try:
        if mode == "template":  # the model's third instance: two run, the template is up
            for other in (f"{worker_id}-1", f"{worker_id}-2"):
                stored = store.publish(package_dir, TENANT, holder=other)
                launched = await launchers.launch(mode, package_dir, other, stored)
                held.append((other, ProcessWorkerHandle(launched)))
                await launchers.templates.wait_started(other)
        started = time.perf_counter()
        published = None
        if mode != "fresh":
            published = await asyncio.to_thread(
                store.publish, package_dir, TENANT, holder=worker_id
            )
        launched = await launchers.launch(mode, package_dir, worker_id, published)
        handle = ProcessWorkerHandle(launched)
        held.append((worker_id, handle))
        load = p.LoadModel(str(package_dir), cpus=1, store_tensors=published)
        ready = await handle.load(load, TIMEOUT_S)
        ready_at = time.perf_counter()
        await handle.run_batch(_first_batch(package_dir).inputs)
        done = time.perf_counter()
    finally:
        await _stop(launchers, store, held)
    worker_ms = launched.spawn_ms + ready.start.build_ms + ready.start.attach_ms
    return Sample((ready_at - started) * 1e3, (done - started) * 1e3, worker_ms)


async def transform_once(
    source_dir: Path,
    dest_dir: Path,
    dest: ModelStructure,
    steps: list[Any],
    launchers: Launchers,
    store: TensorStore,
    worker_id: str,
) -> Sample:
    held: list[tuple[str, ProcessWorkerHandle]] = []
    try:
        stored = await asyncio.to_thread(store.publish, source_dir, TENANT, holder=worker_id)
        handle = ProcessWorkerHandle(await launchers.zygote.launch(worker_id))
        held.append((worker_id, handle))
        await handle.load(p.LoadModel(str(source_dir), cpus=1, store_tensors=stored), TIMEOUT_S)
        await handle.run_batch(_first_batch(source_dir).inputs)  # it served: warm and idle
        new_id = f"{worker_id}-t"
        started = time.perf_counter()
        stored = await asyncio.to_thread(store.publish, dest_dir, TENANT, holder=new_id)
        held.append((new_id, handle))
        request = p.TransformModel(str(dest_dir), dest.to_json(), steps, stored, cpus=1)
        ready = await handle.transform(request, TIMEOUT_S)
        ready_at = time.perf_counter()
        await handle.run_batch(_first_batch(dest_dir).inputs)
        done = time.perf_counter()
    finally:
        await _stop(launchers, store, held[:1])
        for holder, _ in held[1:]:
            store.release(holder)
    return Sample((ready_at - started) * 1e3, (done - started) * 1e3, ready.start.transform_ms)


def _same(keys: dict[str, dict[str, str]], a: str, b: str, s: str, d: str) -> bool:
    """Whether source tensor `s` of `a` has destination tensor `d` of `b`'s content."""
    return s in keys[a] and keys[a][s] == keys[b].get(d)


def planning_ms(source: ModelStructure, dest: ModelStructure, costs: MetaOpCosts) -> float:
    times = []
    for _ in range(200):
        started = time.perf_counter()
        plan_transformation(source, dest, costs)
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def optimal_gaps(
    pairs: list[tuple[str, str]], structures: dict[str, ModelStructure], costs: MetaOpCosts
) -> dict[str, float]:
    """The group-based plan's predicted cost over the optimal assignment's, minus one, for
    the pairs small enough for the O((n + m)³) Hungarian method (n + m ≤ 120)."""
    gaps = {}
    for source, dest in pairs:
        a, b = structures[source], structures[dest]
        if len(a.ops) + len(b.ops) <= OPTIMAL_MAX_OPS:
            best = optimal_cost_ms(a, b, costs)
            gaps[f"{source}->{dest}"] = round(
                plan_transformation(a, b, costs).predicted_ms / best - 1.0, 4
            )
    print(f"group-based plan over the optimum (small pairs): {gaps}")
    return gaps


def _p50(samples: list[Sample], field: str) -> float:
    return round(float(np.median([getattr(s, field) for s in samples])), 1)


async def run(
    pairs: list[tuple[str, str]], repetitions: int, root: Path, costs: MetaOpCosts
) -> dict[str, Any]:
    store = TensorStore(root / "store", RealClock(), keepalive_s=0.0)
    zygote = ZygoteLauncher()
    templates = TemplateCache(zygote, store, TIMEOUT_S)
    launchers = Launchers(SubprocessLauncher(), zygote, templates)
    names = sorted({n for pair in pairs for n in pair})
    structures = {n: describe_package(BENCH_MODELS / n) for n in names}
    keys = {
        n: {t.name: t.key for t in store.index_package(BENCH_MODELS / n).tensors} for n in names
    }
    plans = {
        (a, b): plan_transformation(structures[a], structures[b], costs, partial(_same, keys, a, b))
        for a, b in pairs
    }
    dests = sorted({d for _, d in pairs})
    base: dict[str, dict[str, list[Sample]]] = {d: {m: [] for m in BASELINES} for d in dests}
    moved: dict[tuple[str, str], list[Sample]] = {pair: [] for pair in pairs}
    counter = 0
    try:
        await zygote.start()
        for repetition in range(repetitions + 1):  # round 0 warms caches: not recorded
            for dest in dests:
                for mode in BASELINES:
                    counter += 1
                    sample = await baseline_once(
                        mode, BENCH_MODELS / dest, launchers, store, f"b{counter}"
                    )
                    if repetition:
                        base[dest][mode].append(sample)
            for pair in pairs:
                counter += 1
                source, dest = pair
                sample = await transform_once(
                    BENCH_MODELS / source,
                    BENCH_MODELS / dest,
                    structures[dest],
                    list(plans[pair].steps),
                    launchers,
                    store,
                    f"t{counter}",
                )
                if repetition:
                    moved[pair].append(sample)
                line = f"  rep {repetition} {source:>12} -> {dest:<12} transform "
                print(f"{line}{sample.ready_ms:7.1f} ms (e2e {sample.e2e_ms:7.1f})", flush=True)
    finally:
        await templates.close()
        await zygote.close()
        store.close()
    return {"structures": structures, "plans": plans, "base": base, "moved": moved}


def summarise(result: dict[str, Any], costs: MetaOpCosts) -> dict[str, Any]:
    structures, plans = result["structures"], result["plans"]
    base, moved = result["base"], result["moved"]
    rows = []
    header = (
        f"{'source':>12} -> {'destination':<12} {'transform':>9} {'fresh':>8} "
        f"{'zygote':>8} {'template':>8} | e2e: {'transf.':>8} {'fresh':>8} {'zygote':>8} "
        f"| {'choice':>9} {'pred ms':>8} {'meas ms':>8}"
    )
    print("\nmilliseconds, p50 to Ready (e2e: to the first answer)\n" + header)
    learnt = StartCosts()  # transformations so far: how far plans are from measurements
    for (source, dest), samples in moved.items():
        starts = StartCosts()
        for sample in base[dest]["zygote"]:  # what the gateway would have measured so far
            starts.record(StartPath.ZYGOTE, dest, sample.worker_ms)
        plan = plans[(source, dest)]
        normal = Candidate(
            StartPath.ZYGOTE,
            starts.predict(StartPath.ZYGOTE, dest, build_cost_ms(structures[dest], costs)),
        )
        predicted = learnt.predict_transform(plan.predicted_ms)
        transform = Candidate(StartPath.TRANSFORM, predicted, "idle", source)
        for sample in samples:
            learnt.record_transform(plan.predicted_ms, sample.worker_ms)
        chosen = choose(normal, [transform] if plan.feasible else [])
        measured = (
            _p50(samples, "worker_ms")
            if chosen is transform
            else _p50(base[dest]["zygote"], "worker_ms")
        )
        row = {
            "source": source,
            "destination": dest,
            "transform_ms": _p50(samples, "ready_ms"),
            **{f"{m}_ms": _p50(base[dest][m], "ready_ms") for m in BASELINES},
            "transform_e2e_ms": _p50(samples, "e2e_ms"),
            **{f"{m}_e2e_ms": _p50(base[dest][m], "e2e_ms") for m in BASELINES},
            "steps": plan.counts(),
            "plan_ms": round(plan.predicted_ms, 2),
            "predicted_transform_ms": round(predicted, 2),
            "measured_transform_ms": _p50(samples, "worker_ms"),
            "predicted_zygote_ms": round(normal.predicted_ms, 2),
            "chosen": chosen.path.value,
            "chosen_predicted_ms": round(chosen.predicted_ms, 2),
            "chosen_measured_ms": measured,
        }
        row["e2e_vs_fresh"] = round(1 - row["transform_e2e_ms"] / row["fresh_e2e_ms"], 3)
        row["e2e_vs_zygote"] = round(1 - row["transform_e2e_ms"] / row["zygote_e2e_ms"], 3)
        rows.append(row)
        print(
            f"{source:>12} -> {dest:<12} {row['transform_ms']:9.1f} {row['fresh_ms']:8.1f} "
            f"{row['zygote_ms']:8.1f} {row['template_ms']:8.1f} |      "
            f"{row['transform_e2e_ms']:8.1f} {row['fresh_e2e_ms']:8.1f} "
            f"{row['zygote_e2e_ms']:8.1f} | {row['chosen']:>9} {row['chosen_predicted_ms']:8.1f} "
            f"{row['chosen_measured_ms']:8.1f}"
        )
    return {"pairs": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--pairs", nargs="*", default=[], help="SOURCE:DEST (default: all)")
    args = parser.parse_args(argv)
    pairs = [tuple(s.split(":", 1)) for s in args.pairs] or list(TRANSFORM_PAIRS)
    pairs = [(a, b) for a, b in pairs]
    for name in sorted({n for pair in pairs for n in pair}):
        ensure_package(name, BENCH_MODELS)
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    root = Path(tempfile.mkdtemp(prefix="infless-bench-transform-", dir=shm))
    load_start = os.getloadavg()[0]
    try:
        costs = profile.run(root / "state", repetitions=7)  # this machine's meta-op costs
        print(f"meta-operator costs: {costs.source}")
        result = asyncio.run(run(pairs, max(1, args.repetitions), root, costs))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures: dict[str, Any] = {"bench": "transform", **summarise(result, costs)}
    s = result["structures"]
    figures["planning_ms"] = {
        f"{a}->{b}": round(planning_ms(s[a], s[b], costs), 3)
        for a, b in (
            ("bert-base", "bert-mini"),
            ("bert-mini", "bert-base"),
            ("resnet-152", "vgg-19"),
            ("vgg-19", "resnet-152"),
        )
        if a in s and b in s
    }
    figures["optimal_gap"] = optimal_gaps(list(result["plans"]), s, costs)
    rows = figures["pairs"]
    figures["transform_beats_zygote"] = sum(r["transform_ms"] < r["zygote_ms"] for r in rows)
    figures["transform_beats_template"] = sum(r["transform_ms"] < r["template_ms"] for r in rows)
    figures["chosen_transform"] = sum(r["chosen"] == "transform" for r in rows)
    figures["pair_count"] = len(rows)
    figures["repetitions"] = args.repetitions
    figures["load_avg_1m"] = {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)}
    print(f"planning: {figures['planning_ms']}")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
