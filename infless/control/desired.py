"""A function's desired state: the instances it should have, and who decides them.

Owns `Owner`, `WantedInstance`, `DesiredState` and the transitions each writer makes. One
owner at a time per function, and only its writes change the set:

- `AUTOSCALER`: the planner rewrites the set on every tick (`planned`: its starts, stops and
  dispatch shares). A manual `scale` takes the function away from it for good.
- `MANUAL`: a person set the count (`scaled`); the autoscaler leaves the function alone.
- `COLDSTART`: the cold-start policy released the function to zero (`released`); the set
  stays empty until a prewarm or a request (`woken`) hands it back to the owner it had,
  with that owner's count (one instance for the autoscaler, which then plans the rest).

A writer that does not own the function is ignored: its transition returns the state as it
was. Every transition has the shape `(state, mint, *, what) -> state`.

The reconciler (`control.reconcile` on a server, the simulator in `sim`) only makes the
running instances match the set: it starts what is missing, drains what is no longer
wanted and replaces what died. New entries get their ids and uniform shape from an
`InstanceMint` the reconciler passes in. Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Protocol

from infless.scaling.view import (
    Action,
    Prewarm,
    ReleaseToZero,
    SetShare,
    StartInstance,
    StopInstance,
)
from infless.types import InstanceConfig


class Owner(enum.Enum):
    AUTOSCALER = "autoscaler"
    MANUAL = "manual"
    COLDSTART = "coldstart"


@dataclass(frozen=True, slots=True)
class WantedInstance:
    """One instance the function should have: its <b, c, g> and where it runs.

    `fixed_batch` False: the instance times its batch sizes up to `config.batch_size` when it
    starts and batches with the largest feasible one (a uniform instance, INFless's first).
    `share_rps` is its dispatch weight (None: its capacity b / t_exec, once measured);
    `exec_ms` the t_exec predicted when it was planned (None: measured at start).
    """

    instance_id: str
    config: InstanceConfig
    fixed_batch: bool = True
    share_rps: float | None = None
    server_id: str = "local"
    gpu_index: int | None = None
    exec_ms: float | None = None


def planned_instance(instance_id: str, start: StartInstance) -> WantedInstance:
    """The entry a planner's `StartInstance` asks for: its config, placement, share, t_exec."""
    return WantedInstance(
        instance_id=instance_id,
        config=start.config,
        fixed_batch=True,
        share_rps=start.r_up_rps,
        server_id=start.server_id,
        gpu_index=start.gpu_index,
        exec_ms=start.exec_ms,
    )


@dataclass(frozen=True, slots=True)
class DesiredState:
    owner: Owner
    instances: tuple[WantedInstance, ...] = ()
    resume_owner: Owner | None = None  # COLDSTART: who gets the function back on waking
    resume_count: int = 0  # ... and how many instances it had (manual counts come back)

    @property
    def count(self) -> int:
        return len(self.instances)

    def ids(self) -> frozenset[str]:
        return frozenset(w.instance_id for w in self.instances)


class InstanceMint(Protocol):
    """Makes new entries for one function: fresh ids, its uniform shape."""

    def uniform(self) -> WantedInstance: ...

    def planned(self, start: StartInstance) -> WantedInstance: ...

    def moved(self, entry: WantedInstance) -> WantedInstance: ...


def initial(state: DesiredState, mint: InstanceMint, *, count: int) -> DesiredState:
    """`count` uniform instances for the state's owner (a new function, a woken one)."""
    return DesiredState(state.owner, tuple(mint.uniform() for _ in range(max(0, count))))


def scaled(state: DesiredState, mint: InstanceMint, *, count: int) -> DesiredState:
    """A person set the count: the function is manual from now on. The oldest entries stay
    (their configurations too); the newest go first; missing ones are uniform."""
    count = max(0, count)
    kept = state.instances[:count]
    added = tuple(mint.uniform() for _ in range(count - len(kept)))
    return DesiredState(Owner.MANUAL, kept + added)


def planned(state: DesiredState, mint: InstanceMint, *, actions: Iterable[Action]) -> DesiredState:
    """The autoscaler's plan for one function, applied when the autoscaler owns it."""
    if state.owner is not Owner.AUTOSCALER:
        return state
    entries = list(state.instances)
    for action in actions:
        if isinstance(action, StopInstance):
            entries = [w for w in entries if w.instance_id != action.instance_id]
        elif isinstance(action, StartInstance):
            entries.append(mint.planned(action))
        elif isinstance(action, SetShare):
            entries = [
                replace(w, share_rps=action.share_rps) if w.instance_id == action.instance_id else w
                for w in entries
            ]
    return replace(state, instances=tuple(entries))


def released(state: DesiredState, mint: InstanceMint | None = None) -> DesiredState:
    """The cold-start policy released the function: no instance until it wakes."""
    if state.owner is Owner.COLDSTART:
        return state
    return DesiredState(Owner.COLDSTART, (), state.owner, max(1, state.count))


def woken(state: DesiredState, mint: InstanceMint) -> DesiredState:
    """A prewarm, or a request that found nothing running: at least one instance again.

    A released function goes back to the owner it had (a manual count comes back whole;
    the autoscaler gets one uniform instance and plans the rest); a function of another
    owner with an empty set gets one uniform instance and keeps its owner.
    """
    if state.owner is Owner.COLDSTART:
        owner = state.resume_owner or Owner.AUTOSCALER
        count = state.resume_count if owner is Owner.MANUAL else 1
        return initial(DesiredState(owner), mint, count=max(1, count))
    if state.instances:
        return state
    return replace(state, instances=(mint.uniform(),))


def relocated(state: DesiredState, mint: InstanceMint, servers: Collection[str]) -> DesiredState:
    """Entries on a server that is not among `servers` (it left) move to one that is: same
    shape, a new id. Any owner's: the platform corrects where an instance runs, not what."""
    entries = tuple(w if w.server_id in servers else mint.moved(w) for w in state.instances)
    return replace(state, instances=entries)


def applied(state: DesiredState, mint: InstanceMint, *, actions: Iterable[Action]) -> DesiredState:
    """Every action of a plan that concerns one function, each by its writer's rules."""
    scaling: list[Action] = []
    for action in actions:
        if isinstance(action, ReleaseToZero):
            state = released(state)
        elif isinstance(action, Prewarm):
            state = woken(state, mint)
        else:
            scaling.append(action)
    return planned(state, mint, actions=scaling) if scaling else state
