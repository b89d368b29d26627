"""Prometheus metrics: the OpenFaaS gateway series (exact names and labels) plus infless's own.

infless's per-function series follow Triton's shape (request success / failure with a
`reason`, inference count, queue vs compute time, batch size) in base units. Scrape-time
series (instances by config, per-instance CPU/memory, GPUs) come from the collector in
`gateway.resources`, registered with `add_collector`. One registry per gateway (not the
global one), so several gateways can live in one process in tests. The request path counts
in plain numbers (a dict lookup and a few additions), exported at scrape time
(`_RequestSeries`). Must not do I/O on the request path.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, disable_created_metrics, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
_COLD_START_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def failure_reason(code: int) -> str:
    """An HTTP status -> Triton's failure reasons (REJECTED, CANCELED, BACKEND, OTHER)."""
    if code == 429:
        return "REJECTED"  # every queue full: load shedding
    if code in (499, 504):
        return "CANCELED"  # the client left or the gateway gave up waiting
    if code >= 500:
        return "BACKEND"  # the model raised, or no worker could serve
    return "OTHER"  # the request itself was invalid


class _Histogram:
    """Counts per bucket and a sum, kept by the event loop (one thread: no lock)."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def exposition(self) -> tuple[list[tuple[str, float]], float]:
        """Prometheus's cumulative buckets (`le`, count) and the sum."""
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += count
            buckets.append((_le(bound), float(running)))
        return buckets, self.total


def _le(bound: float) -> str:
    """A bucket's `le` label as prometheus_client writes it (1.0, 0.005, +Inf)."""
    if bound == math.inf:
        return "+Inf"
    return repr(float(bound))


class _Done:
    """What one (function, status) answer touches."""

    __slots__ = ("count", "seconds")

    def __init__(self) -> None:
        self.count = 0
        self.seconds = _Histogram(_SECONDS_BUCKETS)


class _Served:
    """What one served sample of a function touches."""

    __slots__ = ("batch_size", "cold_seconds", "cold_starts", "count", "exec_s", "queue_s")

    def __init__(self) -> None:
        self.count = 0
        self.cold_starts = 0
        self.batch_size = _Histogram(_BATCH_BUCKETS)
        self.queue_s = _Histogram(_SECONDS_BUCKETS)
        self.exec_s = _Histogram(_SECONDS_BUCKETS)
        self.cold_seconds = _Histogram(_COLD_START_BUCKETS)


class GatewayMetrics:
    """The gateway's series: counted on the request path in plain Python numbers (a dict
    lookup and a few additions per request; prometheus_client's own counters lock and
    cost several times that), exported with the exact names, labels and types when
    `/metrics` is scraped."""

    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # `_created` series double the scrape for no user value
        self.registry = CollectorRegistry(auto_describe=True)
        self.started: dict[str, int] = {}
        self.done: dict[tuple[str, int], _Done] = {}
        self.served_by: dict[str, _Served] = {}
        self.ready: dict[str, int] = {}
        self.registry.register(_RequestSeries(self))

    def request_started(self, function: str) -> None:
        self.started[function] = self.started.get(function, 0) + 1

    def request_done(self, function: str, code: int, seconds: float) -> None:
        done = self.done.get((function, code))
        if done is None:
            done = self.done[(function, code)] = _Done()
        done.count += 1
        done.seconds.observe(seconds)

    def served(
        self,
        function: str,
        batch_size: int,
        queue_ms: float,
        exec_ms: float,
        cold: bool,
        cold_start_ms: float | None = None,
    ) -> None:
        """One sample answered: its batch size, queue and compute time, cold-start wait."""
        served = self.served_by.get(function)
        if served is None:
            served = self.served_by[function] = _Served()
        served.count += 1
        served.batch_size.observe(batch_size)
        served.queue_s.observe(queue_ms / 1000.0)
        served.exec_s.observe(exec_ms / 1000.0)
        if cold:
            served.cold_starts += 1
            if cold_start_ms is not None:
                served.cold_seconds.observe(cold_start_ms / 1000.0)

    def add_collector(self, collector: Collector) -> None:
        """Series computed at scrape time (instances, processes, GPUs)."""
        self.registry.register(collector)

    def set_instances(self, function: str, ready: int) -> None:
        self.ready[function] = ready

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _histogram(name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, labels=labels)


class _RequestSeries(Collector):
    """The request path's numbers as Prometheus series, at scrape time."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterator[Metric]:
        return iter(())  # names are not known before the first scrape: collect() is cheap

    def collect(self) -> Iterator[Metric]:
        m = self._metrics
        fn = ["function_name"]
        invocations = CounterMetricFamily(
            "gateway_function_invocation",
            "Function invocations by status code",
            labels=["function_name", "code"],
        )
        seconds = _histogram(
            "gateway_functions_seconds",
            "Function invocation time taken",
            ["function_name", "code"],
        )
        # OpenFaaS exports this counter without a `_total` suffix: a (monotonic) gauge
        started = GaugeMetricFamily(
            "gateway_function_invocation_started", "Function invocations started", labels=fn
        )
        services = GaugeMetricFamily(
            "gateway_service_count", "Ready instances per function", labels=fn
        )
        success = CounterMetricFamily(
            "infless_inference_request_success",
            "Inference requests answered with a 2xx (a request of n samples counts 1)",
            labels=fn,
        )
        failure = CounterMetricFamily(
            "infless_inference_request_failure",
            "Inference requests that failed, by reason (REJECTED, CANCELED, BACKEND, OTHER)",
            labels=["function_name", "reason"],
        )
        for function, count in m.started.items():
            started.add_metric([function], count)
        for function, ready in m.ready.items():
            services.add_metric([function], ready)
        successes: dict[str, int] = {}
        failures: dict[tuple[str, str], int] = {}
        for (function, code), done in m.done.items():
            invocations.add_metric([function, str(code)], done.count)
            buckets, total = done.seconds.exposition()
            seconds.add_metric([function, str(code)], buckets, total)
            if code < 400:
                successes[function] = successes.get(function, 0) + done.count
            else:
                key = (function, failure_reason(code))
                failures[key] = failures.get(key, 0) + done.count
        for function, count in successes.items():
            success.add_metric([function], count)
        for (function, reason), count in failures.items():
            failure.add_metric([function, reason], count)
        yield from (invocations, seconds, started, services, success, failure)
        yield from self._served_series(m)

    @staticmethod
    def _served_series(m: GatewayMetrics) -> Iterator[Metric]:
        fn = ["function_name"]
        cold_starts = CounterMetricFamily(
            "infless_cold_starts", "Requests that waited for an instance to start", labels=fn
        )
        count = CounterMetricFamily(
            "infless_inference_count",
            "Samples inferred (a request carrying n samples counts n)",
            labels=fn,
        )
        histograms = {
            "batch_size": _histogram(
                "infless_batch_size", "Batch size each request was served in", fn
            ),
            "queue_s": _histogram(
                "infless_queue_seconds", "Time from arrival to batch dispatch", fn
            ),
            "exec_s": _histogram("infless_exec_seconds", "Batch execution time in the worker", fn),
            "cold_seconds": _histogram(
                "infless_cold_start_seconds",
                "How long a cold request waited for an instance to start",
                fn,
            ),
        }
        for function, served in m.served_by.items():
            cold_starts.add_metric([function], served.cold_starts)
            count.add_metric([function], served.count)
            for attribute, family in histograms.items():
                buckets, total = getattr(served, attribute).exposition()
                family.add_metric([function], buckets, total)
        yield from (cold_starts, count, *histograms.values())
