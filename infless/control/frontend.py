"""FunctionFrontend: the one front door of every function, whatever protocol a request came in.

A route decodes the request, and the frontend does the rest: it finds the function (`name`
or OpenFaaS's `name.namespace`), counts the call, checks the body length, records the
function's activity (the cold-start policy's input), admits each sample through the
function's router with its budget — the SLO less what the request spends outside queue and
batch (measured per function at its tail) and less the event loop's lag, so that a batch
served by the deadline answers within the SLO — (a multi-sample V2 request waits for room
rather than failing when only some of its rows fit), awaits the outcomes within the
gateway's timeout, records each answer's latency (the autoscaler's p99 feedback), and
reports every step to the metrics observer. The route then encodes what it gets back.
`/function/{name}` and `/v2/models/{name}/infer` differ only in their codecs.
Gateway side: never imports torch, never touches HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from infless.clock import Clock
from infless.control.failed import FailedDeployment
from infless.control.functions import DeployedFunction
from infless.dataplane.latency import LoopLag
from infless.dataplane.request import Outcome, Pending, Sample
from infless.dataplane.router import FunctionRouter
from infless.errors import (
    FunctionNotFound,
    GatewayTimeout,
    Overloaded,
    PayloadTooLarge,
    WorkerUnavailable,
)
from infless.modelless.cards import VariantCard
from infless.modelless.catalog import ModellessCatalog


class CallObserver(Protocol):
    """Where the frontend reports calls (the gateway's Prometheus metrics)."""

    def request_started(self, function: str) -> None: ...

    def served(
        self,
        function: str,
        batch_size: int,
        queue_ms: float,
        exec_ms: float,
        cold_start: bool,
        cold_start_ms: float | None,
    ) -> None: ...

    def request_done(self, function: str, code: int, seconds: float) -> None: ...


@dataclass(slots=True)
class Call:
    """One request at the front door: when it came, for which function, what it got."""

    name: str
    started_s: float
    function: DeployedFunction | None = None
    outcomes: list[Outcome] | None = None
    model: str | None = None  # a model-less query: the model it named ...
    variant: str | None = None  # ... and the variant chosen for it


class FunctionFrontend:
    def __init__(
        self,
        functions: Mapping[str, DeployedFunction],
        clock: Clock,
        observer: CallObserver,
        timeout_s: float,
        max_body_bytes: int,
        catalog: ModellessCatalog | None = None,
        failed: Mapping[str, FailedDeployment] | None = None,
    ) -> None:
        self._functions = functions
        self._failed = failed if failed is not None else {}
        self._catalog = catalog if catalog is not None else ModellessCatalog()
        self._clock = clock
        self._observer = observer
        self.timeout_s = timeout_s
        self.max_body_bytes = max_body_bytes
        self.loop_lag = LoopLag()  # fed by `LoopLagProbe`

    def find(self, name: str) -> DeployedFunction:
        """`name` or OpenFaaS's `name.namespace` -> the deployed function, else 404 (503
        naming the reason for a function that failed to deploy)."""
        function = self._functions.get(name)
        if function is not None:
            return function
        base, _, namespace = name.rpartition(".")
        function = self._functions.get(base)
        if base and function is not None and function.spec.namespace == namespace:
            return function
        failed = self.failed(name)
        if failed is not None:
            raise failed.refusal()
        raise FunctionNotFound(
            f"function {name!r} is not deployed; GET /system/functions lists them"
        )

    def failed(self, name: str) -> FailedDeployment | None:
        """The failed deployment `name` (or `name.namespace`) names, if it is one."""
        failed = self._failed.get(name)
        if failed is None:
            base, _, namespace = name.rpartition(".")
            failed = self._failed.get(base)
            if failed is None or failed.spec.namespace != namespace:
                return None
        return failed

    def open(self, name: str) -> Call:
        """A call begins; `bind` it to its function (which may raise 404) before decoding."""
        return Call(name, self._clock.now())

    def bind(
        self, call: Call, content_length: int | None, goals: Mapping[str, str] | None = None
    ) -> DeployedFunction:
        """Find the call's function, count the call, and refuse a body over the limit.

        A call naming a registered model (model-less) goes to the variant its `goals`
        (headers, see `modelless.catalog.GOAL_HEADERS`) select — or, when that one could
        not admit it in time, to another running variant meeting them that can; a call
        naming a variant's function directly keeps its demand on that variant."""
        function = self._functions.get(call.name)
        if function is None:
            function = self._choose(call, goals)
        elif self._catalog:
            self._catalog.pin(function.name)
        call.function = function
        call.name = function.name
        self._observer.request_started(function.name)
        function.activity.invocations += 1
        if content_length is not None and content_length > self.max_body_bytes:
            raise PayloadTooLarge(
                f"body of {content_length} bytes exceeds gateway.max_body_bytes = "
                f"{self.max_body_bytes}"
            )
        return function

    def _choose(self, call: Call, goals: Mapping[str, str] | None) -> DeployedFunction:
        chosen = self._catalog.choose(call.model or call.name, goals, self._has_room)
        if chosen is None:
            return self.find(call.name)
        entry, card = chosen
        function = self._functions.get(card.function)
        if function is None:
            raise WorkerUnavailable(
                f"variant {card.name!r} of {entry.model!r} has no function deployed"
            )
        call.model, call.variant = entry.model, card.name
        return function

    def _has_room(self, card: VariantCard) -> bool:
        """Whether the variant's function could admit a query in time now (selection spills
        a query its first choice cannot admit to another running variant)."""
        function = self._functions.get(card.function)
        return function is not None and function.router.has_room(self.budget_s(function))

    def rebind(self, call: Call, goals: Mapping[str, str]) -> DeployedFunction:
        """A model-less call whose goals came with its body (V2 `parameters`): select
        again with them (the call was counted by `bind` already)."""
        assert call.model is not None, "only a model-less call is bound again"
        function = call.function = self._choose(call, goals)
        call.name = function.name
        return function

    def refuse_early(self, name: str) -> Overloaded | None:
        """Whether a call to `name` is refused (429) before anything else about it is read:
        the same room test as `check_room`, counted as a refused call, for a server that
        answers refusals without binding and decoding (under a flood of overload, a
        refusal must cost as little as it can). None: go on (also for a name that is not a
        deployed function: the normal path answers that)."""
        function = self._functions.get(name)
        if function is None:
            return None
        try:
            function.router.check_room(self.budget_s(function))
        except Overloaded as refused:
            observer = self._observer
            observer.request_started(name)
            function.activity.invocations += 1
            observer.request_done(name, refused.status, 0.0)
            return refused
        return None

    def check_room(self, call: Call) -> None:
        """Refuse at once (429) a call no instance could answer in time, before its body is
        read and decoded: under overload, a refusal costs the HTTP exchange and no more."""
        function = call.function
        assert function is not None, "bind the call to its function first"
        function.router.check_room(self.budget_s(function))

    def describe(self, function: DeployedFunction) -> dict[str, object]:
        """How requests of `function` are admitted now (for /system/function): its measured
        capacity (what its instances serve at most at the service times they measured
        recently), the budget a request gets, and what shapes it."""
        latency = function.latency
        p99_ms = latency.p99_ms(self._clock.now())
        capacity = function.router.capacity(function.spec.slo_ms)
        return {
            "capacityRps": round(sum(rps for _, rps in capacity), 1),
            "capacityByInstance": {i.instance_id: round(rps, 1) for i, rps in capacity},
            "budgetMs": round(self.budget_s(function) * 1000.0, 3),
            "budgetFactor": round(latency.budget_factor, 3),
            "overheadMs": round(latency.overhead_ms, 3),
            "loopLagMs": round(self.loop_lag.tail_ms, 3),
            "p99Ms": None if p99_ms is None else round(p99_ms, 3),
            "refused": function.router.rejected,
        }

    def budget_s(self, function: DeployedFunction) -> float:
        """How long a request of `function` arriving now may take to be served."""
        return function.latency.budget_ms(self._clock.now(), self.loop_lag.tail_ms) / 1000.0

    async def run(self, call: Call, samples: Sequence[Sample]) -> list[Outcome]:
        """Admit every sample, await all of them, answer in order (or raise the first
        failure); the function counts as busy from the first admission to the last answer."""
        function = call.function
        assert function is not None, "bind the call to its function first"
        activity = function.activity
        activity.arrive(self._clock.now())
        budget_s = self.budget_s(function)
        try:
            outcomes = await run_samples(function.router, samples, self.timeout_s, budget_s)
        finally:
            activity.finish(self._clock.now())
        self._served(call, outcomes)
        return outcomes

    def admit(self, call: Call, sample: Sample) -> Pending:
        """One sample admitted without awaiting it (`answered` or `abandoned` follows): the
        callback form of `run` for one sample, for a server that answers from the future's
        done callback. Raises what `run` would raise at admission (429)."""
        function = call.function
        assert function is not None, "bind the call to its function first"
        function.activity.arrive(self._clock.now())
        try:
            return function.router.submit(sample, self.budget_s(function))
        except BaseException:
            function.activity.finish(self._clock.now())
            raise

    def answered(self, call: Call, pending: Pending) -> Outcome:
        """The admitted sample's outcome (its future is done), or the error it failed with."""
        function = call.function
        assert function is not None, "bind the call to its function first"
        function.activity.finish(self._clock.now())
        outcome = pending.future.result()  # raises the sample's failure
        self._served(call, [outcome])
        return outcome

    def abandoned(self, call: Call, pending: Pending) -> None:
        """An admitted sample nobody waits for any more (timed out, client gone)."""
        function = call.function
        assert function is not None, "bind the call to its function first"
        function.activity.finish(self._clock.now())
        _settle([pending], function.router)

    def _served(self, call: Call, outcomes: list[Outcome]) -> None:
        call.outcomes = outcomes
        observer = self._observer
        assert call.function is not None
        for o in outcomes:
            cold = o.cold_start_ms > 0
            observer.served(
                call.function.name,
                o.batch_size,
                o.queue_ms,
                o.exec_ms,
                cold,
                o.cold_start_ms if cold else None,
            )

    def close(self, call: Call, status: int) -> float:
        """The call is answered with `status`; returns its duration in seconds."""
        now = self._clock.now()
        duration_s = now - call.started_s
        function = call.function
        if function is not None:
            self._observer.request_done(call.name, status, duration_s)
            if call.outcomes:
                duration_ms = duration_s * 1000.0
                inside_ms = max(o.queue_ms + o.service_ms for o in call.outcomes)
                function.latency.answered_in(
                    now, duration_ms + self.loop_lag.tail_ms, duration_ms - inside_ms
                )
        return duration_s


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
        _settle(pendings, router)
    for pending in pendings:
        error = pending.future.exception()
        if error is not None:
            raise error
    return [p.future.result() for p in pendings]


def _settle(pendings: Sequence[Pending], router: FunctionRouter) -> None:
    """Leave nothing behind: unanswered samples are cancelled, failures marked retrieved."""
    for pending in pendings:
        future = pending.future
        if not future.done():
            router.forget_waiting(pending)
            future.cancel()
        elif not future.cancelled():
            future.exception()  # retrieved: no "exception was never retrieved" noise


class LoopLagProbe:
    """Measures how late the event loop runs a timer, every `interval_s`, into `lag`."""

    def __init__(self, clock: Clock, lag: LoopLag, interval_s: float = 0.05) -> None:
        self._clock = clock
        self._lag = lag
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-lag")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        clock = self._clock
        while True:
            due_s = clock.now() + self._interval_s
            await clock.sleep_until(due_s)
            self._lag.observe((clock.now() - due_s) * 1000.0)
