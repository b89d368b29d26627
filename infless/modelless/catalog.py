"""`ModellessCatalog`: the registered models as the request path, the monitor and the
autoscaler share them — each model's variant cards, its applications' goals, its variants'
live states, the variant model-vertical scaling chose (the target), the one it keeps warm
beside it (the overflow) and the arrivals that had to go elsewhere (pinned).

Who writes what: registration (`control.modelless`) puts and removes models; the monitor
(`control.variant_monitor`) writes `states`, `tracked` and `capacity`; the vertical planner
(`modelless.planner`) writes `target` and `overflow` and counts `switches`; the request
path (`choose`, `pin`) counts `served`, `pinned`, `direct` and `spilled`. Everybody reads.
In memory only: the metadata store (SQLite) holds the durable part. No I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from infless.errors import GoalsUnmet, InvalidInput
from infless.modelless.capacity import Capacity
from infless.modelless.cards import VariantCard, cards_for
from infless.modelless.profiles import Goals, VariantProfile
from infless.modelless.selection import Catalogue, NoVariant, Selected, fallbacks, meets, select
from infless.modelless.states import Tracked, VariantState

DEFAULT_APP = "default"  # the application of queries that name none
# Query goals: headers on /function/{model}, parameters on V2.
GOAL_HEADERS = {
    "app": "X-Infless-App",
    "latency_ms": "X-Infless-Latency-Ms",
    "min_accuracy": "X-Infless-Min-Accuracy",
    "cost_weight": "X-Infless-Cost-Weight",
}


@dataclass(eq=False)
class ModelEntry:
    model: str
    slo_ms: float
    profiles: tuple[VariantProfile, ...]
    apps: dict[str, Goals] = field(default_factory=dict)
    catalogue: Catalogue = field(init=False)
    by_function: dict[str, VariantCard] = field(init=False)
    states: dict[str, VariantState] = field(default_factory=dict)  # by variant name
    tracked: dict[str, Tracked] = field(default_factory=dict)
    target: str | None = None
    released: frozenset[str] = frozenset()  # variants vertical scaling lets go (no new load)
    overflow: str | None = None  # the variant kept warm beside the target (`[modelless]`)
    pinned: dict[str, int] = field(default_factory=dict)  # arrivals by variant, ever
    served: dict[str, int] = field(default_factory=dict)  # queries routed, by variant
    direct: int = 0  # calls to a variant's function by name, ever
    switches: int = 0  # vertical moves (upgrades and downgrades)
    spilled: int = 0  # queries sent to another variant: the selected one had no room
    # what each variant delivers against its profile here (`modelless.capacity`)
    capacity: Capacity = field(default_factory=Capacity)

    def __post_init__(self) -> None:
        self.catalogue = Catalogue.of(cards_for(self.profiles, self.slo_ms))
        self.by_function = {c.function: c for c in self.catalogue.cards}

    @property
    def default_goals(self) -> Goals:
        """Goals of queries naming no application: the `default` application's when one is
        registered, else the SLO as the latency bound and no accuracy floor."""
        return self.app_goals(DEFAULT_APP) if DEFAULT_APP in self.apps else Goals(self.slo_ms)

    @property
    def arrivals(self) -> int:
        """The application's queries ever: routed by selection, or to a variant by name."""
        return sum(self.served.values()) + self.direct

    @property
    def planning_goals(self) -> Goals:
        """What vertical scaling plans the application's variant for: the loosest goals of
        its registered applications (queries of stricter ones are pinned elsewhere), or the
        defaults when none is registered."""
        if not self.apps:
            return self.default_goals
        goals = [self.app_goals(a) for a in self.apps]
        bounds = [g.latency_ms or self.slo_ms for g in goals]
        return Goals(max(bounds), min(g.min_accuracy for g in goals), 1.0)

    def app_goals(self, app_id: str) -> Goals:
        goals = self.apps[app_id]
        return Goals(goals.latency_ms or self.slo_ms, goals.min_accuracy, goals.cost_weight)

    def card(self, variant: str) -> VariantCard | None:
        return next((c for c in self.catalogue.cards if c.name == variant), None)


def goals_from_parameters(parameters: Mapping[str, object]) -> dict[str, str]:
    """V2 request `parameters` (`app`, `latency_ms`, ...) keyed as the headers are."""
    return {
        header: str(parameters[key]) for key, header in GOAL_HEADERS.items() if key in parameters
    }


class ModellessCatalog:
    def __init__(self) -> None:
        self._models: dict[str, ModelEntry] = {}
        self._variant_functions: dict[str, ModelEntry] = {}
        self._by_package: dict[str, tuple[ModelEntry, VariantProfile]] = {}

    def __bool__(self) -> bool:
        return bool(self._models)

    def put(self, entry: ModelEntry) -> None:
        old = self._models.get(entry.model)
        if old is not None:
            entry.apps = {**old.apps, **entry.apps}
        self._models[entry.model] = entry
        self._index()

    def remove(self, model: str) -> ModelEntry | None:
        entry = self._models.pop(model, None)
        self._index()
        return entry

    def _index(self) -> None:
        models = self._models.values()
        self._variant_functions = {f: e for e in models for f in e.by_function}
        self._by_package = {
            p.package_dir: (e, p) for e in models for p in e.profiles if p.package_dir
        }

    def variant_for_package(self, package_dir: str) -> tuple[ModelEntry, VariantProfile] | None:
        """The variant whose package is `package_dir` (its functions' model key), with its
        model."""
        return self._by_package.get(package_dir)

    def get(self, model: str) -> ModelEntry | None:
        return self._models.get(model)

    def entries(self) -> Iterator[ModelEntry]:
        return iter(list(self._models.values()))

    def owner_of(self, function: str) -> ModelEntry | None:
        """The model a variant function belongs to (None: an ordinary function)."""
        return self._variant_functions.get(function)

    def pin(self, function: str) -> None:
        """A query addressed a variant function by name: its demand stays there."""
        entry = self._variant_functions.get(function)
        if entry is not None:
            card = entry.by_function[function]
            entry.pinned[card.name] = entry.pinned.get(card.name, 0) + 1
            entry.direct += 1

    def choose(
        self,
        model: str,
        goals_in: Mapping[str, str] | None,
        has_room: Callable[[VariantCard], bool] | None = None,
    ) -> tuple[ModelEntry, VariantCard] | None:
        """The variant a query for `model` goes to, or None when `model` is not model-less.
        Raises InvalidInput for malformed goals, GoalsUnmet when no variant meets them.

        `has_room`: whether a running variant can admit the query in time now (the
        admission control's test). When the selected variant cannot, the query spills over
        to the best other running variant meeting its goals that can (`fallbacks`) — the
        overflow variant vertical scaling keeps warm, typically — rather than being refused;
        when none can, it stays with the selected one (which refuses it)."""
        entry = self._models.get(model)
        if entry is None:
            return None
        goals = query_goals(entry, goals_in)
        choice = select(entry.catalogue, entry.states, goals, entry.target, entry.released)
        if has_room is not None and isinstance(choice, Selected):
            choice = _spill(entry, choice, goals, has_room)
        if isinstance(choice, NoVariant):
            raise GoalsUnmet(
                choice.message(model),
                closest=[
                    {"variant": c.name, "accuracy": round(c.accuracy, 6),
                     "latencyMs": round(c.latency_b1_ms, 3)}
                    for c in choice.closest
                ],
            )  # fmt: skip
        card = choice.card
        target = entry.card(entry.target) if entry.target else None
        if target is not None and card.name != target.name and not meets(target, goals):
            entry.pinned[card.name] = entry.pinned.get(card.name, 0) + 1
        entry.served[card.name] = entry.served.get(card.name, 0) + 1
        return entry, card


def _spill(
    entry: ModelEntry, choice: Selected, goals: Goals, has_room: Callable[[VariantCard], bool]
) -> Selected:
    """`choice`, or where that running variant cannot admit the query in time, the best
    other running variant meeting `goals` that can (counted as spilled); a cold start (an
    Inactive choice) is left as it is."""
    if choice.state is VariantState.INACTIVE or has_room(choice.card):
        return choice
    others = fallbacks(entry.catalogue, entry.states, goals, choice.card.name, entry.released)
    spare = next((c for c in others if has_room(c)), None)
    if spare is None:
        return choice
    entry.spilled += 1
    return Selected(spare, entry.states[spare.name])


def query_goals(entry: ModelEntry, given: Mapping[str, str] | None) -> Goals:
    """A query's goals from `given` (keyed by the header names, `GOAL_HEADERS`): its
    application's (`app`; none named: the `default` application's, if registered),
    overridden by explicit ones; the model's SLO as the latency bound when none is given."""
    base = entry.default_goals
    if not given:
        return base
    app = given.get(GOAL_HEADERS["app"])
    if app:
        if app not in entry.apps:
            known = ", ".join(sorted(entry.apps)) or "none"
            raise InvalidInput(f"application {app!r} is not registered for {entry.model!r} "
                               f"(registered: {known})")  # fmt: skip
        base = entry.app_goals(app)
    latency = _number(given, "latency_ms", base.latency_ms, low=0.0)
    accuracy = _number(given, "min_accuracy", base.min_accuracy, low=0.0, high=1.0)
    weight = _number(given, "cost_weight", base.cost_weight, low=0.0, high=1.0)
    return Goals(latency, accuracy if accuracy is not None else 0.0,
                 weight if weight is not None else 1.0)  # fmt: skip


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
