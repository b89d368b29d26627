"""The records a transformation shares between the gateway and the worker.

`PlanStep` is one meta-operator of a plan. The planner (`transform.planner`, a policy)
produces steps; the worker protocol carries them (`workers.protocol.TransformModel.steps`);
the worker executes them (`workers.metaops`). `StartPath` names the ways an instance can
start; the choice (`transform.choice`) ranks them and the starters report which they use.

Plain data, shared by all of those sides, so it sits beneath all of them: it imports
nothing of infless, no torch and no numpy, and it decides nothing.
"""

from __future__ import annotations

import enum

import msgspec


class PlanStep(msgspec.Struct, array_like=True, frozen=True, kw_only=True):
    """One meta-operator of a transformation plan.

    `source` and `target` are operation names (qualified module names) in the source and
    destination models. `tensors` are the destination operation's tensors (local names)
    to map from the store. `cost_us` is the step's predicted cost.
    """

    op: str  # "replace" | "reshape" | "reduce" | "add" | "edge"
    source: str = ""
    target: str = ""
    tensors: list[str] = []
    cost_us: float = 0.0


class StartPath(enum.Enum):
    """A way to start an instance: transform an idle worker, or start one normally."""

    TRANSFORM = "transform"
    TEMPLATE = "template"
    ZYGOTE = "zygote"
    FRESH = "fresh"
