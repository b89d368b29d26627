"""`ModelEntry`: one registered model as the catalogue holds it, and `Traffic`: what its
queries did.

An entry is a frozen record. It holds the model's variant cards, its applications'
goals, its variants' live states, the variant vertical scaling chose (the target), the
one kept warm beside it (the overflow) and the variants let go (released). Nobody edits
an entry: the control shell publishes a new one (`ModellessCatalog`'s writer methods).
So a reader's entry is a snapshot that cannot change under it.

`Traffic` is the one mutable part: the request path's counters (queries served per
variant, pinned, addressed by name, spilled). Only `ModellessCatalog.choose` and `pin`
write it. Every version of an entry shares its model's `Traffic`; the planner reads a
frozen `TrafficReading` of it. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from infless.modelless.capacity import Capacity
from infless.modelless.cards import VariantCard, cards_for
from infless.modelless.profiles import Goals, VariantProfile
from infless.modelless.selection import Catalogue
from infless.modelless.states import Tracked, VariantState

DEFAULT_APP = "default"  # the application of queries that name none


class Traffic:
    """The request path's counters of one model. Written by `ModellessCatalog.choose` and
    `pin` only; read through `reading()`."""

    def __init__(self) -> None:
        self.served: dict[str, int] = {}  # queries routed by selection, by variant
        self.pinned: dict[str, int] = {}  # arrivals that must stay on a variant, ever
        self.direct = 0  # calls to a variant's function by name, ever
        self.spilled = 0  # queries sent on: the selected variant had no room

    def record_served(self, variant: str) -> None:
        """A query routed to `variant` by selection."""
        self.served[variant] = self.served.get(variant, 0) + 1

    def record_pinned(self, variant: str) -> None:
        """An arrival whose demand must stay on `variant`."""
        self.pinned[variant] = self.pinned.get(variant, 0) + 1

    def record_direct(self, variant: str) -> None:
        """A call to `variant`'s function by name: pinned there, and counted apart."""
        self.record_pinned(variant)
        self.direct += 1

    def record_spill(self) -> None:
        """A query sent on: the variant selected had no room."""
        self.spilled += 1

    def reading(self) -> TrafficReading:
        """A frozen copy of the counters the planner reads."""
        arrivals = sum(self.served.values()) + self.direct
        return TrafficReading(arrivals=arrivals, pinned=dict(self.pinned))


@dataclass(frozen=True, slots=True)
class TrafficReading:
    """One model's counters at one instant: its queries ever, and those pinned by variant."""

    arrivals: int = 0
    pinned: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, eq=True)
class ModelEntry:
    """One registered model. Frozen: the control shell replaces it, nobody edits it."""

    model: str
    slo_ms: float
    profiles: tuple[VariantProfile, ...]
    apps: Mapping[str, Goals] = field(default_factory=dict)
    states: Mapping[str, VariantState] = field(default_factory=dict)  # by variant name
    tracked: Mapping[str, Tracked] = field(default_factory=dict)
    target: str | None = None
    # variants vertical scaling lets go: selection sends them no new query
    released: frozenset[str] = frozenset()
    overflow: str | None = None  # the variant kept warm beside the target (`[modelless]`)
    switches: int = 0  # vertical moves (upgrades and downgrades)
    # what each variant delivers against its profile here (`modelless.capacity`)
    capacity: Capacity = field(default_factory=Capacity)
    # the request path's counters: shared by every version of this entry
    traffic: Traffic = field(default_factory=Traffic, compare=False, repr=False)
    catalogue: Catalogue = field(init=False, compare=False, repr=False)
    by_function: Mapping[str, VariantCard] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        catalogue = Catalogue.of(cards_for(self.profiles, self.slo_ms))
        object.__setattr__(self, "catalogue", catalogue)
        object.__setattr__(self, "by_function", {c.function: c for c in catalogue.cards})

    @property
    def served(self) -> Mapping[str, int]:
        return self.traffic.served

    @property
    def spilled(self) -> int:
        return self.traffic.spilled

    @property
    def default_goals(self) -> Goals:
        """Goals of queries naming no application: the `default` application's when one is
        registered, else the SLO as the latency bound and no accuracy floor."""
        if DEFAULT_APP in self.apps:
            return self.app_goals(DEFAULT_APP)
        return Goals(self.slo_ms)

    @property
    def planning_goals(self) -> Goals:
        """What vertical scaling plans the model's variant for.

        These are the loosest goals of its registered applications (queries of stricter
        ones are pinned elsewhere), or the defaults when none is registered."""
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
