"""Prometheus metrics: the OpenFaaS gateway series (exact names and labels) plus infless's own.

One registry per gateway (not the global one), so several gateways can live in one process
in tests. Label children are cached per (function, code): the request path pays a dict
lookup and the increments, nothing more.
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

_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


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
        self._done: dict[tuple[str, int], tuple[Counter, Histogram]] = {}
        self._started: dict[str, Gauge] = {}

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
            children = self._done[key] = (
                self.invocations.labels(function, code_text),
                self.seconds.labels(function, code_text),
            )
        children[0].inc()
        children[1].observe(seconds)

    def served(
        self, function: str, batch_size: int, queue_ms: float, exec_ms: float, cold: bool
    ) -> None:
        self.batch_size.labels(function).observe(batch_size)
        self.queue_seconds.labels(function).observe(queue_ms / 1000.0)
        self.exec_seconds.labels(function).observe(exec_ms / 1000.0)
        if cold:
            self.cold_starts.labels(function).inc()

    def set_instances(self, function: str, ready: int) -> None:
        self.service_count.labels(function).set(ready)

    def render(self) -> bytes:
        return generate_latest(self.registry)
