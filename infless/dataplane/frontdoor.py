"""`FrontDoor`: the one front door of every function, whatever protocol a request came in.

A route decodes the request; the front door does the rest, one step at a time (`Call`,
`dataplane.calls`, makes the order explicit):

- `open`, then `bind`: find the function (`name`, or OpenFaaS's `name.namespace`), count
  the call, refuse a body over the limit, and for a registered model pick its variant;
- `check_room`: refuse at once (429) what no instance could answer in time;
- `run` (or `admit`, then `answered` or `abandoned`): admit each sample through the
  function's router with its budget, await the outcomes within the gateway's timeout;
- `close`: record the answer's latency (the autoscaler's p99 feedback) and report it.

A request's budget is the SLO less what it spends outside queue and batch (measured per
function at its tail) and less the event loop's lag, so a batch served by its deadline
answers within the SLO. The route then encodes what it gets back.

What it needs from the control plane comes in as small protocols (`ServedFunction`,
`FailedRecord`, `VariantChooser`): the data plane never imports control.
Gateway side: never imports torch, never touches HTTP.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

from infless.clock import Clock
from infless.dataplane.activity import FunctionActivity
from infless.dataplane.calls import Call, run_samples, settle
from infless.dataplane.latency import FunctionLatency, LoopLag
from infless.dataplane.request import Outcome, Pending, Sample
from infless.dataplane.router import FunctionRouter
from infless.dataplane.views import AdmissionView
from infless.errors import (
    FunctionNotFound,
    InflessError,
    Overloaded,
    PayloadTooLarge,
    WorkerUnavailable,
)
from infless.types import FunctionSpec


class ServedFunction(Protocol):
    """A deployed function, as the front door sees it."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> FunctionSpec: ...

    @property
    def router(self) -> FunctionRouter: ...

    @property
    def activity(self) -> FunctionActivity: ...

    @property
    def latency(self) -> FunctionLatency: ...


class FailedRecord(Protocol):
    """A function that failed to deploy: a call to it gets its `refusal` (503)."""

    @property
    def spec(self) -> FunctionSpec: ...

    def refusal(self) -> InflessError: ...


class ChosenModel(Protocol):
    @property
    def model(self) -> str: ...


class ChosenVariant(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def function(self) -> str: ...


class VariantChooser(Protocol):
    """The model-less catalog, as the front door uses it (`modelless.catalog`)."""

    def __bool__(self) -> bool: ...

    def pin(self, function: str) -> None: ...

    def choose(
        self,
        model: str,
        goals_in: Mapping[str, str] | None,
        has_room: Callable[[ChosenVariant, float], bool] | None = None,
        spill_share: float = 1.0,
    ) -> tuple[ChosenModel, ChosenVariant, bool] | None: ...


class CallObserver(Protocol):
    """Where the front door reports calls (the gateway's Prometheus metrics)."""

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


F = TypeVar("F", bound=ServedFunction)
D = TypeVar("D", bound=FailedRecord)


class FrontDoor(Generic[F, D]):
    """The request path of every function: `F` its deployed functions, `D` the failed ones."""

    def __init__(
        self,
        *,
        functions: Mapping[str, F],
        clock: Clock,
        observer: CallObserver,
        timeout_s: float,
        max_body_bytes: int,
        catalog: VariantChooser | None = None,
        failed: Mapping[str, D] | None = None,
        spill_share: float = 1.0,
    ) -> None:
        self._functions = functions
        self._failed: Mapping[str, D] = failed if failed is not None else {}
        self._catalog = catalog
        self._clock = clock
        self._observer = observer
        self.timeout_s = timeout_s
        self.max_body_bytes = max_body_bytes
        self.loop_lag = LoopLag()  # fed by `LoopLagProbe`
        self.spill_share = spill_share  # `[modelless] spill_share`

    # -- finding functions ---------------------------------------------------------------
    def find(self, name: str) -> F:
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

    def failed(self, name: str) -> D | None:
        """The failed deployment `name` (or `name.namespace`) names, if it is one."""
        failed = self._failed.get(name)
        if failed is None:
            base, _, namespace = name.rpartition(".")
            failed = self._failed.get(base)
            if failed is None or failed.spec.namespace != namespace:
                return None
        return failed

    # -- the steps of a call -------------------------------------------------------------
    def open(self, name: str) -> Call[F]:
        """A call begins; `bind` it to its function (which may raise 404) before decoding."""
        return Call(name, self._clock.now())

    def bind(
        self, call: Call[F], content_length: int | None, goals: Mapping[str, str] | None = None
    ) -> F:
        """Find the call's function, count the call, and refuse a body over the limit.

        A call naming a registered model (model-less) goes to the variant its `goals`
        (headers, see `modelless.catalog.GOAL_HEADERS`) select. When that one could not
        admit it in time, it goes to another running variant meeting them that can. A call
        naming a variant's function directly keeps its demand on that variant."""
        function = self._functions.get(call.name)
        if function is None:
            function = self._choose(call, goals)
        elif self._catalog:
            self._catalog.pin(function.name)
        call.bind(function, function.name)
        self._observer.request_started(function.name)
        function.activity.invocations += 1
        if content_length is not None and content_length > self.max_body_bytes:
            raise PayloadTooLarge(
                f"body of {content_length} bytes exceeds gateway.max_body_bytes = "
                f"{self.max_body_bytes}"
            )
        return function

    def rebind(self, call: Call[F], goals: Mapping[str, str]) -> F:
        """A model-less call whose goals came with its body (V2 `parameters`): select
        again with them (`bind` counted the call already)."""
        call.model_less("rebind")
        function = self._choose(call, goals)
        call.rebind(function, function.name)
        return function

    def check_room(self, call: Call[F]) -> None:
        """Refuse at once (429) a call no instance could answer in time, before its body is
        read and decoded: under overload, a refusal costs the HTTP exchange and no more."""
        function = call.bound("check_room")
        function.router.check_room(self.call_budget_s(call, function))

    async def run(self, call: Call[F], samples: Sequence[Sample]) -> list[Outcome]:
        """Admit every sample, await all of them, answer in order (or raise the first
        failure). The function counts as busy from the first admission to the last answer."""
        function = call.admit()
        activity = function.activity
        activity.arrive(self._clock.now())
        budget_s = self.call_budget_s(call, function)
        try:
            outcomes = await run_samples(function.router, samples, self.timeout_s, budget_s)
        finally:
            activity.finish(self._clock.now())
        call.answer("run")
        self._served(call, function, outcomes)
        return outcomes

    def admit(self, call: Call[F], sample: Sample) -> Pending:
        """One sample admitted without awaiting it (`answered` or `abandoned` follows): the
        callback form of `run` for one sample, for a server that answers from the future's
        done callback. Raises what `run` would raise at admission (429)."""
        function = call.admit()
        function.activity.arrive(self._clock.now())
        try:
            return function.router.submit(sample, self.call_budget_s(call, function))
        except BaseException:
            function.activity.finish(self._clock.now())
            raise

    def answered(self, call: Call[F], pending: Pending) -> Outcome:
        """The admitted sample's outcome (its future is done), or the error it failed with."""
        function = call.answer("answered")
        function.activity.finish(self._clock.now())
        outcome = pending.future.result()  # raises the sample's failure
        self._served(call, function, [outcome])
        return outcome

    def abandoned(self, call: Call[F], pending: Pending) -> None:
        """An admitted sample nobody waits for any more (timed out, client gone)."""
        function = call.answer("abandoned")
        function.activity.finish(self._clock.now())
        settle([pending], function.router)

    def close(self, call: Call[F], status: int) -> float:
        """The call is answered with `status`; returns its duration in seconds."""
        now = self._clock.now()
        duration_s = now - call.started_s
        function = call.close()
        if function is not None:
            self._observer.request_done(call.name, status, duration_s)
            if call.outcomes:
                duration_ms = duration_s * 1000.0
                inside_ms = max(o.queue_ms + o.service_ms for o in call.outcomes)
                function.latency.answered_in(
                    now, duration_ms + self.loop_lag.tail_ms, duration_ms - inside_ms
                )
        return duration_s

    # -- refusing early, budgets, status -------------------------------------------------
    def refuse_early(self, name: str) -> Overloaded | None:
        """Whether a call to `name` is refused (429) before anything else about it is read.

        The same room test as `check_room`, counted as a refused call, for a server that
        answers refusals without binding and decoding: under a flood of overload, a refusal
        must cost as little as it can. None: go on (also for a name that is not a deployed
        function: the normal path answers that)."""
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

    def budget_s(self, function: F) -> float:
        """How long a request of `function` arriving now may take to be served."""
        return function.latency.budget_ms(self._clock.now(), self.loop_lag.tail_ms) / 1000.0

    def call_budget_s(self, call: Call[F], function: F) -> float:
        """`budget_s`, or for a call held to the SLO (`Call.slo_held`), the budget grown no
        further than the SLO."""
        if not call.slo_held:
            return self.budget_s(function)
        now, lag_ms = self._clock.now(), self.loop_lag.tail_ms
        return function.latency.slo_budget_ms(now, lag_ms) / 1000.0

    def describe(self, function: F) -> AdmissionView:
        """How requests of `function` are admitted now (for /system/function)."""
        latency = function.latency
        p99_ms = latency.p99_ms(self._clock.now())
        capacity = function.router.capacity(function.spec.slo_ms)
        return AdmissionView(
            capacity_rps=round(sum(rps for _, rps in capacity), 1),
            capacity_by_instance={i.instance_id: round(rps, 1) for i, rps in capacity},
            budget_ms=round(self.budget_s(function) * 1000.0, 3),
            budget_factor=round(latency.budget_factor, 3),
            overhead_ms=round(latency.overhead_ms, 3),
            loop_lag_ms=round(self.loop_lag.tail_ms, 3),
            p99_ms=None if p99_ms is None else round(p99_ms, 3),
            refused=function.router.rejected,
        )

    # -- model-less selection ------------------------------------------------------------
    def _choose(self, call: Call[F], goals: Mapping[str, str] | None) -> F:
        catalog = self._catalog
        model = call.model or call.name
        chosen = (
            None
            if catalog is None
            else catalog.choose(model, goals, self._variant_room, self.spill_share)
        )
        if chosen is None:
            return self.find(call.name)
        entry, card, held = chosen
        function = self._functions.get(card.function)
        if function is None:
            raise WorkerUnavailable(
                f"variant {card.name!r} of {entry.model!r} has no function deployed"
            )
        call.model, call.variant = entry.model, card.name
        call.slo_held = held  # another variant to go to, and room within the SLO here
        return function

    def _variant_room(self, card: ChosenVariant, share: float) -> bool:
        """Whether the variant's function would serve a query arriving now within `share`
        of its budget grown no further than the SLO (`slo_budget_ms`; selection's probe:
        see `catalog.choose`)."""
        function = self._functions.get(card.function)
        if function is None:
            return False
        budget_ms = function.latency.slo_budget_ms(self._clock.now(), self.loop_lag.tail_ms)
        return function.router.has_room(share * budget_ms / 1000.0)

    def _served(self, call: Call[F], function: F, outcomes: list[Outcome]) -> None:
        call.outcomes = outcomes
        observer = self._observer
        for o in outcomes:
            cold = o.cold_start_ms > 0
            observer.served(
                function.name,
                o.batch_size,
                o.queue_ms,
                o.exec_ms,
                cold,
                o.cold_start_ms if cold else None,
            )
