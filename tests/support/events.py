"""A data-plane event sink for tests: it records what routers and instances post.

`then` (optional) runs on each event as it is posted: a test's stand-in for the control
loop (for example, rerouting a lost instance's requests at once).
"""

from __future__ import annotations

from collections.abc import Callable

from infless.dataplane.events import DataPlaneEvent, WakeRequested


class EventLog:
    def __init__(self, then: Callable[[DataPlaneEvent], None] | None = None) -> None:
        self.events: list[DataPlaneEvent] = []
        self._then = then

    def post(self, event: DataPlaneEvent) -> None:
        self.events.append(event)
        if self._then is not None:
            self._then(event)

    @property
    def wakes(self) -> list[str]:
        """The functions whose routers asked for an instance, in order."""
        return [e.function for e in self.events if isinstance(e, WakeRequested)]
