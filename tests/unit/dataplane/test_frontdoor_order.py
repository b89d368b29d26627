"""The front door's call is a state machine: steps taken in order work, a step taken out of
order raises `CallOrderError` naming the step, the state and the order, and a call that
failed partway can still be closed. The admission view keeps the keys clients read."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import msgspec
import numpy as np
import pytest

from infless.dataplane.activity import FunctionActivity
from infless.dataplane.calls import CallOrderError, CallState
from infless.dataplane.frontdoor import FrontDoor
from infless.dataplane.latency import FunctionLatency
from infless.dataplane.request import Array
from infless.dataplane.router import FunctionRouter
from infless.errors import FunctionFailed, FunctionNotFound, InflessError
from infless.types import FunctionSpec
from tests.support.clock import FakeClock
from tests.support.events import EventLog
from tests.support.frontend import Recorder

SPEC = FunctionSpec(
    name="f", image="m", slo_ms=100.0, max_batch=1, min_instances=0, max_instances=1, instances=0
)


@dataclass(eq=False)
class Served:
    """A deployed function as the front door sees it: no instance, requests wait."""

    spec: FunctionSpec
    router: FunctionRouter
    latency: FunctionLatency = field(default_factory=lambda: FunctionLatency(100.0, 0.95))
    activity: FunctionActivity = field(default_factory=FunctionActivity)

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class Failed:
    spec: FunctionSpec

    def refusal(self) -> InflessError:
        return FunctionFailed(f"function {self.spec.name!r} failed to deploy")


def door(clock: FakeClock, events: EventLog) -> FrontDoor[Served, Failed]:
    function = Served(SPEC, FunctionRouter("f", clock, 4, events))
    broken = replace(SPEC, name="broken")
    return FrontDoor(
        functions={"f": function},
        clock=clock,
        observer=Recorder(),
        timeout_s=5.0,
        max_body_bytes=1 << 20,
        failed={"broken": Failed(broken)},
    )


SAMPLE: dict[str, Array] = {"x": np.zeros(2, dtype=np.float32)}


async def test_steps_in_order_move_the_call_and_close_ends_it() -> None:
    clock, events = FakeClock(), EventLog()
    front = door(clock, events)
    call = front.open("f")
    states = [call.state]
    front.bind(call, 10)
    states.append(call.state)
    front.check_room(call)  # no ready instance: it may wait for one
    pending = front.admit(call, SAMPLE)
    states.append(call.state)
    assert events.wakes == ["f"]  # it waits, and the router asked for an instance
    front.abandoned(call, pending)
    states.append(call.state)
    assert pending.future.cancelled()
    front.close(call, 504)
    states.append(call.state)
    assert states == [
        CallState.OPEN,
        CallState.BOUND,
        CallState.ADMITTED,
        CallState.ANSWERED,
        CallState.CLOSED,
    ]


async def test_a_step_out_of_order_is_refused_with_the_step_and_the_state() -> None:
    front = door(FakeClock(), EventLog())
    call = front.open("f")
    with pytest.raises(CallOrderError, match=r"admit needs the call bound, and it is open"):
        front.admit(call, SAMPLE)
    with pytest.raises(CallOrderError, match="check_room needs the call bound"):
        front.check_room(call)
    front.bind(call, None)
    with pytest.raises(CallOrderError, match="bind needs the call open, and it is bound"):
        front.bind(call, None)
    other = front.open("f")
    front.bind(other, None)
    pending = front.admit(other, SAMPLE)
    with pytest.raises(CallOrderError, match="answered needs the call admitted, and it is bound"):
        front.answered(call, pending)
    front.abandoned(other, pending)
    with pytest.raises(CallOrderError, match="rebind is for a model-less call only"):
        front.rebind(call, {})
    front.close(call, 200)
    with pytest.raises(CallOrderError, match="close is allowed once"):
        front.close(call, 200)


async def test_a_call_whose_function_is_missing_or_failed_still_closes() -> None:
    front = door(FakeClock(), EventLog())
    missing = front.open("nope")
    with pytest.raises(FunctionNotFound):
        front.bind(missing, None)
    assert front.close(missing, 404) == 0.0
    broken = front.open("broken")
    with pytest.raises(FunctionFailed):
        front.bind(broken, None)
    front.close(broken, 503)
    assert broken.state is CallState.CLOSED


async def test_the_admission_view_keeps_the_keys_clients_read() -> None:
    clock = FakeClock()
    front = door(clock, EventLog())
    view = front.describe(front.find("f"))
    assert list(msgspec.to_builtins(view)) == [
        "capacityRps",
        "capacityByInstance",
        "budgetMs",
        "budgetFactor",
        "overheadMs",
        "loopLagMs",
        "p99Ms",
        "refused",
    ]
    assert view.p99_ms is None
    assert view.capacity_rps == 0.0
