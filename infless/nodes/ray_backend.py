"""The Ray backend: membership, one node agent per node, failure detection. Imports Ray.

`RayCluster` joins a Ray cluster (`ray://…` or `auto`), or starts one on this machine
(`local:N`: N nodes of `ray.cluster_utils.Cluster`, `cluster.local_cpus` cores each). Then:

- it places a `NodeAgent` actor on every node that offers the `infless_node` resource (what
  `infless node` and the local nodes advertise), pinned to that node and restarted by Ray if
  it dies;
- it watches `ray.nodes()`: a node that joins gets an agent and becomes a server; one that
  leaves is reported, so that the pool replaces its instances.

Only membership and the agents' calls go through Ray; requests go straight to the workers
over TCP. Only `nodes.backend` imports this module, and only when a cluster is configured.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from infless.config import Config
from infless.nodes.agent import NodeAgent, remove_node_files
from infless.nodes.config import LOCAL
from infless.nodes.remote import RemoteStarter

log = logging.getLogger(__name__)

RESOURCE = "infless_node"  # a node offering it runs an agent (`infless node` sets it)


class RayLink:
    """An agent actor's calls as coroutines (`nodes.remote.AgentLink`)."""

    def __init__(self, actor: Any, timeout_s: float) -> None:
        self.actor = actor
        self._timeout_s = timeout_s

    async def _call(self, method: str, *args: Any) -> Any:
        ref = getattr(self.actor, method).remote(*args)
        return await asyncio.wait_for(asyncio.wrap_future(ref.future()), self._timeout_s)

    async def has_package(self, digest: str) -> bool:
        return bool(await self._call("has_package", digest))

    async def put_package(self, digest: str, archive: bytes) -> None:
        await self._call("put_package", digest, archive)

    async def start(self, order_bytes: bytes) -> bytes:
        return bytes(await self._call("start", order_bytes))

    async def kill(self, worker_id: str) -> None:
        await self._call("kill", worker_id)

    async def release(self, worker_id: str) -> None:
        await self._call("release", worker_id)

    async def report(self) -> bytes:
        return bytes(await self._call("report"))

    async def close(self) -> None:
        await self._call("close")


@dataclass
class Node:
    node_id: str
    host: str
    cpus: int
    starter: RemoteStarter
    link: RayLink
    head: bool = False  # the node the gateway's Ray driver joined through


Joined = Callable[[Node], Awaitable[None]]
Left = Callable[[str, str], None]


class RayCluster:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._cfg = config.cluster
        self.local: Cluster | None = None
        self.nodes: dict[str, Node] = {}
        self._watcher: asyncio.Task[None] | None = None
        self._lost: set[str] = set()

    async def start(self) -> list[Node]:
        """Start or join the cluster and place an agent on every node that has none.
        Connecting blocks (Ray sets signal handlers: the main thread only), at startup."""
        self._connect()
        await self._refresh(None)
        return list(self.nodes.values())

    def _connect(self) -> None:
        address = self._cfg.address
        local = LOCAL.match(address)
        if local is not None:
            count, cpus = int(local.group(1)), self._cfg.local_cpus
            args: dict[str, Any] = {"num_cpus": cpus, "resources": {RESOURCE: 1}}
            # a node that dies is known in about 2 s (Ray's default: about 15 s)
            health = {"health_check_period_ms": 500, "health_check_failure_threshold": 4}
            self.local = Cluster(
                initialize_head=True, head_node_args={**args, "_system_config": health}
            )
            for _ in range(count - 1):
                self.local.add_node(**args)
            ray.init(address=self.local.address, log_to_driver=False, namespace="infless")
            self.local.wait_for_nodes()
        else:
            ray.init(address=address, log_to_driver=False, namespace="infless")

    def _alive(self) -> dict[str, dict[str, Any]]:
        nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        return {n["NodeID"]: n for n in nodes if n["Alive"] and n["Resources"].get(RESOURCE)}

    async def _refresh(self, joined: Joined | None) -> dict[str, dict[str, Any]]:
        alive = await asyncio.to_thread(self._alive)
        for index, (node_id, info) in enumerate(sorted(alive.items())):
            if node_id in self.nodes or node_id in self._lost:
                continue
            node = await self._place_agent(node_id, info, index)
            self.nodes[node_id] = node
            if joined is not None:
                await joined(node)
        return alive

    async def _place_agent(self, node_id: str, info: dict[str, Any], index: int) -> Node:
        cpus = max(1, math.ceil(float(info["Resources"].get("CPU", 1))))
        host = str(info["NodeManagerAddress"])
        cpu_ids = None
        if self.local is not None:  # nodes share this machine's cores: each its own
            cores = sorted(os.sched_getaffinity(0))
            cpu_ids = [cores[(index * cpus + j) % len(cores)] for j in range(cpus)]
        actor = (
            ray.remote(NodeAgent)
            .options(
                num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                max_restarts=-1,
                max_concurrency=64,
                name=f"infless-agent-{node_id[:12]}",
                get_if_exists=True,
            )
            .remote(
                msgspec.json.encode(self._config),
                node_id,
                host,
                cpu_ids,
                ephemeral=self.local is not None,
            )
        )
        link = RayLink(actor, self._cfg.agent_timeout_s)
        starter = RemoteStarter(link, node_id[:12])
        log.info("node %s (%s): agent placed, %d cores", node_id[:12], host, cpus)
        head = "node:__internal_head__" in info["Resources"]
        return Node(node_id, host, cpus, starter, link, head)

    def watch(self, joined: Joined, left: Left) -> None:
        """Read membership every `cluster.watch_interval_s`: call `joined` for a new node,
        `left` for one Ray no longer reports alive."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(self._cfg.watch_interval_s)
                try:
                    alive = await self._refresh(joined)
                except Exception:  # the GCS may be briefly unreachable: try again
                    log.exception("reading the Ray cluster's nodes failed")
                    continue
                for node_id in list(self.nodes):
                    if node_id not in alive:
                        self.nodes.pop(node_id)
                        self._lost.add(node_id)
                        left(node_id[:12], "Ray reports the node dead")
                for node in list(self.nodes.values()):
                    with contextlib.suppress(Exception):
                        await node.starter.refresh()

        self._watcher = asyncio.create_task(loop(), name="ray-membership")

    def remove_local_node(self, node_id: str) -> None:
        """Stop one node of a local cluster (to try failures): its processes die with it."""
        assert self.local is not None, "only a local cluster's nodes can be removed here"
        for node in self.local.list_all_nodes():  # type: ignore[no-untyped-call]
            if node.unique_id == node_id:
                self.local.remove_node(node, allow_graceful=False)
                return
        raise KeyError(node_id)

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        await asyncio.gather(*(n.link.close() for n in self.nodes.values()), return_exceptions=True)
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                ray.kill(node.link.actor, no_restart=True)
        await asyncio.to_thread(self._disconnect)

    def _disconnect(self) -> None:
        ray.shutdown()
        if self.local is not None:
            self.local.shutdown()  # type: ignore[no-untyped-call]
            for node_id in [*self.nodes, *self._lost]:  # a lost node's agent never closed
                remove_node_files(self._config, node_id)
