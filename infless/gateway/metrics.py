"""Prometheus metrics: the OpenFaaS gateway series (exact names and labels) plus infless's own.

infless's per-function series follow Triton's shape (request success / failure with a
`reason`, inference count, queue vs compute time, batch size) in base units. Scrape-time
series (instances by config, per-instance CPU/memory, GPUs) come from the collector in
`gateway.resources`, registered with `add_collector`. One registry per gateway (not the
global one), so several gateways can live in one process in tests. Label children are
cached per (function, code): the request path pays a dict lookup and the increments, nothing
more. Must not do I/O on the request path.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
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


class _Served:
    """The cached label children one served sample touches."""

    __slots__ = ("batch_size", "cold_seconds", "cold_starts", "count", "exec_s", "queue_s")

    def __init__(self, metrics: GatewayMetrics, function: str) -> None:
        self.batch_size = metrics.batch_size.labels(function)
        self.queue_s = metrics.queue_seconds.labels(function)
        self.exec_s = metrics.exec_seconds.labels(function)
        self.cold_starts = metrics.cold_starts.labels(function)
        self.cold_seconds = metrics.cold_start_seconds.labels(function)
        self.count = metrics.inference_count.labels(function)


class GatewayMetrics:
    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # `_created` series double the scrape for no user value
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.invocations = Counter(
            "gateway_function_invocation",
            "Function invocations by status code",
            ["function_name", "code"],
            registry=r,
        )
        self.seconds = Histogram(
            "gateway_functions_seconds",
            "Function invocation time taken",
            ["function_name", "code"],
            buckets=_SECONDS_BUCKETS,
            registry=r,
        )
        # OpenFaaS exports this counter without a `_total` suffix; prometheus_client would
        # add one to a Counter, so it is a (monotonic) Gauge to keep the exact name.
        self.started = Gauge(
            "gateway_function_invocation_started",
            "Function invocations started",
            ["function_name"],
            registry=r,
        )
        self.service_count = Gauge(
            "gateway_service_count", "Ready instances per function", ["function_name"], registry=r
        )
        self.cold_starts = Counter(
            "infless_cold_starts",
            "Requests that waited for an instance to start",
            ["function_name"],
            registry=r,
        )
        self.batch_size = Histogram(
            "infless_batch_size",
            "Batch size each request was served in",
            ["function_name"],
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.queue_seconds = Histogram(
            "infless_queue_seconds",
            "Time from arrival to batch dispatch",
            ["function_name"],
            buckets=_SECONDS_BUCKETS,
            registry=r,
        )
        self.exec_seconds = Histogram(
            "infless_exec_seconds",
            "Batch execution time in the worker",
            ["function_name"],
            buckets=_SECONDS_BUCKETS,
            registry=r,
        )
        self.cold_start_seconds = Histogram(
            "infless_cold_start_seconds",
            "How long a cold request waited for an instance to start",
            ["function_name"],
            buckets=_COLD_START_BUCKETS,
            registry=r,
        )
        self.inference_count = Counter(
            "infless_inference_count",
            "Samples inferred (a request carrying n samples counts n)",
            ["function_name"],
            registry=r,
        )
        self.request_success = Counter(
            "infless_inference_request_success",
            "Inference requests answered with a 2xx (a request of n samples counts 1)",
            ["function_name"],
            registry=r,
        )
        self.request_failure = Counter(
            "infless_inference_request_failure",
            "Inference requests that failed, by reason (REJECTED, CANCELED, BACKEND, OTHER)",
            ["function_name", "reason"],
            registry=r,
        )
        self._done: dict[tuple[str, int], tuple[Counter, Histogram, Counter]] = {}
        self._started: dict[str, Gauge] = {}
        self._served: dict[str, _Served] = {}

    def request_started(self, function: str) -> None:
        child = self._started.get(function)
        if child is None:
            child = self._started[function] = self.started.labels(function)
        child.inc()

    def request_done(self, function: str, code: int, seconds: float) -> None:
        key = (function, code)
        children = self._done.get(key)
        if children is None:
            code_text = str(code)
            outcome = (
                self.request_success.labels(function)
                if code < 400
                else self.request_failure.labels(function, failure_reason(code))
            )
            children = self._done[key] = (
                self.invocations.labels(function, code_text),
                self.seconds.labels(function, code_text),
                outcome,
            )
        children[0].inc()
        children[1].observe(seconds)
        children[2].inc()

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
        children = self._served.get(function)
        if children is None:
            children = self._served[function] = _Served(self, function)
        children.count.inc()
        children.batch_size.observe(batch_size)
        children.queue_s.observe(queue_ms / 1000.0)
        children.exec_s.observe(exec_ms / 1000.0)
        if cold:
            children.cold_starts.inc()
            if cold_start_ms is not None:
                children.cold_seconds.observe(cold_start_ms / 1000.0)

    def add_collector(self, collector: Collector) -> None:
        """Series computed at scrape time (instances, processes, GPUs)."""
        self.registry.register(collector)

    def set_instances(self, function: str, ready: int) -> None:
        self.service_count.labels(function).set(ready)

    def render(self) -> bytes:
        return generate_latest(self.registry)
