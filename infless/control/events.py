"""The events the pool's reconcile loop consumes, one type per thing that happened.

The data plane posts its own events (`dataplane.events`: a wake request, a lost instance,
a retune due). The pool posts a changed desired state and a server that left. Its start,
drain and death watchers post the others when their work finishes.

Every event is a frozen value; posting never awaits and never reconciles. Only the loop
(`control.reconcile`) acts on them, one at a time, in the order they came.
Gateway side: never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infless.control.desired import WantedInstance
from infless.control.functions import DeployedFunction
from infless.control.servers import Server
from infless.dataplane.events import InstanceLost, RetuneDue, WakeRequested
from infless.dataplane.instance import Instance
from infless.workers.starting import Booted


@dataclass(frozen=True, slots=True)
class DesiredChanged:
    """Reconcile `function`: its desired state changed, a start may be retried, or a
    server joined."""

    function: DeployedFunction


@dataclass(frozen=True, slots=True)
class ServerLeft:
    """`server` left (its node died): `reason` says why."""

    server: Server
    reason: str


@dataclass(frozen=True, slots=True)
class BootFinished:
    """The starter booted `instance`'s worker: it may serve."""

    function: DeployedFunction
    instance: Instance
    entry: WantedInstance
    booted: Booted


@dataclass(frozen=True, slots=True)
class BootFailed:
    """The starter could not boot `instance`: `error` says why."""

    function: DeployedFunction
    instance: Instance
    error: str


@dataclass(frozen=True, slots=True)
class BootCancelled:
    """`instance`'s start was cancelled (no longer wanted, its server left, shutdown)."""

    function: DeployedFunction
    instance: Instance


@dataclass(frozen=True, slots=True)
class WorkerExited:
    """The starter saw `instance`'s worker exit."""

    function: DeployedFunction
    instance: Instance


@dataclass(frozen=True, slots=True)
class DrainFinished:
    """`instance` answered what it queued and its worker was handed back; `kept`: its
    starter keeps the worker warm (its store holds go with it)."""

    function: DeployedFunction
    instance: Instance
    kept: bool


@dataclass(frozen=True, slots=True)
class InstanceEvent:
    """A data-plane event of one of `function`'s instances."""

    function: DeployedFunction
    event: InstanceLost | RetuneDue


Event = (
    DesiredChanged
    | ServerLeft
    | BootFinished
    | BootFailed
    | BootCancelled
    | WorkerExited
    | DrainFinished
    | InstanceEvent
    | WakeRequested
)


Post = Callable[[Event], None]
Changed = Callable[[DeployedFunction], None]  # told when a function's instances changed


class FunctionEvents:
    """The sink one function's instances post to: it tags their events with the function."""

    def __init__(self, post: Post, function: DeployedFunction) -> None:
        self._post = post
        self._function = function

    def post(self, event: InstanceLost | RetuneDue) -> None:
        self._post(InstanceEvent(function=self._function, event=event))
