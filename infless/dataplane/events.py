"""What the data plane tells the control plane: events, posted and never awaited.

A router asks for an instance when a request waits and nothing is starting. An instance
hands back its unfinished requests when its worker dies. An instance says when its batch
settings are due to be derived again from what it measured. Each is a small value posted
onto the pool's event queue (`control.loop`); posting is a `put_nowait`, so the request
path never waits for the control plane and never calls into it.
This module owns the event types and the sink protocol only. It must not import control.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from infless.dataplane.instance import Instance
    from infless.dataplane.request import Pending


@dataclass(frozen=True, slots=True)
class WakeRequested:
    """A request of `function` waits and no instance of it is starting."""

    function: str


@dataclass(frozen=True, slots=True)
class InstanceLost:
    """The instance's worker died: `orphans` (its batch in flight and its queue) go elsewhere."""

    instance: Instance
    orphans: list[Pending]


@dataclass(frozen=True, slots=True)
class RetuneDue:
    """The instance served another round of batches: `exec_ms` is what it measured, by
    batch size. The control loop decides the new batch timeout and queue bound."""

    instance: Instance
    exec_ms: dict[int, float]


InstanceEvent = InstanceLost | RetuneDue
DataPlaneEvent = WakeRequested | InstanceLost | RetuneDue


class WakeSink(Protocol):
    """Where a router posts its wake requests. `post` is synchronous and cheap."""

    def post(self, event: WakeRequested) -> None: ...


class InstanceSink(Protocol):
    """Where an instance posts its events. `post` is synchronous and cheap."""

    def post(self, event: InstanceEvent) -> None: ...
