"""What each meta-operator costs (Optimus §4.4, Module 1), per operation type and size.

Optimus observes that Replace costs in proportion to the destination operation's weights,
Add depends on the operation's type and properties, Reshape on the magnitude of the change,
Reduce is constant and Edge negligible. Here every meta-operator has a `LinearCost` per
operation type (`kind`, a module class path; "*" is the fallback for types never profiled):
a fixed part per operation, a part per tensor it maps and a part per MiB those tensors hold.
Edge costs per graph node (rebuilding the graph module's code is what it does).

`MetaOpCosts.default()` holds values measured on the development machine; `infless transform
profile` measures them on this one (`infless.transform.profile`) into the profile database,
and the gateway reads them from there. Pure: no I/O, no clock, no torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

MetaOp = Literal["replace", "reshape", "reduce", "add", "edge"]
META_OPS: tuple[MetaOp, ...] = ("replace", "reshape", "reduce", "add", "edge")
ANY_KIND = "*"
_MIB = 1024.0 * 1024.0


@dataclass(frozen=True, slots=True)
class LinearCost:
    """fixed_us + per_tensor_us × tensors + per_mib_us × MiB."""

    fixed_us: float = 0.0
    per_tensor_us: float = 0.0
    per_mib_us: float = 0.0

    def us(self, tensors: int = 0, nbytes: int = 0) -> float:
        return self.fixed_us + self.per_tensor_us * tensors + self.per_mib_us * nbytes / _MIB


# Measured on the development machine (2 cores, torch 2.13 CPU) by `infless transform profile`;
# the fallbacks when this machine has no profile yet.
_DEFAULTS: dict[MetaOp, dict[str, LinearCost]] = {
    "replace": {ANY_KIND: LinearCost(4.0, 28.0, 0.5)},
    "reshape": {ANY_KIND: LinearCost(12.0, 28.0, 0.5)},
    "reduce": {ANY_KIND: LinearCost(2.0)},
    "add": {
        ANY_KIND: LinearCost(20.0, 28.0, 0.5),
        "torch.nn.modules.conv.Conv2d": LinearCost(45.0, 28.0, 0.5),
        "torch.nn.modules.linear.Linear": LinearCost(35.0, 28.0, 0.5),
        "torch.nn.modules.batchnorm.BatchNorm2d": LinearCost(40.0, 28.0, 0.5),
    },
    "edge": {ANY_KIND: LinearCost(150.0, 0.0, 0.0)},  # + per_node_us × nodes
}
_DEFAULT_EDGE_PER_NODE_US = 22.0
_NO_COSTS: Mapping[str, LinearCost] = {}


@dataclass(frozen=True, slots=True)
class MetaOpCosts:
    table: Mapping[MetaOp, Mapping[str, LinearCost]]
    edge_per_node_us: float = _DEFAULT_EDGE_PER_NODE_US
    source: str = "default"  # "default" or "profiled <when>"

    @staticmethod
    def default() -> MetaOpCosts:
        return MetaOpCosts(_DEFAULTS, _DEFAULT_EDGE_PER_NODE_US, "default")

    def cost(self, meta_op: MetaOp, kind: str) -> LinearCost:
        by_kind = self.table.get(meta_op, _NO_COSTS)
        found = by_kind.get(kind) or by_kind.get(ANY_KIND) or _DEFAULTS[meta_op].get(kind)
        return found or _DEFAULTS[meta_op][ANY_KIND]

    def us(self, meta_op: MetaOp, kind: str, tensors: int = 0, nbytes: int = 0) -> float:
        return self.cost(meta_op, kind).us(tensors, nbytes)

    def edge_us(self, nodes: int) -> float:
        return self.cost("edge", ANY_KIND).fixed_us + self.edge_per_node_us * nodes

    def merged(self, measured: Mapping[tuple[MetaOp, str], LinearCost], source: str) -> MetaOpCosts:
        """These costs with `measured` entries taking precedence."""
        table: dict[MetaOp, dict[str, LinearCost]] = {m: dict(v) for m, v in self.table.items()}
        edge_per_node = self.edge_per_node_us
        for (meta_op, kind), cost in measured.items():
            if meta_op == "edge":
                edge_per_node = cost.per_tensor_us  # per node, stored in the per-item slot
                table.setdefault("edge", {})[ANY_KIND] = LinearCost(cost.fixed_us)
            else:
                table.setdefault(meta_op, {})[kind] = cost
        return MetaOpCosts(table, edge_per_node, source)

    def to_json(self) -> str:
        return json.dumps(
            {
                "source": self.source,
                "edge_per_node_us": self.edge_per_node_us,
                "table": {
                    m: {k: [c.fixed_us, c.per_tensor_us, c.per_mib_us] for k, c in v.items()}
                    for m, v in self.table.items()
                },
            }
        )
