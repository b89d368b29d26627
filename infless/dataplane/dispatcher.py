"""Batch-aware dispatch: route each request to an instance in proportion to its rate share.

Each instance i has a rate share r_i (INFless §3.2; until the autoscaler assigns shares it
is the instance's capacity b / t_exec). Smooth weighted round-robin makes every instance's
realised rate follow its share, and an instance whose queue is full is skipped, so a full
batch is never overfilled. Pure bookkeeping: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class Routable(Protocol):
    @property
    def instance_id(self) -> str: ...

    @property
    def share_rps(self) -> float: ...

    @property
    def accepting(self) -> bool: ...


R = TypeVar("R", bound=Routable)


class RateShareDispatcher:
    """Smooth weighted round-robin over the instances that currently accept requests."""

    def __init__(self) -> None:
        self._credit: dict[str, float] = {}

    def choose(self, instances: Sequence[R]) -> R | None:
        best: R | None = None
        best_credit = 0.0
        total = 0.0
        credit = self._credit
        for instance in instances:
            if not instance.accepting:
                continue
            weight = max(instance.share_rps, 1e-9)
            total += weight
            value = credit.get(instance.instance_id, 0.0) + weight
            credit[instance.instance_id] = value
            if best is None or value > best_credit:
                best, best_credit = instance, value
        if best is not None:
            credit[best.instance_id] = best_credit - total
        return best

    def forget(self, instance_id: str) -> None:
        self._credit.pop(instance_id, None)
