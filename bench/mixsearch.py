"""The maximum sustained rate of a function mix on one running gateway: loadgen's search, mixed.

I/O shell over loadgen's pure parts: each step offers a total rate split evenly across the
mix's functions as independent Poisson streams (`loadgen.workloads.synthetic_schedule`),
sent by loadgen's open-loop client with one JSON sample per request (`loadgen.bodies`). A
step is `warmup_s` at the step's rate (excluded: the autoscaler sees the new rate and scales)
followed by `search.step_s` measured; only requests scheduled in the measured window count.
The mix passes a step when every function passes (`loadgen.maxrate.judge_mix`: p99 <= SLO,
no errors — 429 included —, achieved >= 97 % of offered); a failed step is tried again
(`confirm_failures` times, fresh arrivals) before it counts as failed; the next rate comes from
`loadgen.maxrate.next_rate` (grow geometrically, then bisect). `/system/instances` is
polled during the measured window; the last poll is the step's instance snapshot.
Targets the one base URL it is given (the bench starts gateways on 127.0.0.1 only); bounded
in steps, requests per step and seconds per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loadgen.bodies import make_bodies
from loadgen.client import ClientConfig, OpenLoopClient
from loadgen.functions import FunctionInfo
from loadgen.maxrate import (
    SearchConfig,
    SearchState,
    StepVerdict,
    judge_mix,
    next_rate,
    record_step,
)
from loadgen.records import RequestRecord
from loadgen.stats import FunctionSummary, summarize_function
from loadgen.workloads import SyntheticSpec, synthetic_schedule

BODIES_PER_FUNCTION = 16
POLL_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class MixSearchOptions:
    warmup_s: float = 5.0  # at the step's rate, before the measured window; not judged
    seed: int = 0
    timeout_s: float = 5.0  # per request; far above any SLO here, keeps a failed step short
    max_requests_per_step: int = 30_000
    # A failed step is run again this many times (new arrivals) and passes if any try passes:
    # on a shared machine one stray pause can push a p99 over the SLO, while a pass shows the
    # rate served within the SLO for a whole window.
    confirm_failures: int = 1


@dataclass(frozen=True, slots=True)
class InstanceConfigCount:
    """How many ready instances of one function run with one <batch size, cores>."""

    function: str
    batch_size: int
    cpus: int
    count: int

    def to_json(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "batchSize": self.batch_size,
            "cpus": self.cpus,
            "count": self.count,
        }


@dataclass(frozen=True, slots=True)
class StepOutcome:
    verdict: StepVerdict  # rate_rps is the mix's total target rate
    summaries: dict[str, FunctionSummary]
    configs: tuple[InstanceConfigCount, ...]  # ready instances at the window's last poll
    starting: int  # instances still starting at that poll


@dataclass(frozen=True, slots=True)
class MixSearchResult:
    state: SearchState
    steps: tuple[StepOutcome, ...]

    @property
    def best(self) -> StepOutcome | None:
        passed = [s for s in self.steps if s.verdict.passed]
        return max(passed, key=lambda s: s.verdict.rate_rps) if passed else None


def instance_configs(instances: object) -> tuple[tuple[InstanceConfigCount, ...], int]:
    """Ready instances grouped by (function, batchSize, cpus), and the starting count."""
    counts: Counter[tuple[str, int, int]] = Counter()
    starting = 0
    if isinstance(instances, list):
        for item in instances:
            if not isinstance(item, dict):
                continue
            if item.get("state") == "starting":
                starting += 1
            elif item.get("state") == "ready":
                key = (str(item.get("function")), int(item["batchSize"]), int(item["cpus"]))
                counts[key] += 1
    configs = tuple(InstanceConfigCount(f, b, c, n) for (f, b, c), n in sorted(counts.items()))
    return configs, starting


def measured_records(
    records: Sequence[RequestRecord], warmup_s: float
) -> dict[str, list[RequestRecord]]:
    """Requests scheduled after the warm-up, times shifted so the window starts at 0."""
    by_function: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.scheduled_s >= warmup_s:
            shifted = replace(r, scheduled_s=r.scheduled_s - warmup_s, sent_s=r.sent_s - warmup_s)
            by_function.setdefault(r.function, []).append(shifted)
    return by_function


async def _poll_window(
    client: OpenLoopClient, start_s: float, end_s: float
) -> tuple[tuple[InstanceConfigCount, ...], int]:
    """Poll /system/instances from start_s to end_s (perf_counter); the last good answer."""
    last: tuple[tuple[InstanceConfigCount, ...], int] = ((), 0)
    await asyncio.sleep(max(0.0, start_s - time.perf_counter()))
    while time.perf_counter() <= end_s:
        with contextlib.suppress(Exception):  # a busy gateway may miss a poll; keep the last
            last = instance_configs(await client.get_json("/system/instances", 2.0))
        await asyncio.sleep(POLL_INTERVAL_S)
    return last


async def search_mix(
    base_url: str,
    functions: Sequence[FunctionInfo],
    search: SearchConfig,
    options: MixSearchOptions,
    on_step: Callable[[int, StepOutcome], None] = lambda step, outcome: None,
) -> MixSearchResult:
    """Run the stepwise search on `functions` together; see the module docstring."""
    if not functions:
        raise ValueError("a mix needs at least one function")
    names = [f.name for f in functions]
    slos = {f.name: f.slo_ms for f in functions}
    bodies = {f.name: make_bodies(f, BODIES_PER_FUNCTION, options.seed) for f in functions}
    window_s = options.warmup_s + search.step_s
    config = ClientConfig(
        base_url=base_url,
        timeout_s=options.timeout_s,
        max_duration_s=window_s + 1.0,
        poll_interval_s=0.0,  # this shell polls the instances itself, with their configs
    )
    state = SearchState()
    outcomes: list[StepOutcome] = []
    async with OpenLoopClient(config, search.max_rate_rps) as client:

        async def run_step(rate_rps: float, step: int, seed: int) -> StepOutcome:
            spec = SyntheticSpec("poisson", rate_rps / len(names), window_s, seed)
            schedule = synthetic_schedule(spec, names, options.max_requests_per_step, window_s)
            t0 = time.perf_counter()
            poller = asyncio.create_task(
                _poll_window(client, t0 + options.warmup_s + POLL_INTERVAL_S / 2, t0 + window_s)
            )
            try:
                result = await client.run(schedule, bodies, None, step=step)
            finally:
                configs, starting = await poller
            measured = measured_records(result.records, options.warmup_s)
            summaries = {
                name: summarize_function(name, measured.get(name, []), slos, search.step_s)
                for name in names
            }
            verdict = judge_mix(rate_rps, list(summaries.values()), slos)
            return StepOutcome(verdict, summaries, configs, starting)

        while (rate_rps := next_rate(state, search)) is not None:
            step = len(state.steps) + 1
            outcome = await run_step(rate_rps, step, options.seed + step)
            outcomes.append(outcome)
            on_step(step, outcome)
            for attempt in range(options.confirm_failures):
                if outcome.verdict.passed:
                    break
                await asyncio.sleep(search.pause_s)
                outcome = await run_step(rate_rps, step, options.seed + 1000 * (attempt + 1) + step)
                outcomes.append(outcome)
                on_step(step, outcome)
            state = record_step(state, outcome.verdict)
            await asyncio.sleep(search.pause_s)
    return MixSearchResult(state, tuple(outcomes))
