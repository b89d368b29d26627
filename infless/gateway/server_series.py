"""Scrape-time Prometheus series about servers and functions that the Grafana dashboard
(`docs/grafana/infless.json`) draws besides the request counters: each function's SLO (the
line its latency panels compare against), each server's cores and what the planner left
free, its tensor store per tenant, and the workers its starters keep warm without an
instance (idle for transformation, GPU standby).

Runs only when `/metrics` is scraped. Gateway side: must not import torch, and only reads
the pool.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from infless.control.snapshot import server_view

if TYPE_CHECKING:
    from infless.control.pool import WorkerPool

KEPT_STATES = ("idle", "standby")


class _Families:
    def __init__(self) -> None:
        server = ["server"]
        self.slo = GaugeMetricFamily(
            "infless_function_slo_seconds", "The function's latency SLO", labels=["function_name"]
        )
        self.cpus = GaugeMetricFamily(
            "infless_server_cpus", "Cores the server offers instances", labels=server
        )
        self.free_cpus = GaugeMetricFamily(
            "infless_server_free_cpus",
            "Cores no wanted or draining instance is planned on",
            labels=server,
        )
        self.store = GaugeMetricFamily(
            "infless_store_bytes",
            "The tensor store's files on the server, per tenant (weights shared by instances)",
            labels=["server", "tenant"],
        )
        self.kept = GaugeMetricFamily(
            "infless_kept_workers",
            "Workers kept warm without an instance: idle (for transformation) or GPU standby",
            labels=["server", "state"],
        )

    def all(self) -> list[Metric]:
        return list(vars(self).values())


class ServerCollector:
    """A prometheus_client custom collector over the pool's servers and functions."""

    def __init__(self, pool: WorkerPool) -> None:
        self._pool = pool

    def describe(self) -> Iterator[Metric]:
        yield from _Families().all()

    def collect(self) -> Iterator[Metric]:
        families = _Families()
        pool = self._pool
        functions = list(pool.functions.values())
        for function in functions:
            families.slo.add_metric([function.name], function.spec.slo_ms / 1000.0)
        kept: dict[tuple[str, str], int] = {}
        for worker in pool.servers.kept():
            key = (str(worker.get("server")), str(worker.get("state")))
            kept[key] = kept.get(key, 0) + 1
        for server in pool.servers.values():
            sid = server.server_id
            idle = sum(1 for load in server.allocator.load().values() if load == 0)
            view = server_view(functions, sid, server.capacity_cpus, server.gpu_pct, idle)
            families.cpus.add_metric([sid], server.capacity_cpus)
            families.free_cpus.add_metric([sid], view.free_cpus)
            for state in KEPT_STATES:
                families.kept.add_metric([sid, state], kept.get((sid, state), 0))
            status = {} if server.status is None else server.status()
            store = status.get("store")
            tenants = store.get("tenantBytes", {}) if isinstance(store, dict) else {}
            for tenant, size_bytes in sorted(tenants.items()):
                families.store.add_metric([sid, tenant], size_bytes)
        yield from families.all()
