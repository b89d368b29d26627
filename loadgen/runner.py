"""The run shell: discover functions, build bodies, drive the client, write the report.

I/O shell that composes the pure parts (workloads, bodies, maxrate, stats) with the client
and the report. Holds no policy of its own beyond sequencing; the command line lives in `cli`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import orjson

from loadgen.auth import NO_CREDENTIALS, Credentials
from loadgen.bodies import DEFAULT_SEQ_LEN
from loadgen.client import (
    ClientConfig,
    OpenLoopClient,
    ProgressSink,
    RunResult,
    fd_ceiling,
    peak_rate_rps,
)
from loadgen.formats import BodyFormat, PreparedRequest, Route, describe, prepare_requests
from loadgen.functions import FunctionInfo, parse_function_status
from loadgen.maxrate import SearchConfig, SearchState, judge_step, next_rate, record_step
from loadgen.records import InstanceSample, RequestRecord
from loadgen.report import RunInfo, write_report
from loadgen.stats import summarize_function
from loadgen.workloads import ClosedLoopPlan, Schedule, SyntheticSpec, synthetic_schedule

DISCOVERY_TIMEOUT_S = 10.0


class GatewayError(RuntimeError):
    """The gateway could not be asked about its functions (down, unknown function, bad JSON)."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    base_url: str
    out_dir: Path
    seed: int = 0
    timeout_s: float = 30.0
    max_duration_s: float = 600.0
    max_requests: int = 10_000
    max_connections: int | None = None
    poll_interval_s: float = 1.0
    bodies_per_function: int = 16
    seq_len_range: tuple[int, int] = DEFAULT_SEQ_LEN
    slo_ms: float | None = None  # overrides every function's SLO when given
    command: str = ""
    body_format: BodyFormat = "json"
    route: Route = "function"
    credentials: Credentials = NO_CREDENTIALS
    allow_remote: bool = False


async def _get_json(session: aiohttp.ClientSession, url: str, credentials: Credentials) -> Any:
    async with session.get(url, allow_redirects=False) as response:
        payload = await response.read()
        if response.status == 404:
            raise GatewayError(f"GET {url}: 404 not found")
        if response.status in (401, 403):
            hint = credentials.hint(urlsplit(url).path)
            raise GatewayError(f"GET {url}: HTTP {response.status}: {hint}")
        if response.status != 200:
            raise GatewayError(f"GET {url}: HTTP {response.status}: {payload[:200]!r}")
        return orjson.loads(payload)


async def discover_functions(
    base_url: str, names: Sequence[str], credentials: Credentials = NO_CREDENTIALS
) -> list[FunctionInfo]:
    """The named functions (all deployed ones when `names` is empty), with signatures."""
    timeout = aiohttp.ClientTimeout(total=DISCOVERY_TIMEOUT_S)
    try:
        async with aiohttp.ClientSession(
            timeout=timeout, headers=credentials.system_headers()
        ) as session:
            deployed = await _get_json(session, f"{base_url}/system/functions", credentials)
            if not isinstance(deployed, list):
                raise GatewayError(f"GET {base_url}/system/functions: expected a JSON list")
            known = [str(f.get("name")) for f in deployed if isinstance(f, dict)]
            wanted = list(names) or known
            if not wanted:
                raise GatewayError(f"no functions are deployed at {base_url}; deploy one first")
            infos: list[FunctionInfo] = []
            for name in wanted:
                if name not in known:
                    raise GatewayError(
                        f"function {name!r} is not deployed at {base_url} (deployed: "
                        f"{', '.join(known) or 'none'})"
                    )
                raw = await _get_json(
                    session, f"{base_url}/system/function/{quote(name, safe='')}", credentials
                )
                infos.append(parse_function_status(raw))
            return infos
    except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError) as exc:
        raise GatewayError(f"cannot reach the gateway at {base_url}: {exc!r}") from exc


def slo_table(
    functions: Sequence[FunctionInfo], override_ms: float | None
) -> dict[str, float | None]:
    return {f.name: override_ms if override_ms is not None else f.slo_ms for f in functions}


def build_bodies(
    functions: Sequence[FunctionInfo], options: RunOptions
) -> dict[str, tuple[PreparedRequest, ...]]:
    """Each function's requests in the options' route and format, encoded once."""
    return {
        f.name: prepare_requests(
            f,
            options.bodies_per_function,
            options.seed,
            options.seq_len_range,
            options.body_format,
            options.route,
        )
        for f in functions
    }


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _client_config(options: RunOptions) -> ClientConfig:
    return ClientConfig(
        base_url=options.base_url,
        timeout_s=options.timeout_s,
        max_duration_s=options.max_duration_s,
        max_connections=options.max_connections,
        poll_interval_s=options.poll_interval_s,
        credentials=options.credentials,
        allow_remote=options.allow_remote,
    )


def _run_info(
    kind: str, options: RunOptions, description: str, started_at: str, result: RunResult
) -> RunInfo:
    return RunInfo(
        kind=kind,
        gateway=options.base_url,
        schedule=description,
        seed=options.seed,
        started_at=started_at,
        window_s=result.window_s,
        elapsed_s=result.elapsed_s,
        scheduled=len(result.records) + result.not_sent,
        not_sent=result.not_sent,
        dropped_by_cap=0,
        connection_limit=0,
        command=options.command,
        requests=describe(options.body_format, options.route),
    )


async def run_schedule(
    kind: str,
    schedule: Schedule,
    functions: Sequence[FunctionInfo],
    options: RunOptions,
    progress: ProgressSink | None,
) -> tuple[RunResult, RunInfo]:
    """Drive one schedule and write its report; returns what was recorded and the run info."""
    bodies = build_bodies(functions, options)
    started_at = _now_iso()
    async with OpenLoopClient(_client_config(options), peak_rate_rps(schedule)) as client:
        result = await client.run(schedule, bodies, progress, label=kind)
        limit = client.connection_limit
    info = replace(
        _run_info(kind, options, schedule.description, started_at, result),
        scheduled=len(schedule.arrivals),
        dropped_by_cap=schedule.dropped_by_cap,
        connection_limit=limit,
    )
    write_report(
        options.out_dir,
        info,
        result.records,
        result.instance_samples,
        slo_table(functions, options.slo_ms),
    )
    return result, info


async def run_closed_loop(
    plan: ClosedLoopPlan,
    functions: Sequence[FunctionInfo],
    options: RunOptions,
    progress: ProgressSink | None,
) -> tuple[RunResult, RunInfo]:
    """Drive a closed-loop plan and write its report (send lag marked as not applicable)."""
    clients = len(plan.clients)
    if options.max_connections is not None and clients > options.max_connections:
        raise ValueError(
            f"--concurrency: {clients} clients in all need {clients} connections, more than "
            f"--max-connections {options.max_connections}"
        )
    if clients > fd_ceiling():
        raise ValueError(
            f"--concurrency: {clients} clients in all need {clients} connections, more than "
            f"the {fd_ceiling()} this process may open (raise `ulimit -n`, or run several "
            "loadgen processes)"
        )
    bodies = build_bodies(functions, options)
    started_at = _now_iso()
    async with OpenLoopClient(_client_config(options), 0.0, min_connections=clients) as client:
        result = await client.run_closed(plan, bodies, progress, label="closed loop")
        limit = client.connection_limit
    info = replace(
        _run_info("synthetic", options, plan.description, started_at, result),
        connection_limit=limit,
        closed_loop=True,
    )
    write_report(
        options.out_dir,
        info,
        result.records,
        result.instance_samples,
        slo_table(functions, options.slo_ms),
    )
    return result, info


def _shift(records: Sequence[RequestRecord], offset_s: float, step: int) -> list[RequestRecord]:
    return [
        replace(r, scheduled_s=r.scheduled_s + offset_s, sent_s=r.sent_s + offset_s, step=step)
        for r in records
    ]


async def run_max_rate(
    function: FunctionInfo,
    search: SearchConfig,
    options: RunOptions,
    progress: ProgressSink | None,
    on_step: Callable[[int, float, str], None] = lambda step, rate, verdict: None,
) -> SearchState:
    """Constant-rate Poisson steps on one function until the search settles; one report of
    all steps (their timelines laid end to end)."""
    slo_ms = options.slo_ms if options.slo_ms is not None else function.slo_ms
    bodies = build_bodies([function], options)
    state = SearchState()
    records: list[RequestRecord] = []
    samples: list[InstanceSample] = []
    offset_s = 0.0
    started_at = _now_iso()
    budget_s = options.max_duration_s
    config = _client_config(options)
    async with OpenLoopClient(config, search.max_rate_rps) as client:
        while (rate_rps := next_rate(state, search)) is not None and budget_s > 0:
            step = len(state.steps) + 1
            spec = SyntheticSpec(
                "poisson", rate_rps, min(search.step_s, budget_s), options.seed + step
            )
            schedule = synthetic_schedule(spec, [function.name], options.max_requests, budget_s)
            result = await client.run(
                schedule, bodies, progress, step=step, label=f"step {step} @ {rate_rps:.1f} rps"
            )
            summary = summarize_function(
                function.name, result.records, {function.name: slo_ms}, schedule.duration_s
            )
            verdict = judge_step(rate_rps, summary, slo_ms)
            state = record_step(state, verdict)
            on_step(step, rate_rps, "pass" if verdict.passed else f"fail: {verdict.reason}")
            records += _shift(result.records, offset_s, step)
            samples += [replace(s, t_s=s.t_s + offset_s) for s in result.instance_samples]
            offset_s += result.elapsed_s + search.pause_s
            budget_s -= result.elapsed_s + search.pause_s
            await asyncio.sleep(search.pause_s)
        limit = client.connection_limit
    info = RunInfo(
        kind="max-rate",
        gateway=options.base_url,
        schedule=(
            f"max-rate search on {function.name}: Poisson steps of {search.step_s:g} s from "
            f"{search.start_rps:g} rps, x{search.growth:g} then bisection, <= {search.max_steps} "
            f"steps, seed {options.seed}"
        ),
        seed=options.seed,
        started_at=started_at,
        window_s=max(offset_s, 1e-9),
        elapsed_s=offset_s,
        scheduled=len(records),
        not_sent=0,
        dropped_by_cap=0,
        connection_limit=limit,
        command=options.command,
        requests=describe(options.body_format, options.route),
    )
    write_report(options.out_dir, info, records, samples, {function.name: slo_ms}, search=state)
    return state


def run_async(coroutine_factory: Callable[[], Any]) -> Any:
    """On uvloop when it is importable (the engine's callbacks run faster there; its timers
    tick in whole milliseconds, which only rounds send times), else plain asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine_factory())
    return uvloop.run(coroutine_factory())
