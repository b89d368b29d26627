"""The gateway's listening socket as a whole: `FastPath`, the protocol factory given to
`loop.create_server`, with its open connections and their bounds (`gateway.connections`),
the one sweep that answers 504 to invokes waiting past `gateway.request_timeout_s` and 408
to requests arriving too slowly and closes idle connections (one timer for all of them,
not one per request), the canned 429s decided at a request's headers, and the drain at
shutdown. One connection's protocol is `gateway.fastpath`'s. Gateway side: never imports
torch.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from infless.clock import Clock
from infless.gateway.auth import AuthSettings
from infless.gateway.connections import ConnectionLimits, ConnectionTable
from infless.gateway.fastpath import Connection
from infless.gateway.http1 import encode_answer
from infless.gateway.invoke import Invoker, error_answer

SWEEP_S = 0.5  # how often connections are checked against their deadlines
MAX_CANNED = 4096  # canned refusals kept (per function, Retry-After and keep-alive)


@dataclass(frozen=True, slots=True)
class FastPathConfig:
    upstream: str  # the aiohttp application's unix socket
    max_body_bytes: int
    auth: AuthSettings = field(default_factory=AuthSettings)
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)


class FastPath:
    """The protocol factory for the listening socket (see the module's docstring)."""

    def __init__(self, invoker: Invoker, config: FastPathConfig, clock: Clock) -> None:
        self.invoker = invoker
        self.config = config
        self.clock = clock
        self.table: ConnectionTable[Connection] = ConnectionTable(config.limits)
        self.draining = False
        self._sweeper: asyncio.Task[None] | None = None
        self._refusals: dict[tuple[str, str, bool], bytes] = {}

    def __call__(self) -> Connection:
        return Connection(self)

    @property
    def connections(self) -> set[Connection]:
        return self.table.open

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="fastpath")

    async def _sweep(self) -> None:
        timeout_s = self.invoker.frontend.timeout_s
        while True:
            await self.clock.sleep_until(self.clock.now() + SWEEP_S)
            now_s = self.clock.now()
            for connection in list(self.connections):
                connection.expire_before(now_s - timeout_s)
            expired = self.table.expired(now_s)
            for connection in expired.slow:
                connection.too_slow()
            for connection in expired.idle:
                connection.close_when_idle()

    def refusal(self, name: str, keep_alive: bool) -> bytes | None:
        """The canned 429 for a call to `name` refused before its body is read, or None.
        Answers differ only in Retry-After, whole seconds: they are encoded once each."""
        refused = self.invoker.frontend.refuse_early(name)
        if refused is None:
            return None
        answer = error_answer(refused)
        key = (name, answer.headers.get("Retry-After", ""), keep_alive)
        canned = self._refusals.get(key)
        if canned is None:
            if len(self._refusals) > MAX_CANNED:
                self._refusals.clear()
            canned = self._refusals[key] = encode_answer(answer, keep_alive)
        return canned

    def drain(self) -> None:
        """The gateway is stopping: what is in flight is answered (then its connection
        closes); every request not yet begun gets 503 `draining`; idle connections close."""
        self.draining = True
        for connection in list(self.connections):
            connection.close_when_idle()

    def close_idle(self) -> None:
        """Close every connection with nothing in flight (the gateway has stopped)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        for connection in list(self.connections):
            connection.close_when_idle()
