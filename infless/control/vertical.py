"""`VerticalScaling`: the control shell of model-vertical scaling.

The autoscaler calls `adjust` in its planning pass, before Algorithm 1 plans. The shell
takes the catalogue's snapshot, runs the pure planner (`modelless.planner.plan_vertical`)
on it with the pool view and the demand, applies the returned decisions to the catalogue
(one of the catalogue's writers, all in the control shell), keeps the planner's memory for
the next pass, and hands back the view and demand Algorithm 1 plans with.

The server and the simulator both construct this class. It never reads a clock: the pool
view carries `now`.
"""

from __future__ import annotations

import logging

from infless.modelless.catalog import ModellessCatalog
from infless.modelless.config import ModellessConfig
from infless.modelless.decisions import AppDecision, PlannerMemory
from infless.modelless.planner import adjusted, plan_vertical
from infless.modelless.vertical import VerticalDecision
from infless.scaling.config import DemandConfig
from infless.scaling.demand import Demand
from infless.scaling.view import PoolView

log = logging.getLogger(__name__)


class VerticalScaling:
    """Runs the vertical planner each tick and applies its decisions to the catalogue."""

    def __init__(
        self, catalog: ModellessCatalog, cfg: ModellessConfig, demand_cfg: DemandConfig
    ) -> None:
        self._catalog = catalog
        self._cfg = cfg
        self._demand_cfg = demand_cfg
        self._memory = PlannerMemory()
        self.decisions: dict[str, VerticalDecision] = {}  # by model, the last pass's

    def adjust(self, view: PoolView, demand: Demand) -> tuple[PoolView, Demand]:
        """The view and demand Algorithm 1 should plan with (`modelless.planner`)."""
        if not self._catalog:
            return view, demand
        plan = plan_vertical(
            self._catalog.snapshot(),
            view,
            demand,
            memory=self._memory,
            cfg=self._cfg,
            demand_cfg=self._demand_cfg,
        )
        self._memory = plan.memory
        for decided in plan.apps:
            self._apply(decided)
        return adjusted(view, plan)

    def _apply(self, decided: AppDecision) -> None:
        """One model's decision into the catalogue, logged."""
        decision = decided.decision
        self.decisions[decided.model] = decision
        log.debug(
            "modelless: %s at %.1f rps: %s %s (hold %s)",
            decided.model,
            decided.load_rps,
            decision.move,
            decision.target,
            decision.hold,
        )
        entry = self._catalog.apply(decided)
        if decided.switched and entry is not None:
            capacity = entry.capacity
            log.info(
                "modelless: %s %s %s -> %s at %.1f rps, for %s (capacity factors %s, host "
                "%.2f, tail stretch %s, batch tail %s, measured ms by batch %s; options as "
                "instances x rps each: %s)",
                decided.model,
                decision.move,
                decision.previous,
                decision.target,
                decided.load_rps,
                decision.reason or "-",
                {k: round(v, 2) for k, v in capacity.own.items()},
                capacity.host,
                None if capacity.tail_ratio is None else round(capacity.tail_ratio, 2),
                None if capacity.batch_tail is None else round(capacity.batch_tail, 2),
                {
                    v: {b: round(ms, 1) for b, ms in t.ms_by_batch.items()}
                    for v, t in capacity.service.items()
                },
                ", ".join(f"{o.card.name} {o.instances} x {o.qps:.0f}" for o in decision.options)
                or "none",
            )
