"""Admission by deadline: whether, and where, a request joins an instance.

Pure functions that the gateway's router (`dataplane.router`) and the simulator
(`sim.engine`, `sim.fluid`) both call, so the two decide alike.

- `finish_by_s`: when a request admitted now would have its batch served on one instance.
  The batch in flight finishes at its tail (one running past its tail is given half its
  mean more). The full batches queued ahead run at their mean service time: a sum of
  batches varies far less than each one, and a tail per batch refused work the machine had
  room for. Then its own batch runs at its tail. What the means miss, the function's budget
  corrects from the p99 it measures (`latency.FunctionLatency`).
- `candidates`: the instances a request may join, in the order to try them. First the one
  the rate-share dispatcher proposed, when it finishes the request by its deadline (or is
  idle: nothing would serve it sooner). Then the other accepting instance that would finish
  it first, if that one meets the deadline (or is idle). Nothing yielded: refuse (429).
  Work that cannot finish in time is never queued.
- `has_room`: whether a ready instance would serve a request admitted now by its deadline
  (model-less selection spills a query its first variant has no room for to another).
- `refusal_retry_s`: the Retry-After of a refusal, from the predicted drain.
- `room_refusal_s`: the early check at a request's headers, before its body is decoded.
  Refused when no ready instance, even the only one left, could serve it within its budget.

Pure: no I/O, no clock (times are arguments), no asyncio.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Protocol, TypeVar


class ServiceTimes(Protocol):
    """An instance's batch service times (`latency.ExecModel` is one)."""

    @property
    def max_batch(self) -> int: ...

    def mean_ms(self, batch_size: int) -> float: ...

    def tail_ms(self, batch_size: int) -> float: ...


class Admissible(Protocol):
    """What admission reads of an instance (the router's `Instance`, the simulator's)."""

    @property
    def idle(self) -> bool: ...

    @property
    def accepting(self) -> bool: ...

    def finish_by_s(self, now_s: float) -> float: ...


A = TypeVar("A", bound=Admissible)


def finish_by_s(
    now_s: float,
    model: ServiceTimes,
    queued: int,
    in_flight: int = 0,
    dispatched_s: float = 0.0,
) -> float:
    """When a request admitted at `now_s` behind `queued` requests (and a batch of
    `in_flight` dispatched at `dispatched_s`, if any) would have its batch served."""
    busy_until_s = now_s
    if in_flight:  # a batch running past its tail is given half its mean more
        expected_s = dispatched_s + model.tail_ms(in_flight) / 1000.0
        busy_until_s = max(expected_s, now_s + model.mean_ms(in_flight) / 2000.0)
    b = model.max_batch
    ahead, own = divmod(queued, b)
    return busy_until_s + (ahead * model.mean_ms(b) + model.tail_ms(own + 1)) / 1000.0


def candidates(
    chosen: A | None, instances: Sequence[A], now_s: float, deadline_s: float
) -> Iterator[A]:
    """The instances to try, in order (see the module docstring); lazily, so the common case
    (the proposed instance takes it) computes nothing more."""
    if chosen is None:
        return
    if chosen.idle or chosen.finish_by_s(now_s) <= deadline_s:
        yield chosen
    best, best_s = None, math.inf
    for instance in instances:
        if instance is not chosen and instance.accepting:
            at_s = now_s if instance.idle else instance.finish_by_s(now_s)
            if at_s < best_s:
                best, best_s = instance, at_s
    if best is not None and best_s <= deadline_s:
        yield best


def has_room(ready: Sequence[Admissible], now_s: float, deadline_s: float) -> bool:
    """Whether one of the `ready` instances accepts a request admitted at `now_s` (its
    queue is not full) and would serve it by `deadline_s`, by its prediction — an idle one
    too: its tail at batch 1 must fit (admission takes a request on an idle instance
    whatever it predicts; a caller choosing between functions wants the one that makes
    it). False with no ready instance."""
    return any(i.accepting and i.finish_by_s(now_s) <= deadline_s for i in ready)


def refusal_retry_s(ready: Sequence[Admissible], now_s: float, deadline_s: float) -> float:
    """Retry-After of a refusal: when the first ready instance drains past the deadline
    (at least a second)."""
    drain_s = min(i.finish_by_s(now_s) for i in ready) - deadline_s
    return max(1.0, drain_s)


def room_refusal_s(ready: Sequence[Admissible], now_s: float, budget_s: float) -> float | None:
    """None when a request with `budget_s` may go on (no ready instance: it may wait for a
    cold start; an idle one: it is served at once); else the Retry-After of its refusal."""
    if not ready or any(i.idle for i in ready):
        return None
    finish_s = min(i.finish_by_s(now_s) for i in ready)
    if finish_s > now_s + budget_s:
        return max(1.0, finish_s - now_s - budget_s)
    return None
