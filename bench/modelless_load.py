"""The load and the measurements of `bench.modelless`: one arm's open-loop Poisson load
through the gateway, the cores its instances held, and its figures (`Run`), and the verdict
of model-less against the best fixed variant (`verdict`).

Everything targets the gateway on 127.0.0.1, bounded in requests and seconds. Must not
start or configure a gateway (that is `bench.modelless`).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.harness import Gateway
from loadgen.quietgc import young_collections_only

# one answer: latency ms, HTTP status, the variant that served it, the phase it was sent in,
# and when it was sent (seconds since the arm's first request was due)
Answer = tuple[float, int, str, int, float]


@dataclass
class Run:
    """One arm's figures: violations are answers later than the SLO plus refusals and
    errors; accuracy is the mean over answers of the serving variant's measured accuracy."""

    name: str
    requests: int = 0
    ok: int = 0
    violations: int = 0
    refused: int = 0
    errors: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    accuracy: float = 0.0
    core_s: float = 0.0
    switches: int = 0
    spilled: int = 0  # queries sent to another variant: the selected one had no room
    by_variant: dict[str, int] = field(default_factory=dict)
    phases: list[dict[str, float]] = field(default_factory=list)
    late_by_second: dict[int, int] = field(default_factory=dict)  # violations by second sent
    # violations by the variant that refused or served late ("" when none was named) and
    # by kind: "429", "late" (answered after the SLO), "error"
    lost_by_variant: dict[str, dict[str, int]] = field(default_factory=dict)


class CorePoller:
    """Integrates the cores held by the instances of some functions, every 0.5 s."""

    def __init__(self, gw: Gateway, functions: set[str]) -> None:
        self._gw = gw
        self._functions = functions
        self.core_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CorePoller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.5):
            cores = sum(
                i["cpus"]
                for i in self._gw.get("/system/instances")
                if i["function"] in self._functions and i["state"] != "dead"
            )
            now = time.monotonic()
            self.core_s += cores * (now - last)
            last = now


async def open_loop(
    url: str, bodies: list[bytes], phases: list[tuple[float, float]], max_requests: int, seed: int
) -> list[Answer]:
    """Poisson arrivals at each phase's rate (rps) for its duration (s); one `Answer` each."""
    rng = random.Random(seed)
    answers: list[Answer] = []
    connector = aiohttp.TCPConnector(limit=2000)
    timeout = aiohttp.ClientTimeout(total=30)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(body: bytes, phase: int) -> None:
            t0 = time.perf_counter()
            sent_s = t0 - start
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    variant = response.headers.get("X-Infless-Variant", "")
                    ms = (time.perf_counter() - t0) * 1000
                    answers.append((ms, response.status, variant, phase, sent_s))
            except (aiohttp.ClientError, TimeoutError):
                answers.append(((time.perf_counter() - t0) * 1000, 599, "", phase, sent_s))

        tasks: list[asyncio.Task[None]] = []
        start = time.perf_counter()
        due = 0.0
        sent = 0
        for index, (rate, seconds) in enumerate(phases):
            end = due + seconds
            while sent < max_requests:
                due += rng.expovariate(rate)
                if due >= end:
                    due = end
                    break
                delay = start + due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(bodies[sent % len(bodies)], index)))
                sent += 1
        await asyncio.gather(*tasks)
    return answers


def _p99(sorted_ms: list[float]) -> float:
    return round(sorted_ms[int(0.99 * (len(sorted_ms) - 1))], 1) if sorted_ms else 0.0


def summarize(
    name: str,
    answers: list[Answer],
    phases: list[tuple[float, float]],
    slo_ms: float,
    accuracy: dict[str, float],
    fixed: str | None,
) -> Run:
    """An arm's figures from its answers; `fixed`: the variant every answer came from (a
    fixed arm's answers name none)."""
    run = Run(name, requests=len(answers))
    latencies = sorted(a[0] for a in answers if a[1] == 200)
    run.ok = len(latencies)
    run.refused = sum(1 for a in answers if a[1] == 429)
    run.errors = sum(1 for a in answers if a[1] not in (200, 429))
    violating = [a for a in answers if a[1] != 200 or a[0] > slo_ms]
    run.violations = len(violating)
    run.late_by_second = dict(Counter(int(a[4]) for a in violating))
    for a in violating:
        kind = "late" if a[1] == 200 else "429" if a[1] == 429 else "error"
        counts = run.lost_by_variant.setdefault(a[2] or fixed or "", {})
        counts[kind] = counts.get(kind, 0) + 1
    if latencies:
        run.p50_ms = round(statistics.median(latencies), 1)
        run.p99_ms = _p99(latencies)
    served = [a[2] or fixed or "" for a in answers if a[1] == 200]
    for variant in served:
        run.by_variant[variant] = run.by_variant.get(variant, 0) + 1
    run.accuracy = round(statistics.fmean(accuracy[v] for v in served), 4) if served else 0.0
    for index, (rate, _) in enumerate(phases):
        mine = [a for a in answers if a[3] == index]
        ok = sorted(a[0] for a in mine if a[1] == 200)
        late = sum(1 for a in mine if a[1] != 200 or a[0] > slo_ms)
        run.phases.append(
            {"rate_rps": rate, "requests": len(mine), "violations": late, "p99_ms": _p99(ok)}
        )
    return run


def measure(
    gw: Gateway,
    name: str,
    target: str,
    functions: set[str],
    load: tuple[list[bytes], list[tuple[float, float]], int, int],
    slo_ms: float,
    accuracy: dict[str, float],
    fixed: str | None,
) -> tuple[Run, list[Answer]]:
    """One arm: the load (bodies, phases, max requests, seed) sent to `/function/{target}`,
    the cores `functions` held meanwhile; its figures and its answers."""
    bodies, phases, max_requests, seed = load
    with CorePoller(gw, functions) as poller:
        url = f"{gw.url}/function/{target}"
        with young_collections_only():  # a full collection here would pause the client
            answers = asyncio.run(open_loop(url, bodies, phases, max_requests, seed))
        time.sleep(1.0)
    run = summarize(name, answers, phases, slo_ms, accuracy, fixed)
    run.core_s = round(poller.core_s, 1)
    return run, answers


def combine(
    name: str,
    rounds: list[tuple[Run, list[Answer]]],
    phases: list[tuple[float, float]],
    slo_ms: float,
    accuracy: dict[str, float],
    fixed: str | None,
) -> Run:
    """One arm's figures over all its rounds: the answers of every round summarized
    together, the core-seconds, switches and spill-overs added."""
    answers = [answer for _, round_answers in rounds for answer in round_answers]
    run = summarize(name, answers, phases, slo_ms, accuracy, fixed)
    run.core_s = round(sum(r.core_s for r, _ in rounds), 1)
    run.switches = sum(r.switches for r, _ in rounds)
    run.spilled = sum(r.spilled for r, _ in rounds)
    return run


def verdict(modelless: Run, best_fixed: Run) -> dict[str, Any]:
    """The issue's test: model-less has no more SLO violations than the best fixed variant
    meeting the accuracy goal, and a mean accuracy not lower (higher, where load allows)."""
    return {
        "best_fixed": best_fixed.name,
        "violations_modelless": modelless.violations,
        "violations_best_fixed": best_fixed.violations,
        "accuracy_modelless": modelless.accuracy,
        "accuracy_best_fixed": best_fixed.accuracy,
        "no_more_violations": modelless.violations <= best_fixed.violations,
        "accuracy_not_lower": modelless.accuracy >= best_fixed.accuracy,
        "higher_accuracy": modelless.accuracy > best_fixed.accuracy,
    }
