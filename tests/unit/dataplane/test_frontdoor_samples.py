"""The front door's fan-out of a multi-sample (V2) request: samples go into the router one by
one, wait when every queue is full, come back in order; a failed sample fails the request
and leaves no unretrieved exception behind."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import cast

import numpy as np
import pytest

from infless.dataplane.calls import run_samples
from infless.dataplane.request import Array, Outcome, Pending
from infless.dataplane.router import FunctionRouter
from infless.errors import GatewayTimeout, InferenceFailed, Overloaded
from infless.gateway.v2.infer import stack_outputs


class FakeRouter:
    """Accepts at most `capacity` unanswered rows; the test answers them."""

    def __init__(self, capacity: int, react: Callable[[int, Pending], None] | None = None) -> None:
        self.name = "fake"
        self.react = react
        self.capacity = capacity
        self.pending: list[Pending] = []
        self.forgotten: list[Pending] = []
        self.overloads = 0

    def submit(self, inputs: dict[str, Array], budget_s: float = math.inf) -> Pending:
        if sum(not p.future.done() for p in self.pending) >= self.capacity:
            self.overloads += 1
            raise Overloaded("full", retry_after_s=1.0)
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        pending = Pending(inputs=inputs, arrival_s=0.0, future=future)
        self.pending.append(pending)
        if self.react is not None:
            asyncio.get_running_loop().call_soon(self.react, len(self.pending) - 1, pending)
        return pending

    def forget_waiting(self, pending: Pending) -> None:
        self.forgotten.append(pending)


def _answer(pending: Pending) -> None:
    assert isinstance(pending.inputs, dict)
    row = pending.inputs["x"]
    pending.resolve(Outcome({"y": row * 2}, "fake-000000", 1, 0.0, 1.0, 0.0))


async def _answer_everything(router: FakeRouter, stop: asyncio.Event) -> None:
    while not stop.is_set():
        for pending in list(router.pending):
            if not pending.future.done():
                _answer(pending)
        await asyncio.sleep(0)


def _rows(arrays: dict[str, np.ndarray], count: int) -> list[dict[str, Array]]:
    return [{name: a[row] for name, a in arrays.items()} for row in range(count)]


def _router(capacity: int) -> tuple[FakeRouter, FunctionRouter]:
    fake = FakeRouter(capacity)
    return fake, cast(FunctionRouter, fake)


async def test_rows_wait_for_room_and_come_back_in_order() -> None:
    fake, router = _router(capacity=2)
    stop = asyncio.Event()
    answering = asyncio.create_task(_answer_everything(fake, stop))
    arrays = {"x": np.arange(7, dtype=np.float32).reshape(7, 1)}
    outcomes = await run_samples(router, _rows(arrays, 7), timeout_s=5.0)
    stop.set()
    await answering
    assert len(fake.pending) == 7
    assert fake.overloads > 0  # it had to wait for room at least once
    np.testing.assert_array_equal(stack_outputs("y", outcomes), arrays["x"] * 2)


async def test_overloaded_with_nothing_in_flight_is_a_429() -> None:
    _, router = _router(capacity=0)
    with pytest.raises(Overloaded):
        await run_samples(router, _rows({"x": np.zeros((2, 1))}, 2), timeout_s=5.0)


async def test_a_failed_row_fails_the_request_and_every_error_is_retrieved() -> None:
    def react(index: int, pending: Pending) -> None:
        if index == 0:
            _answer(pending)
        else:
            pending.fail(InferenceFailed(f"model raised on row {index}"))

    fake = FakeRouter(10, react)
    router = cast(FunctionRouter, fake)
    with pytest.raises(InferenceFailed, match="row 1"):
        await run_samples(router, _rows({"x": np.zeros((3, 1))}, 3), timeout_s=5.0)
    # Retrieved: garbage-collecting these futures logs nothing (warnings are errors here).
    assert all(p.future.done() for p in fake.pending)


async def test_a_timeout_cancels_and_forgets_the_unanswered_rows() -> None:
    fake, router = _router(capacity=10)
    with pytest.raises(GatewayTimeout, match="3 sample"):
        await run_samples(router, _rows({"x": np.zeros((3, 1))}, 3), timeout_s=0.01)
    assert len(fake.forgotten) == 3
    assert all(p.future.cancelled() for p in fake.pending)


def test_rows_with_different_output_shapes_are_a_clear_error() -> None:
    outcomes = [
        Outcome({"y": np.zeros(2)}, "i", 1, 0.0, 0.0, 0.0),
        Outcome({"y": np.zeros(3)}, "i", 1, 0.0, 0.0, 0.0),
    ]
    with pytest.raises(InferenceFailed, match="different shapes"):
        stack_outputs("y", outcomes)
    with pytest.raises(InferenceFailed, match="did not return"):
        stack_outputs("z", outcomes)
