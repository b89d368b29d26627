"""The listening socket's open connections, and the bounds that keep them from taking the
gateway: how long a request may take to arrive, how long a connection may sit idle, and
how many may be open at once.

A slow-loris client (a request trickled a byte at a time) or thousands of idle keep-alive
connections must cost the gateway neither its descriptors nor the clients that do send
requests. Every connection is in at most one of two orders: **reading** (a request begun,
not complete: it has `read_timeout_s` from its first byte, then gets 408) and **idle**
(nothing begun, nothing owed: closed after `idle_timeout_s`). A connection owed an answer
is in neither and is never cut (the request timeout bounds that wait). At
`max_connections`, a new connection takes the place of the one idle longest, else of the
one that has been reading longest; when every connection is owed an answer, the new one
is refused. Both orders are insertion-ordered, so the sweep and the choice cost what they
remove, not the number of connections.

Pure bookkeeping: no I/O, no clock (times are passed in); the fast path acts on what it
says. Gateway side: never imports torch.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

C = TypeVar("C", bound=Hashable)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    read_timeout_s: float = 30.0  # from a request's first byte to its last
    idle_timeout_s: float = 75.0  # a keep-alive connection with nothing begun
    max_connections: int = 4096


@dataclass(frozen=True, slots=True)
class Admission(Generic[C]):
    """What opening one more connection takes: the connection it replaces, if any, or a
    refusal when every open connection is owed an answer."""

    replaces: C | None = None
    refused: bool = False


@dataclass(slots=True)
class Expired(Generic[C]):
    slow: list[C] = field(default_factory=list)  # a request still arriving after its time
    idle: list[C] = field(default_factory=list)


class ConnectionTable(Generic[C]):
    """The open connections by phase (see the module's docstring)."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open: set[C] = set()
        self._idle: OrderedDict[C, float] = OrderedDict()  # since when, oldest first
        self._reading: OrderedDict[C, float] = OrderedDict()  # request began, oldest first

    def __len__(self) -> int:
        return len(self.open)

    def admit(self, connection: C, now_s: float) -> Admission[C]:
        """A connection opened (idle from now). At the limit: whom it replaces, or refused
        (then it is not counted)."""
        admission: Admission[C] = Admission()
        if len(self.open) >= self.limits.max_connections:
            victim = next(iter(self._idle), None)
            if victim is None:
                victim = next(iter(self._reading), None)
            if victim is None:
                return Admission(refused=True)
            self.closed(victim)
            admission = Admission(replaces=victim)
        self.open.add(connection)
        self._idle[connection] = now_s
        return admission

    def idle(self, connection: C, now_s: float) -> None:
        """Nothing begun, nothing owed (after its last answer)."""
        if connection in self.open and connection not in self._reading:
            self._idle.pop(connection, None)
            self._idle[connection] = now_s

    def reading(self, connection: C, now_s: float) -> None:
        """A request's first byte came."""
        self._idle.pop(connection, None)
        if connection in self.open:
            self._reading[connection] = now_s

    def owed(self, connection: C) -> None:
        """A request arrived whole: the gateway owes it an answer."""
        self._idle.pop(connection, None)
        self._reading.pop(connection, None)

    def closed(self, connection: C) -> None:
        self.open.discard(connection)
        self._idle.pop(connection, None)
        self._reading.pop(connection, None)

    def expired(self, now_s: float) -> Expired[C]:
        """The connections past their time, taken out of their order (the caller closes
        them: slow ones after a 408)."""
        found: Expired[C] = Expired()
        for order, timeout_s, out in (
            (self._reading, self.limits.read_timeout_s, found.slow),
            (self._idle, self.limits.idle_timeout_s, found.idle),
        ):
            while order:
                connection, since_s = next(iter(order.items()))
                if now_s - since_s < timeout_s:
                    break
                del order[connection]
                out.append(connection)
        return found
