"""The scrape-time series the Grafana dashboard draws besides the request counters: each
function's SLO, each server's cores and free cores, its kept workers by state (zeros
included) and its store per tenant; and a cluster node's store as its agent reported it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from infless.app import create_app
from infless.config import parse_config
from infless.nodes.backend import node_status
from infless.nodes.wire import NodeReport
from tests.support.clock import FakeClock
from tests.support.inprocess import InProcessStarter
from tests.unit.weights.packages import write_package


async def test_slo_cores_and_kept_workers_are_exported(tmp_path: Path) -> None:
    package = write_package(tmp_path / "model", {"w": np.zeros(2, dtype=np.float32)})
    config = parse_config(
        {"state": {"dir": str(tmp_path / "state")}, "store": {"enabled": False},
         "scaling": {"policy": "none"}}
    )  # fmt: skip
    clock = FakeClock()
    app = create_app(config, clock=clock, starter=InProcessStarter(clock))
    async with TestClient(TestServer(app)) as client:
        body = {"service": "fn", "image": str(package),
                "annotations": {"com.infless.latency_target": "80ms"}}  # fmt: skip
        assert (await client.post("/system/functions", json=body)).status == 202
        async with asyncio.timeout(10):
            while True:
                if await (await client.get("/system/instances")).json():
                    break
                await asyncio.sleep(0.01)
        text = await (await client.get("/metrics")).text()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("infless_function_slo_seconds", (("function_name", "fn"),))] == 0.08
    cpus = samples[("infless_server_cpus", (("server", "local"),))]
    free = samples[("infless_server_free_cpus", (("server", "local"),))]
    assert free == cpus - 1  # the function's one instance, one core
    for state in ("idle", "standby"):
        assert samples[("infless_kept_workers", (("server", "local"), ("state", state)))] == 0
    assert not [name for name, _ in samples if name == "infless_store_bytes"]  # store off


def test_a_nodes_store_is_what_its_agent_last_reported() -> None:
    report = NodeReport(
        node="n1", host="h", cpu_ids=[0], memory_bytes=1, gpu_pct=[], workers=[],
        store_tensors=3, store_bytes=300, adopted_tensors=0, packages=1, agent_pid=1,
        store_tenant_bytes={"default": 200, "acme": 100},
    )  # fmt: skip
    assert node_status(report) == {
        "store": {"bytes": 300, "tensors": 3, "tenantBytes": {"default": 200, "acme": 100}}
    }
    assert node_status(None) == {}
