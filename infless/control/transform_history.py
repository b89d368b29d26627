"""What a transformation decision was, and the history entries it leaves on a worker.

`TransformingStarter` (`control.transforms`) decides how each instance starts: transform an
idle worker, or start it normally. `Decision` records that choice: the candidates, their
predicted costs and the plan. `start_event` turns it, with what the start took, into one
entry of the worker's history (`/system/instances`). Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from infless.transform.choice import Candidate
from infless.transform.planner import TransformPlan
from infless.transform.records import StartPath
from infless.workers.protocol import StartBreakdown


@dataclass(frozen=True, slots=True)
class Decision:
    """How an instance starts: the chosen candidate among all, and the plan to apply."""

    chosen: Candidate
    candidates: tuple[Candidate, ...]
    model_key: str
    plan: TransformPlan | None = None
    structure_json: str = ""
    planning_ms: float = 0.0

    def describe(self) -> dict[str, object]:
        return {
            "path": self.chosen.path.value,
            "predictedMs": round(self.chosen.predicted_ms, 3),
            "planningMs": round(self.planning_ms, 3),
            "candidates": [
                {
                    "path": c.path.value,
                    "predictedMs": round(c.predicted_ms, 3),
                    "from": c.donor_function,
                }
                for c in self.candidates
            ],
            "plan": None if self.plan is None else self.plan.describe(),
        }


def start_event(decision: Decision | None, start: StartBreakdown) -> dict[str, object]:
    """One history entry: how an instance's worker started (or was transformed), what was
    predicted and what it took (warm-up excluded)."""
    if decision is None:
        return {"event": "started", "path": None, "tookMs": round(start_ms(start), 3)}
    event: dict[str, object] = {
        "event": "transformed" if decision.chosen.path is StartPath.TRANSFORM else "started",
        "from": decision.chosen.donor_function,
        "tookMs": round(start_ms(start), 3),
        **decision.describe(),
    }
    if start.metaops_ms:
        event["metaopsMs"] = {k: round(v, 3) for k, v in start.metaops_ms.items()}
    return event


def start_ms(start: StartBreakdown) -> float:
    """A start's cost, warm-up excluded: the transformation, or spawn + build + attach."""
    return start.transform_ms or (start.spawn_ms + start.build_ms + start.attach_ms)
