"""Per-query variant selection (INFaaS Algorithm 1, `getVariant`).

For a query's goals (latency bound, minimum accuracy, cost weight) over a model's variant
cards and their live states:

1. the variants that meet the goals: accuracy >= the minimum and batch-1 inference latency
   <= the bound;
2. among those that are Active (running, neither Overloaded nor Interfered) and not being
   released by vertical scaling: the application's target variant (the one model-vertical
   scaling chose) when it is one of them, else the best by score — cost per request against
   accuracy, weighed by the cost weight (1: the cheapest, INFaaS's rule; 0: the most
   accurate);
3. else, if some running ones meet the goals but are all Overloaded, Interfered or being
   released (their cores go to the target), one of them — the target if it is among them,
   else the best by score, and one being released only when no other runs: admission
   control serves the query in time or refuses it at once (429), where a cold start would
   take its load time — longer than most SLOs (INFaaS starts an Inactive variant here;
   starting variants ahead of need is vertical scaling's job). Through a whole overload
   the target is Overloaded (a 429 in each window), and by score alone the queries went
   to a released variant — an exact one, cheaper per request by its profile — which
   refused most of them (live: 10,479 of a round's 12,417 violations), or, once it had
   no instance left, woke it by a cold start that vertical scaling stopped again, seven
   times in half a minute;
4. else among the Inactive ones the one with the lowest load time plus inference latency,
   one being released only when no other would do (it is then started: the query waits
   for it like any cold start);
5. else nothing meets the goals: `NoVariant` names the closest variants (by how far each
   misses the accuracy and the latency).

`fallbacks` orders the other running variants that meet a query's goals — Active and kept
first, then the busy ones, then the released ones, each by score — for a query its first
choice cannot admit in time (the catalogue's spill-over, `ModellessCatalog.choose`).

Pure and cheap: one pass over the cards (a few microseconds per hundred variants; measured
in `bench/modelless.py`). No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from infless.modelless.cards import VariantCard, accuracy_range
from infless.modelless.profiles import Goals
from infless.modelless.states import VariantState

_ACTIVE = VariantState.ACTIVE
_INACTIVE = VariantState.INACTIVE


@dataclass(frozen=True, slots=True)
class Selected:
    card: VariantCard
    state: VariantState  # INACTIVE: selecting it starts it


@dataclass(frozen=True, slots=True)
class NoVariant:
    goals: Goals
    closest: tuple[VariantCard, ...]  # nearest misses first

    def message(self, model: str) -> str:
        wanted = [f"accuracy >= {self.goals.min_accuracy:g}"]
        if self.goals.latency_ms is not None:
            wanted.append(f"latency <= {self.goals.latency_ms:g} ms")
        near = "; ".join(
            f"{c.name} (accuracy {c.accuracy:.4f}, latency {c.latency_b1_ms:.2f} ms)"
            for c in self.closest
        )
        return f"no variant of {model!r} meets {' and '.join(wanted)}; closest: {near or 'none'}"


@dataclass(frozen=True, slots=True)
class Catalogue:
    """One model's cards with the constants the score needs, computed once per change."""

    cards: tuple[VariantCard, ...]
    min_cost: float
    accuracy_low: float
    accuracy_span: float

    @staticmethod
    def of(cards: Sequence[VariantCard]) -> Catalogue:
        low, high = accuracy_range(cards)
        min_cost = min((c.cost_per_request for c in cards), default=1.0)
        return Catalogue(tuple(cards), max(min_cost, 1e-12), low, max(high - low, 1e-9))

    def score(self, card: VariantCard, cost_weight: float) -> float:
        """Lower is better: relative cost (1 for the cheapest) weighed against the share of
        the accuracy range the card gives up."""
        cost = card.cost_per_request / self.min_cost
        loss = (self.accuracy_low + self.accuracy_span - card.accuracy) / self.accuracy_span
        return cost_weight * cost + (1.0 - cost_weight) * loss


def meets(card: VariantCard, goals: Goals) -> bool:
    if card.accuracy < goals.min_accuracy:
        return False
    return goals.latency_ms is None or card.latency_b1_ms <= goals.latency_ms


def select(
    catalogue: Catalogue,
    states: Mapping[str, VariantState],
    goals: Goals,
    target: str | None = None,
    released: Set[str] = frozenset(),
) -> Selected | NoVariant:
    """The variant a query with `goals` goes to; `states` by variant name (missing:
    Inactive), `target` the application's current variant, `released` the variants vertical
    scaling is letting go."""
    best_active: VariantCard | None = None
    best_active_score = 0.0
    best_inactive: VariantCard | None = None
    inactive_rank = (True, 0.0, 0.0)
    best_busy: VariantCard | None = None
    busy_rank = (True, True, 0.0)
    weight = goals.cost_weight
    for card in catalogue.cards:
        if not meets(card, goals):
            continue
        state = states.get(card.name, _INACTIVE)
        let_go = card.name in released
        if state is _ACTIVE and not let_go:
            if card.name == target:
                return Selected(card, state)
            score = catalogue.score(card, weight)
            if best_active is None or score < best_active_score:
                best_active, best_active_score = card, score
        elif state is _INACTIVE:
            rank = (let_go, *_start_cost(card))
            if best_inactive is None or rank < inactive_rank:
                best_inactive, inactive_rank = card, rank
        else:  # busy, or being released: the target first, those let go last
            busy = (let_go, card.name != target, catalogue.score(card, weight))
            if best_busy is None or busy < busy_rank:
                best_busy, busy_rank = card, busy
    if best_active is not None:
        return Selected(best_active, _ACTIVE)
    if best_busy is not None:
        return Selected(best_busy, states[best_busy.name])
    if best_inactive is not None:
        return Selected(best_inactive, _INACTIVE)
    return NoVariant(goals, closest(catalogue.cards, goals))


def fallbacks(
    catalogue: Catalogue,
    states: Mapping[str, VariantState],
    goals: Goals,
    first: str,
    released: Set[str] = frozenset(),
) -> list[VariantCard]:
    """The running variants other than `first` that meet `goals`, the best first: Active and
    not being released before the others, then by score. Inactive ones are left out (a
    cold start takes longer than most SLOs)."""
    weight = goals.cost_weight
    found = [
        card
        for card in catalogue.cards
        if card.name != first
        and states.get(card.name, _INACTIVE) is not _INACTIVE
        and meets(card, goals)
    ]

    def rank(card: VariantCard) -> tuple[bool, bool, float]:
        let_go = card.name in released
        kept = states.get(card.name) is _ACTIVE and not let_go
        return (not kept, let_go, catalogue.score(card, weight))

    return sorted(found, key=rank)


def _start_cost(card: VariantCard) -> tuple[float, float]:
    return (card.load_ms + card.latency_b1_ms, card.cost_per_request)


def closest(cards: Sequence[VariantCard], goals: Goals, count: int = 3) -> tuple[VariantCard, ...]:
    """The variants nearest to meeting `goals`: by the accuracy they lack (in points) plus
    the share by which they exceed the latency bound."""

    def miss(card: VariantCard) -> float:
        lacking = max(0.0, goals.min_accuracy - card.accuracy) * 100.0
        bound = goals.latency_ms
        over = 0.0 if bound is None else max(0.0, card.latency_b1_ms / max(bound, 1e-9) - 1.0)
        return lacking + over

    return tuple(sorted(cards, key=lambda c: (miss(c), c.name))[:count])
