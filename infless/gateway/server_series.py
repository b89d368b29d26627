"""Scrape-time Prometheus series about servers and functions that the Grafana dashboard
(`docs/grafana/infless.json`) draws besides the request counters: each function's SLO (the
line its latency panels compare against), each server's cores and what the planner left
free, its tensor store per tenant, and the workers its starters keep warm without an
instance (idle for transformation, GPU standby).

Runs only when `/metrics` is scraped. Gateway side: must not import torch, and only reads
the control plane's read-only views (`control.status`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

if TYPE_CHECKING:
    from infless.control.status import FunctionsView, InstancesView, ServersView

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
    """A prometheus_client custom collector over the servers, the functions and the kept
    workers."""

    def __init__(
        self, functions: FunctionsView, instances: InstancesView, servers: ServersView
    ) -> None:
        self._functions = functions
        self._instances = instances
        self._servers = servers

    def describe(self) -> Iterator[Metric]:
        yield from _Families().all()

    def collect(self) -> Iterator[Metric]:
        families = _Families()
        for function in self._functions.deployed.values():
            families.slo.add_metric([function.name], function.spec.slo_ms / 1000.0)
        kept: dict[tuple[str, str], int] = {}
        for worker in self._instances.kept():
            key = (worker.server, worker.state)
            kept[key] = kept.get(key, 0) + 1
        for load in self._servers.loads():
            sid = load.server_id
            families.cpus.add_metric([sid], load.capacity_cpus)
            families.free_cpus.add_metric([sid], load.free_cpus)
            for state in KEPT_STATES:
                families.kept.add_metric([sid, state], kept.get((sid, state), 0))
            store = load.facts.get("store")
            tenants = store.get("tenantBytes", {}) if isinstance(store, dict) else {}
            for tenant, size_bytes in sorted(tenants.items()):
                families.store.add_metric([sid, tenant], size_bytes)
        yield from families.all()
