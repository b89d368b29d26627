"""The cluster backend the gateway drives, opened only when `[cluster]` asks for one.

`attach_cluster` starts (or joins) the cluster, adds every node to the pool as a `Server`,
and keeps the pool's servers in step with the cluster's membership. Ray is imported here,
lazily, and nowhere else on the gateway's path: `infless serve` without a cluster never
imports it. Gateway side: never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from infless.cluster.cpus import CpuAllocator
from infless.control.servers import Server
from infless.errors import ConfigError

if TYPE_CHECKING:
    from infless.config import Config
    from infless.control.pool import WorkerPool
    from infless.nodes.ray_backend import Node
    from infless.nodes.wire import NodeReport


class ClusterBackend(Protocol):
    async def close(self) -> None: ...


def node_status(report: NodeReport | None) -> dict[str, object]:
    """A node's live facts for `/system/servers` and the board: its store, as its agent
    last reported it (every `cluster.watch_interval_s`)."""
    if report is None:
        return {}
    tenants = dict(report.store_tenant_bytes)
    return {
        "store": {
            "bytes": report.store_bytes,
            "tensors": report.store_tensors,
            "tenantBytes": tenants,
        },
    }


async def server_of(node: Node) -> Server:
    """A node as the pool sees it: its agent's starter, its own cores and capacity (as its
    agent reports them)."""
    report = await node.starter.refresh()
    return Server(
        server_id=node.starter.node,
        starter=node.starter,
        allocator=CpuAllocator(tuple(report.cpu_ids)),
        capacity_cpus=node.cpus,
        gpu_pct=tuple(report.gpu_pct),
        describe={"node": node.node_id, "host": node.host, "backend": "ray", "head": node.head},
        affinity=node.starter.affinities,
        status=lambda: node_status(node.starter.report),
    )


async def attach_cluster(config: Config, pool: WorkerPool) -> ClusterBackend:
    """Start or join the configured cluster and give the pool its nodes as servers."""
    try:
        from infless.nodes.ray_backend import RayCluster
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"cluster.backend = ray needs Ray ({exc}): pip install 'infless[cluster]' "
            "-c scripts/constraints.txt"
        ) from exc

    cluster = RayCluster(config)
    try:
        for node in await cluster.start():
            await pool.add_server(await server_of(node))
    except BaseException:
        await cluster.close()
        raise

    async def joined(node: Node) -> None:
        await pool.add_server(await server_of(node))

    cluster.watch(joined, pool.remove_server)
    return cluster
