"""The soak's schedule (`bench.soak`): which disruption happens when, decided before the run.

Two kinds run side by side with the trace-replayed load: **worker kills** — every
`kill_every_s`, one worker of a loaded function (in turn) is SIGKILLed — and a **churn
cycle** of a function of its own, one step every `churn_step_s`: deploy it, scale it to
two instances, back to one, remove it, and again. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CHURN_STEPS = ("deploy", "scale-up", "scale-down", "remove")


@dataclass(frozen=True, slots=True)
class Event:
    at_s: float  # seconds after the load began
    kind: str  # "kill" or one of CHURN_STEPS
    function: str


def schedule(
    duration_s: float,
    kill_every_s: float,
    churn_step_s: float,
    loaded: Sequence[str],
    churn_function: str,
) -> list[Event]:
    """Every event of a run of `duration_s`, in time order; none in its last step (the
    run ends with everything deployed settled, a churn cycle cut short is removed)."""
    events: list[Event] = []
    if kill_every_s > 0 and loaded:
        count = int((duration_s - kill_every_s / 2) // kill_every_s)
        events += [
            Event((k + 1) * kill_every_s, "kill", loaded[k % len(loaded)]) for k in range(count)
        ]
    if churn_step_s > 0:
        count = int(duration_s // churn_step_s) - 1
        steps = [
            Event((k + 1) * churn_step_s, CHURN_STEPS[k % len(CHURN_STEPS)], churn_function)
            for k in range(count)
        ]
        if steps and steps[-1].kind != "remove":  # deployed at the end: removed half a step on
            steps.append(Event((count + 0.5) * churn_step_s, "remove", churn_function))
        events += steps
    return sorted(events, key=lambda e: e.at_s)
