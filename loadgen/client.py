"""The open-loop HTTP client: sends each scheduled request on time, whatever the replies.

I/O shell: owns one aiohttp `ClientSession`, the send loop, the in-flight tasks and the
`/system/instances` poller. It talks only to the one base URL it is given (checked by
`functions.check_target`), never follows redirects, and always stops: the schedule is capped
in count and duration, sending stops at `max_duration_s`, and in-flight requests are bounded
by `timeout_s` and then cancelled. It decides nothing about workloads or reports.
Times come from `time.perf_counter` (sub-microsecond), relative to the run's start.
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
from urllib.parse import quote

import aiohttp
import orjson

from loadgen.records import NAN, NO_RESPONSE, InstanceSample, RequestRecord
from loadgen.workloads import Schedule

JSON_HEADERS = {"Content-Type": "application/json"}
SEND_BATCH_S = 0.0005  # arrivals due within this much of now go out in the same wake-up
PROGRESS_TICK_S = 0.25
CANCEL_GRACE_S = 2.0

# The client's clock: uvloop's loop.time() ticks in whole milliseconds, too coarse for latencies.
_now = time.perf_counter


class ProgressSink(Protocol):
    def start(self, label: str, total: int, duration_s: float) -> None: ...

    def update(self, elapsed_s: float, counters: LiveCounters) -> None: ...

    def stop(self) -> None: ...


@dataclass(slots=True)
class LiveCounters:
    sent: int = 0
    done: int = 0
    ok: int = 0
    errors: int = 0


@dataclass(frozen=True, slots=True)
class ClientConfig:
    base_url: str  # already checked: loopback unless the user allowed remote
    timeout_s: float = 30.0  # per request, connect to last byte
    max_duration_s: float = 600.0  # no request is sent later than this after the start
    max_connections: int | None = None  # None: sized from the schedule's peak rate
    poll_interval_s: float = 1.0  # /system/instances; 0 disables polling


@dataclass(frozen=True, slots=True)
class RunResult:
    records: tuple[RequestRecord, ...]  # sorted by schedule index
    instance_samples: tuple[InstanceSample, ...]
    window_s: float  # the schedule's duration
    elapsed_s: float  # start to the last reply (or cancellation)
    not_sent: int  # scheduled but not sent because max_duration_s ran out


def peak_rate_rps(schedule: Schedule, bin_s: float = 1.0) -> float:
    bins = Counter(int(a.at_s // bin_s) for a in schedule.arrivals)
    return max(bins.values(), default=0) / bin_s


def connection_limit(peak_rps: float, override: int | None = None) -> int:
    """One second of the peak rate in flight (+16), within [16, 1024] and the fd limit."""
    if override is not None:
        return max(1, override)
    soft_fds, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = 1024 if soft_fds == resource.RLIM_INFINITY else min(1024, max(16, soft_fds - 64))
    return max(16, min(ceiling, math.ceil(peak_rps) + 16))


def _header_float(headers: Mapping[str, str], name: str, factor: float = 1.0) -> float:
    value = headers.get(name)
    if value is None:
        return NAN
    try:
        return float(value) * factor
    except ValueError:
        return NAN


def timing_from_headers(headers: Mapping[str, str]) -> dict[str, Any]:
    """The infless timing headers as RequestRecord fields (absent -> NaN/0/"")."""
    try:
        batch_size = int(headers.get("X-Infless-Batch-Size", "0"))
    except ValueError:
        batch_size = 0
    return {
        "call_id": headers.get("X-Call-Id", ""),
        "instance": headers.get("X-Infless-Instance", ""),
        "batch_size": batch_size,
        "queue_ms": _header_float(headers, "X-Infless-Queue-Ms"),
        "exec_ms": _header_float(headers, "X-Infless-Exec-Ms"),
        "cold_start": headers.get("X-Infless-Cold-Start", "").lower() == "true",
        "cold_start_ms": _header_float(headers, "X-Infless-Cold-Start-Ms"),
        "duration_ms": _header_float(headers, "X-Duration-Seconds", 1000.0),
    }


def error_code(status: int, payload: bytes) -> str:
    """The gateway's `code` from an error body, else `http_<status>`."""
    with contextlib.suppress(orjson.JSONDecodeError, UnicodeDecodeError):
        body = orjson.loads(payload)
        if isinstance(body, dict) and isinstance(body.get("code"), str) and body["code"]:
            return str(body["code"])
    return f"http_{status}"


def instance_samples(t_s: float, instances: object) -> list[InstanceSample]:
    counts: Counter[tuple[str, str]] = Counter()
    if isinstance(instances, list):
        for item in instances:
            if isinstance(item, dict):
                counts[(str(item.get("function", "")), str(item.get("state", "")))] += 1
    return [InstanceSample(t_s, fn, state, n) for (fn, state), n in sorted(counts.items())]


class OpenLoopClient:
    """`async with OpenLoopClient(config, peak_rps) as client: await client.run(...)`."""

    def __init__(self, config: ClientConfig, peak_rps: float) -> None:
        self._config = config
        self._limit = connection_limit(peak_rps, config.max_connections)
        self._session: aiohttp.ClientSession | None = None

    @property
    def connection_limit(self) -> int:
        return self._limit

    async def __aenter__(self) -> OpenLoopClient:
        connector = aiohttp.TCPConnector(
            limit=self._limit, limit_per_host=self._limit, keepalive_timeout=30.0
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self._config.timeout_s),
            json_serialize=lambda o: orjson.dumps(o).decode(),
            auto_decompress=False,
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("OpenLoopClient used outside `async with`")
        return self._session

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

    async def run(
        self,
        schedule: Schedule,
        bodies: Mapping[str, Sequence[bytes]],
        progress: ProgressSink | None = None,
        step: int = 0,
        label: str = "load",
    ) -> RunResult:
        missing = [f for f in schedule.functions if not bodies.get(f)]
        if missing:
            raise ValueError(f"no request bodies for function(s) {missing}")
        loop = asyncio.get_running_loop()
        records: list[RequestRecord] = []
        samples: list[InstanceSample] = []
        counters = LiveCounters()
        in_flight: set[asyncio.Task[None]] = set()
        t0 = _now()
        background = [loop.create_task(self._poll_instances(t0, samples))]
        if progress is not None:
            progress.start(label, len(schedule.arrivals), schedule.duration_s)
            background.append(loop.create_task(self._tick(progress, t0, counters)))
        not_sent = 0
        try:
            not_sent = await self._send_all(
                schedule, bodies, t0, step, records, counters, in_flight
            )
            if in_flight:
                _, pending = await asyncio.wait(
                    set(in_flight), timeout=self._config.timeout_s + CANCEL_GRACE_S
                )
                for task in pending:
                    task.cancel()
                if pending:
                    await asyncio.wait(pending, timeout=CANCEL_GRACE_S)
        finally:
            leftovers = [*background, *in_flight]  # in flight only if the loop was interrupted
            for task in leftovers:
                task.cancel()
            await asyncio.gather(*leftovers, return_exceptions=True)
            if progress is not None:
                progress.update(_now() - t0, counters)
                progress.stop()
        if self._config.poll_interval_s > 0:  # one last look at the instances
            with contextlib.suppress(Exception):
                samples.extend(
                    instance_samples(_now() - t0, await self.get_json("/system/instances", 2.0))
                )
        return RunResult(
            records=tuple(sorted(records, key=lambda r: r.index)),
            instance_samples=tuple(samples),
            window_s=schedule.duration_s,
            elapsed_s=_now() - t0,
            not_sent=not_sent,
        )

    async def _send_all(
        self,
        schedule: Schedule,
        bodies: Mapping[str, Sequence[bytes]],
        t0: float,
        step: int,
        records: list[RequestRecord],
        counters: LiveCounters,
        in_flight: set[asyncio.Task[None]],
    ) -> int:
        """Start each request at its time; returns how many were not sent (duration cap)."""
        loop = asyncio.get_running_loop()
        urls = {f: f"{self._config.base_url}/function/{quote(f, safe='')}" for f in bodies}
        next_body = Counter[str]()
        for index, arrival in enumerate(schedule.arrivals):
            if arrival.at_s >= self._config.max_duration_s:
                return len(schedule.arrivals) - index
            delay_s = t0 + arrival.at_s - _now()
            if delay_s > SEND_BATCH_S:
                await asyncio.sleep(delay_s)
            if _now() - t0 >= self._config.max_duration_s:  # fell that far behind
                return len(schedule.arrivals) - index
            pool = bodies[arrival.function]
            body = pool[next_body[arrival.function] % len(pool)]
            next_body[arrival.function] += 1
            task = loop.create_task(
                self._send(
                    index,
                    arrival.function,
                    arrival.at_s,
                    urls[arrival.function],
                    body,
                    t0,
                    step,
                    records,
                    counters,
                )
            )
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            counters.sent += 1
        return 0

    async def _send(
        self,
        index: int,
        function: str,
        scheduled_s: float,
        url: str,
        body: bytes,
        t0: float,
        step: int,
        records: list[RequestRecord],
        counters: LiveCounters,
    ) -> None:
        sent_s = _now() - t0
        status, error = NO_RESPONSE, ""
        timing: dict[str, Any] = {}
        try:
            async with self.session.post(
                url, data=body, headers=JSON_HEADERS, allow_redirects=False
            ) as response:
                payload = await response.read()
                status = response.status
                timing = timing_from_headers(response.headers)
                if status != 200:
                    error = error_code(status, payload)
        except TimeoutError:
            error = "timeout"
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            error = type(exc).__name__
        except asyncio.CancelledError:
            error = "cancelled"
            raise
        finally:
            latency_ms = (_now() - t0 - sent_s) * 1000.0 if status != NO_RESPONSE else NAN
            records.append(
                RequestRecord(
                    index, function, scheduled_s, sent_s, latency_ms, status, error, **timing
                )
            )
            counters.done += 1
            if status == 200:
                counters.ok += 1
            else:
                counters.errors += 1

    async def _poll_instances(self, t0: float, samples: list[InstanceSample]) -> None:
        interval_s = self._config.poll_interval_s
        if interval_s <= 0:
            return
        next_s = t0
        while True:
            try:
                instances = await self.get_json("/system/instances", timeout_s=max(interval_s, 1.0))
            except aiohttp.ClientResponseError as exc:
                if exc.status in (404, 405):
                    return  # a server without infless's instances API
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
