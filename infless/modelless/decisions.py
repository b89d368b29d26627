"""What one pass of model-vertical scaling decides, as frozen records.

`plan_vertical` (`modelless.planner`) returns a `VerticalPlan`. It holds one `AppDecision`
per model (what the catalogue's entry becomes), the demand Algorithm 1 plans with, the
variant functions let go or frozen at a size, and the planner's memory for its next pass.
The control shell (`control.vertical`) applies the plan; nothing here writes anything.
No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from infless.modelless.vertical import Hold, VerticalDecision
from infless.scaling.demand import DemandState


@dataclass(frozen=True, slots=True, kw_only=True)
class AppDecision:
    """One model's outcome of a pass: what its catalogue entry becomes."""

    model: str
    decision: VerticalDecision  # the move `vertical.decide` made, with its options
    target: str | None  # the variant that carries the load (None: no variant)
    overflow: str | None  # the variant kept warm beside the target (None: none)
    released: frozenset[str] | None  # variants selection sends nothing new (None: as before)
    switched: bool  # an upgrade or a downgrade: counted in the entry's switches
    load_rps: float  # the load the move was decided for


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannerMemory:
    """What the planner carries from one pass to the next."""

    counts: DemandState = field(default_factory=DemandState)  # arrival-rate estimator
    seen: Mapping[str, int] = field(default_factory=dict)  # counters at the last pass
    holds: Mapping[str, Hold] = field(default_factory=dict)  # by model: moves waiting
    # by model: the move not landed yet, as (new target, decided at)
    pending: Mapping[str, tuple[str, float]] = field(default_factory=dict)
    last_s: float | None = None  # when the last pass ran
    # instances of let-go variants whose cores were counted free in a pass (`freed`), for
    # as long as they live: each one's core is handed out once
    handed: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True, kw_only=True)
class VerticalPlan:
    """One pass's decisions for every model whose variants are in the pool view."""

    apps: tuple[AppDecision, ...]
    rates_rps: Mapping[str, float]  # the demand Algorithm 1 plans with, by function
    cold: frozenset[str]  # variant functions no longer kept warm (retired)
    frozen: Mapping[str, int]  # variant functions serving on, at most this many instances
    # overflow variants' functions: their one warm instance is standby capacity
    standby: frozenset[str]
    # instances whose cores count as free in this pass: those of variants let go with no
    # demand left, which Algorithm 1 stops in this pass (`planner.adjusted`)
    freed: frozenset[str]
    memory: PlannerMemory  # for the next pass
