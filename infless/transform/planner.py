"""Transformation planning (Optimus §4.4, Module 2⁺): group-based matching in O(n + m).

Operations of the source and destination models are grouped by type (`Op.kind`) and matched
in order within each group. A matched pair becomes a Replace (same properties and tensor
shapes: only the weights change) or a Reshape (same type, other properties). Unmatched
source operations are removed (Reduce) and unmatched destination operations created (Add).
One Edge step rebuilds the data flow last.

Each step's cost comes from the profiled `MetaOpCosts`. Tensors the source already holds
with the destination's content (a shared backbone: the same store file) are not mapped
again, and an operation none of whose tensors change costs only its fixed part.

A policy: `plan_transformation` is pure (no I/O, no clock, no torch) and produces the steps
as `transform.records.PlanStep`, the records the worker protocol carries. `PlanCache` keeps
plans per (source, destination) pair, as Optimus caches them when a model registers.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass

from infless.transform.costs import MetaOpCosts
from infless.transform.records import PlanStep
from infless.transform.structure import ModelStructure, Op

SameTensor = Callable[[str, str], bool]  # (source state name, destination state name)


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformPlan:
    """A plan from one model to another: its steps, predicted cost and what it maps.

    `feasible` False (with `reason`): no plan exists and `predicted_ms` is infinite.
    """

    source_key: str
    dest_key: str
    steps: tuple[PlanStep, ...]
    predicted_ms: float
    feasible: bool = True
    reason: str = ""
    mapped_bytes: int = 0  # destination bytes mapped from the store
    kept_bytes: int = 0  # destination bytes the source already held (shared tensors)

    def counts(self) -> dict[str, int]:
        result = dict.fromkeys(("replace", "reshape", "reduce", "add", "edge"), 0)
        for step in self.steps:
            result[step.op] += 1
        return result

    def describe(self) -> dict[str, object]:
        return {
            "from": self.source_key,
            "to": self.dest_key,
            "feasible": self.feasible,
            "reason": self.reason or None,
            "predictedMs": round(self.predicted_ms, 3),
            "steps": self.counts(),
            "mappedBytes": self.mapped_bytes,
            "keptBytes": self.kept_bytes,
        }


def infeasible(source: ModelStructure, dest: ModelStructure, reason: str) -> TransformPlan:
    return TransformPlan(
        source_key=source.model_key,
        dest_key=dest.model_key,
        steps=(),
        predicted_ms=float("inf"),
        feasible=False,
        reason=reason,
    )


def _changed_tensors(src: Op, dst: Op, same: SameTensor | None) -> tuple[list[str], int, int]:
    """The destination tensors to map (those the source does not already hold), their bytes,
    and the bytes kept."""
    if same is None or not src.same_shape(dst):
        return [t.name for t in dst.tensors], dst.nbytes, 0
    changed, mapped, kept = [], 0, 0
    for tensor, s_name, d_name in zip(
        dst.tensors, src.state_names(), dst.state_names(), strict=True
    ):
        if same(s_name, d_name):
            kept += tensor.nbytes
        else:
            changed.append(tensor.name)
            mapped += tensor.nbytes
    return changed, mapped, kept


def plan_transformation(
    source: ModelStructure,
    dest: ModelStructure,
    costs: MetaOpCosts,
    same_tensor: SameTensor | None = None,
) -> TransformPlan:
    """The group-based plan from `source` to `dest` (Optimus Module 2⁺), with its cost."""
    for structure in (source, dest):
        if not structure.transformable:
            return infeasible(source, dest, f"{structure.model_key}: {structure.reason}")
    groups: dict[str, deque[Op]] = defaultdict(deque)
    for op in source.ops:  # round one: group the source's operations by type
        groups[op.kind].append(op)
    steps: list[PlanStep] = []
    total_us, mapped_bytes, kept_bytes = 0.0, 0, 0
    for dst in dest.ops:  # round two: match in order within each group
        group = groups.get(dst.kind)
        src = group.popleft() if group else None
        if src is not None and src.same_shape(dst):
            names, mapped, kept = _changed_tensors(src, dst, same_tensor)
            cost = costs.us("replace", dst.kind, len(names), mapped)
            step = PlanStep(
                op="replace", source=src.target, target=dst.target, tensors=names, cost_us=cost
            )
        elif src is not None and src.props is not None and dst.props is not None:
            names, mapped, kept = [t.name for t in dst.tensors], dst.nbytes, 0
            cost = costs.us("reshape", dst.kind, len(names), mapped)
            step = PlanStep(
                op="reshape", source=src.target, target=dst.target, tensors=names, cost_us=cost
            )
        elif dst.props is not None:
            if src is not None:  # matched but not reshapeable: remove it, create anew
                groups[dst.kind].appendleft(src)
            names, mapped, kept = [t.name for t in dst.tensors], dst.nbytes, 0
            cost = costs.us("add", dst.kind, len(names), mapped)
            step = PlanStep(op="add", target=dst.target, tensors=names, cost_us=cost)
        else:
            reason = (
                f"operation {dst.target!r} ({dst.short_kind}) has properties that cannot be "
                "read: it can be neither reshaped nor created"
            )
            return infeasible(source, dest, reason)
        steps.append(step)
        total_us += cost
        mapped_bytes += mapped
        kept_bytes += kept
    for group in groups.values():  # what no destination operation took
        for src in group:
            cost = costs.us("reduce", src.kind)
            steps.append(PlanStep(op="reduce", source=src.target, cost_us=cost))
            total_us += cost
    edge_us = costs.edge_us(len(dest.nodes))
    steps.append(PlanStep(op="edge", cost_us=edge_us))
    total_us += edge_us
    return TransformPlan(
        source_key=source.model_key,
        dest_key=dest.model_key,
        steps=tuple(steps),
        predicted_ms=total_us / 1000.0,
        mapped_bytes=mapped_bytes,
        kept_bytes=kept_bytes,
    )


def build_cost_ms(dest: ModelStructure, costs: MetaOpCosts) -> float:
    """What building `dest` from nothing costs in the same terms: every operation added,
    every tensor mapped, the graph built (a normal start's build + attach, predicted)."""
    total = sum(costs.us("add", op.kind, len(op.tensors), op.nbytes) for op in dest.ops)
    return (total + costs.edge_us(len(dest.nodes))) / 1000.0


class PlanCache:
    """Plans per (source, destination) key pair; a bounded dict, oldest entries go first."""

    def __init__(self, capacity: int = 1024) -> None:
        self._capacity = capacity
        self._plans: dict[tuple[str, str], TransformPlan] = {}

    def get(self, key: tuple[str, str]) -> TransformPlan | None:
        return self._plans.get(key)

    def put(self, key: tuple[str, str], plan: TransformPlan) -> None:
        if key not in self._plans and len(self._plans) >= self._capacity:
            del self._plans[next(iter(self._plans))]
        self._plans[key] = plan

    def __len__(self) -> int:
        return len(self._plans)
