"""`ModellessCatalog`: the registered models that the request path, the monitor and the
autoscaler share.

One writer. Only the control shell changes the catalogue: registration
(`control.modelless`) publishes and withdraws models and their applications; the variant
monitor (`control.variant_monitor`) records the variants' states; the vertical-scaling
shell (`control.vertical`) applies the planner's decisions. Each write publishes a new
frozen `ModelEntry` (`modelless.entry`), so what a reader holds never changes under it.
The planner (`modelless.planner`) reads a `snapshot()` and returns decisions.

The request path (`choose`, `pin`) reads entries and counts its queries in the model's
`Traffic`, the one mutable part (`modelless.entry`). In memory only: the metadata store
(SQLite) holds the durable part. No I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from infless.errors import GoalsUnmet, InvalidInput
from infless.modelless.capacity import Capacity
from infless.modelless.cards import VariantCard
from infless.modelless.decisions import AppDecision
from infless.modelless.entry import DEFAULT_APP, ModelEntry, TrafficReading
from infless.modelless.profiles import Goals, VariantProfile
from infless.modelless.selection import NoVariant, Selected, fallbacks, meets, select
from infless.modelless.states import Tracked, VariantState

__all__ = [
    "DEFAULT_APP",
    "GOAL_HEADERS",
    "Chosen",
    "ModelEntry",
    "ModelReading",
    "ModellessCatalog",
]

# Query goals: headers on /function/{model}, parameters on V2.
GOAL_HEADERS = {
    "app": "X-Infless-App",
    "latency_ms": "X-Infless-Latency-Ms",
    "min_accuracy": "X-Infless-Min-Accuracy",
    "cost_weight": "X-Infless-Cost-Weight",
}


# whether a running variant would serve a query within a share of the SLO, now
Room = Callable[[VariantCard, float], bool]


class Chosen(NamedTuple):
    """Where a model-less query goes (`ModellessCatalog.choose`)."""

    entry: ModelEntry
    card: VariantCard
    # another running variant meeting its goals could have taken it, and the probes found
    # room within the SLO on `card`: the front door admits it within the SLO, since a
    # budget grown past the SLO is for a query nothing else could serve in time
    held: bool = False


@dataclass(frozen=True, slots=True)
class ModelReading:
    """One model in a snapshot: its entry and its traffic counters at that instant."""

    entry: ModelEntry
    traffic: TrafficReading


def goals_from_parameters(parameters: Mapping[str, object]) -> dict[str, str]:
    """V2 request `parameters` (`app`, `latency_ms`, ...) keyed as the headers are."""
    return {
        header: str(parameters[key]) for key, header in GOAL_HEADERS.items() if key in parameters
    }


class ModellessCatalog:
    """The registered models by name, with indexes by variant function and package."""

    def __init__(self) -> None:
        self._models: dict[str, ModelEntry] = {}
        self._variant_functions: dict[str, str] = {}  # variant function -> model
        self._by_package: dict[str, tuple[str, VariantProfile]] = {}  # -> (model, profile)

    def __bool__(self) -> bool:
        return bool(self._models)

    # -- the control shell's writes ---------------------------------------------------------
    def publish(self, entry: ModelEntry) -> None:
        """Put `entry` in place of the model's (its applications merged into the old
        ones). Registration's write."""
        old = self._models.get(entry.model)
        if old is not None:
            entry = replace(entry, apps={**old.apps, **entry.apps})
        self._models[entry.model] = entry
        self._index()

    def withdraw(self, model: str) -> ModelEntry | None:
        """Remove `model`; returns its last entry (None: it was not there)."""
        entry = self._models.pop(model, None)
        self._index()
        return entry

    def put_app(self, model: str, app_id: str, goals: Goals) -> None:
        """Add or replace one application's goals (no-op for a model not published)."""
        entry = self._models.get(model)
        if entry is not None:
            self._models[model] = replace(entry, apps={**entry.apps, app_id: goals})

    def observe(self, model: str, tracked: Mapping[str, Tracked], capacity: Capacity) -> None:
        """The monitor's write: the variants' tracked states and the capacity factors."""
        entry = self._models.get(model)
        if entry is None:
            return
        self._models[model] = replace(
            entry,
            tracked={**entry.tracked, **tracked},
            states={**entry.states, **{name: t.state for name, t in tracked.items()}},
            capacity=capacity,
        )

    def apply(self, decision: AppDecision) -> ModelEntry | None:
        """The planner's decision for one model, applied: its target, overflow variant,
        released variants and switch count. Returns the new entry (None: no such model)."""
        entry = self._models.get(decision.model)
        if entry is None:
            return None
        released = entry.released if decision.released is None else decision.released
        new = replace(
            entry,
            target=decision.target,
            overflow=decision.overflow,
            released=released,
            switches=entry.switches + (1 if decision.switched else 0),
        )
        self._models[decision.model] = new
        return new

    def _index(self) -> None:
        models = self._models.values()
        self._variant_functions = {f: e.model for e in models for f in e.by_function}
        self._by_package = {
            p.package_dir: (e.model, p) for e in models for p in e.profiles if p.package_dir
        }

    # -- reads ------------------------------------------------------------------------------
    def snapshot(self) -> tuple[ModelReading, ...]:
        """Every model's entry with a frozen reading of its traffic (the planner's input)."""
        return tuple(ModelReading(e, e.traffic.reading()) for e in self._models.values())

    def variant_for_package(self, package_dir: str) -> tuple[ModelEntry, VariantProfile] | None:
        """The variant whose package is `package_dir` (its functions' model key), with its
        model."""
        found = self._by_package.get(package_dir)
        if found is None:
            return None
        return self._models[found[0]], found[1]

    def get(self, model: str) -> ModelEntry | None:
        return self._models.get(model)

    def entries(self) -> Iterator[ModelEntry]:
        return iter(list(self._models.values()))

    def owner_of(self, function: str) -> ModelEntry | None:
        """The model a variant function belongs to (None: an ordinary function)."""
        model = self._variant_functions.get(function)
        return None if model is None else self._models[model]

    # -- the request path: reads entries, counts its queries ---------------------------------
    def pin(self, function: str) -> None:
        """A query addressed a variant function by name: its demand stays there."""
        entry = self.owner_of(function)
        if entry is not None:
            card = entry.by_function[function]
            entry.traffic.record_direct(card.name)

    def choose(
        self,
        model: str,
        goals_in: Mapping[str, str] | None,
        has_room: Room | None = None,
        spill_share: float = 1.0,
    ) -> Chosen | None:
        """The variant a query for `model` goes to, or None when `model` is not model-less.

        Raises InvalidInput for malformed goals, GoalsUnmet when no variant meets them.

        `has_room(card, share)` says whether a running variant would serve the query within
        `share` of the SLO now (the admission control's prediction). The query stays with
        the selected variant when that one would within `spill_share`; else it spills over
        to the best other running variant meeting its goals that would (`fallbacks`:
        typically the overflow variant vertical scaling keeps warm); else the same two
        tests within the whole SLO (the selected variant, then the others). When none
        would, it stays with the selected variant, which admits or refuses it as any
        function does."""
        entry = self._models.get(model)
        if entry is None:
            return None
        goals = query_goals(entry, goals_in)
        choice = select(entry.catalogue, entry.states, goals, entry.target, entry.released)
        held = False
        if has_room is not None and isinstance(choice, Selected):
            choice, held = _spill(entry, choice, goals, has_room, spill_share)
        if isinstance(choice, NoVariant):
            closest = [
                {
                    "variant": c.name,
                    "accuracy": round(c.accuracy, 6),
                    "latencyMs": round(c.latency_b1_ms, 3),
                }
                for c in choice.closest
            ]
            raise GoalsUnmet(choice.message(model), closest=closest)
        card = choice.card
        target = entry.card(entry.target) if entry.target else None
        if target is not None and card.name != target.name and not meets(target, goals):
            entry.traffic.record_pinned(card.name)
        entry.traffic.record_served(card.name)
        return Chosen(entry, card, held)


def _spill(
    entry: ModelEntry, choice: Selected, goals: Goals, has_room: Room, spill_share: float
) -> tuple[Selected, bool]:
    """Where the query goes (see `ModellessCatalog.choose`; a move away from `choice` is
    counted as spilled), and whether it is held to the SLO (`Chosen.held`: another running
    variant meets `goals`, and the variant it goes to was found with room within the SLO —
    `spill_share` is at most 1). A cold start (an Inactive choice) is left as it is; so is
    a choice with no other to go to."""
    if choice.state is VariantState.INACTIVE:
        return choice, False
    others = fallbacks(entry.catalogue, entry.states, goals, choice.card.name, entry.released)
    if not others:
        return choice, False
    for share in (spill_share, 1.0) if spill_share < 1.0 else (1.0,):
        if has_room(choice.card, share):
            return choice, True
        spare = next((c for c in others if has_room(c, share)), None)
        if spare is not None:
            entry.traffic.record_spill()
            return Selected(spare, entry.states[spare.name]), True
    return choice, False  # no room within the SLO anywhere: it admits as any function does


def query_goals(entry: ModelEntry, given: Mapping[str, str] | None) -> Goals:
    """A query's goals from `given` (keyed by the header names, `GOAL_HEADERS`).

    They are its application's goals (`app`; none named: the `default` application's, if
    registered), overridden by explicit ones. The model's SLO is the latency bound when
    none is given."""
    base = entry.default_goals
    if not given:
        return base
    app = given.get(GOAL_HEADERS["app"])
    if app:
        if app not in entry.apps:
            known = ", ".join(sorted(entry.apps)) or "none"
            raise InvalidInput(
                f"application {app!r} is not registered for {entry.model!r} (registered: {known})"
            )
        base = entry.app_goals(app)
    latency = _number(given, "latency_ms", base.latency_ms, low=0.0)
    accuracy = _number(given, "min_accuracy", base.min_accuracy, low=0.0, high=1.0)
    weight = _number(given, "cost_weight", base.cost_weight, low=0.0, high=1.0)
    return Goals(
        latency_ms=latency,
        min_accuracy=accuracy if accuracy is not None else 0.0,
        cost_weight=weight if weight is not None else 1.0,
    )


def _number(
    given: Mapping[str, str], key: str, default: float | None, low: float, high: float | None = None
) -> float | None:
    raw = given.get(GOAL_HEADERS[key])
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInput(f"{GOAL_HEADERS[key]}: {raw!r} is not a number") from None
    if math.isnan(value) or value < low or (high is not None and value > high):
        span = f"[{low:g}, {high:g}]" if high is not None else f"> {low:g}"
        raise InvalidInput(f"{GOAL_HEADERS[key]}: {raw!r} must be in {span}")
    return value
