"""The `[cluster]` section: one machine (the default), or many through Ray.

`backend = "ray"` with `address` "ray://HOST:10001" (a Ray client address), "auto" (the Ray
cluster this machine is a node of) or "local:N" (N Ray nodes started on this machine, to
try it; `local_cpus` cores each). Leaf module: imports nothing of infless.
"""

from __future__ import annotations

import re

import msgspec

LOCAL = re.compile(r"^local:([1-9][0-9]?)$")


class ClusterConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    backend: str = "none"  # "none": this machine only; "ray": a Ray cluster's nodes
    address: str = "local:3"
    local_cpus: float = 1.0  # cores each node of a local:N cluster gets
    node_dir: str = "/tmp/infless-nodes"  # noqa: S108 - per node: packages shipped to it
    agent_timeout_s: float = 120.0  # a node agent's calls (a start included)
    watch_interval_s: float = 1.0  # how often the gateway reads which nodes are alive

    @property
    def enabled(self) -> bool:
        return self.backend == "ray"


def check_cluster(cfg: ClusterConfig) -> list[str]:
    problems = []
    if cfg.backend not in ("none", "ray"):
        problems.append(f'cluster.backend = {cfg.backend!r}: use "none" or "ray"')
    address = cfg.address
    if cfg.enabled and not (
        address == "auto" or address.startswith("ray://") or LOCAL.match(address)
    ):
        problems.append(
            f"cluster.address = {address!r}: use ray://HOST:PORT, auto, or local:N (N nodes "
            "on this machine)"
        )
    if cfg.local_cpus <= 0:
        problems.append(f"cluster.local_cpus = {cfg.local_cpus}: must be > 0")
    if cfg.agent_timeout_s <= 0 or cfg.watch_interval_s <= 0:
        problems.append("cluster.agent_timeout_s and cluster.watch_interval_s must be > 0")
    return problems
