"""One request at the front door (`Call`), as a state machine, and its samples' fan-out.

A call is OPEN when it arrives, BOUND once its function is found and counted, ADMITTED once
its samples are in the router, ANSWERED once its outcomes are in (or it was let go), and
CLOSED once the client has its answer. Each step is a method that moves the call on; a step
taken out of order raises `CallOrderError`, naming the step, the state and the order. Such
an error is a bug in the route that called it, never a client's fault.

`run_samples` submits a request's samples and awaits them in order. It owns no policy:
admission is the router's (`dataplane.router`). Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import enum
import math
from collections.abc import Sequence
from typing import Generic, NoReturn, TypeVar

from infless.dataplane.request import Outcome, Pending, Sample
from infless.dataplane.router import FunctionRouter
from infless.errors import GatewayTimeout, Overloaded

F = TypeVar("F")

ORDER = "open -> bind -> (check_room) -> run, or admit -> answered | abandoned -> close"


class CallState(enum.Enum):
    OPEN = "open"  # arrived: its function is not known yet
    BOUND = "bound"  # its function found, the call counted, its body length checked
    ADMITTED = "admitted"  # its samples are in the router
    ANSWERED = "answered"  # its outcomes are in, or nobody waits for them any more
    CLOSED = "closed"  # the client has its answer: nothing more happens to it


class CallOrderError(RuntimeError):
    """A front-door step taken out of order (a bug in the route that took it)."""


class Call(Generic[F]):
    """One request at the front door: when it came, for which function, what it got."""

    __slots__ = (
        "_function",
        "model",
        "name",
        "outcomes",
        "slo_held",
        "started_s",
        "state",
        "variant",
    )

    def __init__(self, name: str, started_s: float) -> None:
        self.name = name
        self.started_s = started_s
        self.model: str | None = None  # a model-less query: the model it named ...
        self.variant: str | None = None  # ... and the variant chosen for it
        self.slo_held = False  # admitted within the SLO, not a grown budget (model-less)
        self.outcomes: list[Outcome] | None = None
        self.state = CallState.OPEN
        self._function: F | None = None

    @property
    def function(self) -> F | None:
        """Its function, once bound (None while open, or when none was found)."""
        return self._function

    # Each step checks the state it needs in one comparison and moves on: the request path
    # takes four of them per call. Only a step out of order calls `_out_of_order`.

    def bind(self, function: F, name: str) -> None:
        """OPEN -> BOUND: the call goes to `function` (named `name`)."""
        if self.state is not CallState.OPEN:
            self._out_of_order("bind", CallState.OPEN)
        self._function, self.name = function, name
        self.state = CallState.BOUND

    def model_less(self, step: str) -> str:
        """The model a BOUND model-less call named (a step only such a call may take)."""
        if self.state is not CallState.BOUND:
            self._out_of_order(step, CallState.BOUND)
        if self.model is None:
            raise CallOrderError(
                f"call to {self.name!r}: {step} is for a model-less call only (call.model "
                "is None); bind an ordinary call once"
            )
        return self.model

    def rebind(self, function: F, name: str) -> None:
        """BOUND -> BOUND: a model-less call goes to another variant's function."""
        self.model_less("rebind")
        self._function, self.name = function, name

    def bound(self, step: str) -> F:
        """Its function, for a step that needs the call BOUND (and keeps it there)."""
        if self.state is not CallState.BOUND:
            self._out_of_order(step, CallState.BOUND)
        return self._bound_function(step)

    def admit(self) -> F:
        """BOUND -> ADMITTED: its samples go into the router."""
        if self.state is not CallState.BOUND:
            self._out_of_order("admit", CallState.BOUND)
        self.state = CallState.ADMITTED
        return self._bound_function("admit")

    def answer(self, step: str) -> F:
        """ADMITTED -> ANSWERED: its outcomes are in (`step` "answered"), or it is let go
        ("abandoned")."""
        if self.state is not CallState.ADMITTED:
            self._out_of_order(step, CallState.ADMITTED)
        self.state = CallState.ANSWERED
        return self._bound_function(step)

    def close(self) -> F | None:
        """Any state but CLOSED -> CLOSED; its function, if it was bound."""
        if self.state is CallState.CLOSED:
            raise CallOrderError(f"call to {self.name!r}: close is allowed once; ({ORDER})")
        self.state = CallState.CLOSED
        return self._function

    def _out_of_order(self, step: str, needed: CallState) -> NoReturn:
        raise CallOrderError(
            f"call to {self.name!r}: {step} needs the call {needed.value}, and it is "
            f"{self.state.value}; take the steps in order ({ORDER})"
        )

    def _bound_function(self, step: str) -> F:
        function = self._function
        if function is None:  # unreachable: bind sets it with the state
            raise CallOrderError(f"call to {self.name!r}: {step} needs a bound call ({ORDER})")
        return function


async def run_samples(
    router: FunctionRouter, samples: Sequence[Sample], timeout_s: float, budget_s: float = math.inf
) -> list[Outcome]:
    """Submit each sample, await all of them, answer in order (or raise the first failure).

    When every queue is full, the samples already submitted are awaited before the next go
    in; `Overloaded` reaches the caller only when none of its samples is in flight.
    """
    pendings: list[Pending] = []
    try:
        async with asyncio.timeout(timeout_s):
            if len(samples) == 1:  # the common case, kept short
                pendings.append(router.submit(samples[0], budget_s))
                return [await pendings[0].future]
            for sample in samples:
                while True:
                    try:
                        pendings.append(router.submit(sample, budget_s))
                        break
                    except Overloaded:
                        unfinished = [p.future for p in pendings if not p.future.done()]
                        if not unfinished:
                            raise
                        await asyncio.wait(unfinished, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.wait([p.future for p in pendings])
    except TimeoutError:
        raise GatewayTimeout(
            f"function {router.name!r} did not answer {len(samples)} sample(s) within "
            f"{timeout_s:g} s"
        ) from None
    finally:
        settle(pendings, router)
    for pending in pendings:
        error = pending.future.exception()
        if error is not None:
            raise error
    return [p.future.result() for p in pendings]


def settle(pendings: Sequence[Pending], router: FunctionRouter) -> None:
    """Leave nothing behind: unanswered samples are cancelled, failures marked retrieved."""
    for pending in pendings:
        future = pending.future
        if not future.done():
            router.forget_waiting(pending)
            future.cancel()
        elif not future.cancelled():
            future.exception()  # retrieved: no "exception was never retrieved" noise
