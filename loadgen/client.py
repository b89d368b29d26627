"""The load client: sends a schedule (open loop) or keeps clients busy (closed loop) against
one gateway, and polls its instances meanwhile.

I/O shell: owns the engine's connection pool for the invoke requests (`engine`, driven by
`drivers`), one aiohttp `ClientSession` for the occasional GETs (`/system/instances`,
`get_json`), and the progress ticks. It talks only to the one base URL it is given (checked by
`functions.check_target`: loopback unless `allow_remote`), never follows redirects, sends the
credentials' headers (`auth`), and always stops: schedules are capped in count and duration,
sending stops at `max_duration_s`, every request ends by `timeout_s`, and whatever is left
after that (and a grace period) is reported as cancelled. Decides nothing about workloads or
reports. Times come from `time.perf_counter`, relative to the run's start.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import resource
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import aiohttp
import orjson

from loadgen.auth import NO_CREDENTIALS, Credentials
from loadgen.drivers import ClosedLoopDriver, LiveCounters, OpenLoopDriver
from loadgen.engine import ConnectionPool
from loadgen.formats import JSON, PreparedRequest, function_path
from loadgen.quietgc import young_collections_only
from loadgen.records import InstanceSample, RequestRecord
from loadgen.responses import instance_samples
from loadgen.workloads import ClosedLoopPlan, Schedule

PROGRESS_TICK_S = 0.25
CANCEL_GRACE_S = 2.0
MAX_CONNECTIONS = 1024

_now = time.perf_counter

# Per function: the requests to cycle through; plain bytes are JSON bodies for /function/{name}.
RequestPools = Mapping[str, Sequence[PreparedRequest | bytes]]


class ProgressSink(Protocol):
    def start(self, label: str, total: int, duration_s: float) -> None: ...

    def update(self, elapsed_s: float, counters: LiveCounters) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ClientConfig:
    base_url: str  # loopback unless allow_remote (checked again here)
    timeout_s: float = 30.0  # per request, connect to last byte
    max_duration_s: float = 600.0  # no request is sent later than this after the start
    max_connections: int | None = None  # None: sized from the schedule's peak rate
    poll_interval_s: float = 1.0  # /system/instances; 0 disables polling
    credentials: Credentials = NO_CREDENTIALS
    allow_remote: bool = False


@dataclass(frozen=True, slots=True)
class RunResult:
    records: tuple[RequestRecord, ...]  # sorted by index (schedule order, or send order)
    instance_samples: tuple[InstanceSample, ...]
    window_s: float  # the schedule's (or closed loop's) duration
    elapsed_s: float  # start to the last reply (or cancellation)
    not_sent: int  # scheduled but not sent because max_duration_s ran out


def peak_rate_rps(schedule: Schedule, bin_s: float = 1.0) -> float:
    bins = Counter(int(a.at_s // bin_s) for a in schedule.arrivals)
    return max(bins.values(), default=0) / bin_s


def fd_ceiling() -> int:
    """The most connections one process may hold: the open-file limit less 64, <= 1024."""
    soft_fds, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft_fds == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return min(MAX_CONNECTIONS, max(16, soft_fds - 64))


def connection_limit(peak_rps: float, override: int | None = None) -> int:
    """One second of the peak rate in flight (+16), within [16, 1024] and the fd limit."""
    if override is not None:
        return max(1, override)
    return max(16, min(fd_ceiling(), math.ceil(peak_rps) + 16))


class OpenLoopClient:
    """`async with OpenLoopClient(config, peak_rps) as client: await client.run(...)`.

    `run` sends a schedule (open loop); `run_closed` runs a closed-loop plan. `min_connections`
    raises the pool's size (a closed loop needs one connection per client)."""

    def __init__(self, config: ClientConfig, peak_rps: float, min_connections: int = 0) -> None:
        self._config = config
        limit = connection_limit(peak_rps, config.max_connections)
        if config.max_connections is None:
            limit = max(limit, min_connections)
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None
        self._pool: ConnectionPool | None = None
        self._invoke_headers = tuple(config.credentials.invoke_headers().items())

    @property
    def connection_limit(self) -> int:
        return self._limit

    async def __aenter__(self) -> OpenLoopClient:
        pool = ConnectionPool(
            self._config.base_url, self._limit, self._config.timeout_s, self._config.allow_remote
        )
        await pool.start()
        self._pool = pool
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self._config.timeout_s),
            headers=self._config.credentials.system_headers(),
            auto_decompress=False,
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("OpenLoopClient used outside `async with`")
        return self._session

    @property
    def pool(self) -> ConnectionPool:
        if self._pool is None:
            raise RuntimeError("OpenLoopClient used outside `async with`")
        return self._pool

    async def get_json(self, path: str, timeout_s: float = 5.0) -> Any:
        """GET base_url + path and decode JSON; raises aiohttp.ClientResponseError on non-2xx."""
        async with self.session.get(
            self._config.base_url + path,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as response:
            payload = await response.read()
            response.raise_for_status()
            return orjson.loads(payload)

    def wires(self, requests: RequestPools) -> dict[str, tuple[bytes, ...]]:
        """Every request as the bytes to write: line, headers (auth included) and body."""
        result: dict[str, tuple[bytes, ...]] = {}
        for function, items in requests.items():
            built = []
            for item in items:
                prepared = (
                    PreparedRequest(function_path(function), JSON, item)
                    if isinstance(item, bytes)
                    else item
                )
                built.append(
                    self.pool.request_bytes(
                        prepared.path,
                        prepared.content_type,
                        prepared.body,
                        (*prepared.headers, *self._invoke_headers),
                    )
                )
            result[function] = tuple(built)
        return result

    async def run(
        self,
        schedule: Schedule,
        bodies: RequestPools,
        progress: ProgressSink | None = None,
        step: int = 0,
        label: str = "load",
    ) -> RunResult:
        """Send each scheduled request at its time, whatever the replies (open loop)."""
        del step  # the caller numbers max-rate steps on the records it keeps
        missing = [f for f in schedule.functions if not bodies.get(f)]
        if missing:
            raise ValueError(f"no request bodies for function(s) {missing}")
        wires = self.wires(bodies)
        counters = LiveCounters()
        with young_collections_only():  # entered (a collection) before the schedule's clock
            t0 = _now()
            driver = OpenLoopDriver(
                self.pool, wires, t0, counters, schedule, self._config.max_duration_s
            )
            records, samples, elapsed_s = await self._drive(
                driver, t0, counters, progress, label, len(schedule.arrivals), schedule.duration_s
            )
        return RunResult(records, samples, schedule.duration_s, elapsed_s, driver.not_sent)

    async def run_closed(
        self,
        plan: ClosedLoopPlan,
        bodies: RequestPools,
        progress: ProgressSink | None = None,
        label: str = "closed loop",
    ) -> RunResult:
        """Keep each of the plan's clients busy: its next request leaves on its answer."""
        missing = [f for f in plan.functions if not bodies.get(f)]
        if missing:
            raise ValueError(f"no request bodies for function(s) {missing}")
        wires = self.wires(bodies)
        counters = LiveCounters()
        with young_collections_only():  # entered (a collection) before the plan's clock
            t0 = _now()
            driver = ClosedLoopDriver(self.pool, wires, t0, counters, plan)
            records, samples, elapsed_s = await self._drive(
                driver, t0, counters, progress, label, plan.max_requests, plan.duration_s
            )
        return RunResult(records, samples, plan.duration_s, elapsed_s, 0)

    async def _drive(
        self,
        driver: OpenLoopDriver | ClosedLoopDriver,
        t0: float,
        counters: LiveCounters,
        progress: ProgressSink | None,
        label: str,
        total: int,
        duration_s: float,
    ) -> tuple[tuple[RequestRecord, ...], tuple[InstanceSample, ...], float]:
        loop = asyncio.get_running_loop()
        samples: list[InstanceSample] = []
        background = [loop.create_task(self._poll_instances(t0, samples))]
        if progress is not None:
            progress.start(label, total, duration_s)
            background.append(loop.create_task(self._tick(progress, t0, counters)))
        # Sending ends by max_duration_s, every answer by timeout_s after its send.
        budget_s = self._config.max_duration_s + self._config.timeout_s + CANCEL_GRACE_S
        try:
            driver.start()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(driver.finished), budget_s)
        finally:
            driver.stop()
            if not driver.finished.done():
                self.pool.cancel_all()  # each unfinished request reports "cancelled"
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if progress is not None:
                progress.update(_now() - t0, counters)
                progress.stop()
        if self._config.poll_interval_s > 0:  # one last look at the instances
            with contextlib.suppress(Exception):
                samples.extend(
                    instance_samples(_now() - t0, await self.get_json("/system/instances", 2.0))
                )
        records = tuple(sorted(driver.records, key=lambda r: r.index))
        return records, tuple(samples), _now() - t0

    async def _poll_instances(self, t0: float, samples: list[InstanceSample]) -> None:
        interval_s = self._config.poll_interval_s
        if interval_s <= 0:
            return
        next_s = t0
        while True:
            try:
                instances = await self.get_json("/system/instances", timeout_s=max(interval_s, 1.0))
            except aiohttp.ClientResponseError as exc:
                if exc.status in (401, 403, 404, 405):
                    return  # no instances API here, or not for these credentials
            except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError):
                pass  # the gateway may be busy; try at the next tick
            else:
                samples.extend(instance_samples(_now() - t0, instances))
            next_s += interval_s
            await asyncio.sleep(max(0.0, next_s - _now()))

    async def _tick(self, progress: ProgressSink, t0: float, counters: LiveCounters) -> None:
        while True:
            progress.update(_now() - t0, counters)
            await asyncio.sleep(PROGRESS_TICK_S)
