"""Per-query variant selection: goals, states, the target, impossible goals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infless.errors import GoalsUnmet, InvalidInput
from infless.modelless.cards import (
    VariantCard,
    card_for,
    cards_for,
    instance_qps,
    meets_slo_at,
    slo_problem,
    sustained_qps,
)
from infless.modelless.catalog import GOAL_HEADERS, ModelEntry, ModellessCatalog
from infless.modelless.profiles import Goals
from infless.modelless.selection import Catalogue, NoVariant, Selected, fallbacks, select
from infless.modelless.states import VariantState
from tests.unit.modelless.support import profile, three_variants

ACTIVE, INACTIVE = VariantState.ACTIVE, VariantState.INACTIVE
OVERLOADED, INTERFERED = VariantState.OVERLOADED, VariantState.INTERFERED


def catalogue(slo_ms: float = 50.0) -> Catalogue:
    return Catalogue.of(cards_for(three_variants(), slo_ms))


def chosen(result: Selected | NoVariant) -> str:
    assert isinstance(result, Selected), result
    return result.card.name


def test_card_takes_the_most_requests_per_core_within_the_slo() -> None:
    card = card_for(profile("fp32", 1.0, 4.0, 2.0), slo_ms=50.0)
    assert card is not None
    # b16 at 1 core: 34 ms > SLO/2 = 25; b8: 18 ms -> 444 rps per core; b16 at 2 cores:
    # 21.25 ms -> 753 rps / 2 cores = 376 per core. b8 c1 wins.
    assert (card.batch_size, card.cpus) == (8, 1)
    assert card.qps == pytest.approx(8 * 1000.0 / 18.0)
    assert card.latency_b1_ms == pytest.approx(4.0 / 1.6)


def test_a_slowed_down_variant_batches_less_and_serves_less() -> None:
    card = card_for(profile("fp32", 1.0, 4.0, 2.0), slo_ms=50.0)
    assert card is not None
    assert sustained_qps(card, 1.0) == pytest.approx(card.qps)
    # at half speed b8 takes 36 ms > 25: b4 (20 ms) is the largest feasible batch, and it
    # serves 200 rps — less than half of b8's 444
    assert sustained_qps(card, 0.5) == pytest.approx(4 * 1000.0 / 20.0)
    # so slow that no batch meets the SLO: batch 1's rate
    assert sustained_qps(card, 0.05) == pytest.approx(1000.0 / 80.0)


def test_a_batch_whose_mean_fits_but_whose_tail_does_not_is_not_counted() -> None:
    """The data plane serves a batch only where its tail fits (half the SLO for a batch):
    at a measured tail of 1.5 x the mean, b8 (18 ms, 27 at its tail) is out and b4 (10 ms,
    15) is the best left — also for an instance configured at b8."""
    card = card_for(profile("fp32", 1.0, 4.0, 2.0), slo_ms=50.0)
    assert card is not None
    assert sustained_qps(card, 1.0, tail=1.5) == pytest.approx(4 * 1000.0 / 10.0)
    assert instance_qps(card, 8, 1, 1.0) == pytest.approx(8 * 1000.0 / 18.0)
    assert instance_qps(card, 8, 1, 1.0, tail=1.5) == pytest.approx(4 * 1000.0 / 10.0)
    assert instance_qps(card, 2, 1, 1.0) == pytest.approx(2 * 1000.0 / 6.0)  # not b4's
    # at a tenth of its speed batch 1 takes 40 ms: within the SLO by its mean, not at a
    # tail of 1.5 x (60 ms) — then the variant does not meet the SLO at all
    assert meets_slo_at(card, 0.1)
    assert not meets_slo_at(card, 0.1, tail=1.5)


def test_a_batch_size_is_judged_at_what_the_instances_measured_for_it() -> None:
    """Live, fp32's batch 8 of lstm-2365 took 44–58 ms on a busy host while its batch 1
    took about its profile: one factor per variant, measured at the small batches served,
    does not see it. Where the instances measured a batch size, that time counts."""
    card = card_for(profile("fp32", 1.0, 4.0, 2.0), slo_ms=50.0)
    assert card is not None
    measured = {1: 4.0, 8: 40.0}  # b8 past the 25 ms a batch may take; b4 not measured
    assert sustained_qps(card, 1.0, measured=measured) == pytest.approx(4 * 1000.0 / 10.0)
    assert instance_qps(card, 8, 1, 1.0, measured=measured) == pytest.approx(400.0)
    assert meets_slo_at(card, 0.1, measured={1: 4.0})  # b1 measured as profiled


def test_failed_variants_have_no_card() -> None:
    assert card_for(profile("compile", 1.0, 1.0, 1.0, status="failed"), 50.0) is None


def test_a_variant_too_slow_for_the_slo_is_reported_as_such() -> None:
    slow = profile("fp32", 1.0, 40.0, 5.0)  # batch 1 over a 20-ms SLO at 1 and 2 cores
    assert card_for(slow, slo_ms=20.0) is None
    assert cards_for([slow, profile("int8", 0.97, 2.0, 0.5)], 20.0)[0].name == "int8"
    problem = slo_problem(slow, 20.0)
    assert problem is not None
    assert "25.0 ms" in problem  # the fastest batch 1: 40 ms / 1.6 at 2 cores
    assert "20-ms SLO" in problem
    assert slo_problem(slow, 60.0) is None  # batch 1 fits a looser SLO
    assert slo_problem(profile("compile", 1.0, 1.0, 1.0, status="failed"), 20.0) is None


def test_cheapest_active_variant_meeting_the_goals() -> None:
    states = {"fp32": ACTIVE, "bf16": ACTIVE, "int8": ACTIVE}
    assert chosen(select(catalogue(), states, Goals(min_accuracy=0.9))) == "int8"
    assert chosen(select(catalogue(), states, Goals(min_accuracy=0.99))) == "bf16"
    assert chosen(select(catalogue(), states, Goals(min_accuracy=1.0))) == "fp32"


def test_cost_weight_zero_prefers_accuracy() -> None:
    states = {"fp32": ACTIVE, "bf16": ACTIVE, "int8": ACTIVE}
    goals = Goals(min_accuracy=0.9, cost_weight=0.0)
    assert chosen(select(catalogue(), states, goals)) == "fp32"


def test_latency_goal_excludes_slow_variants() -> None:
    states = {"fp32": ACTIVE, "bf16": ACTIVE, "int8": ACTIVE}
    # b1 at 2 cores: fp32 2.5 ms, bf16 1.875 ms, int8 1.25 ms
    goals = Goals(latency_ms=2.0, min_accuracy=0.99, cost_weight=0.0)
    assert chosen(select(catalogue(), states, goals)) == "bf16"


def test_the_target_wins_among_active_variants_that_meet_the_goals() -> None:
    states = {"fp32": ACTIVE, "int8": ACTIVE}
    assert chosen(select(catalogue(), states, Goals(), target="fp32")) == "fp32"
    # ... but not when the query's goals exclude it
    assert chosen(select(catalogue(), states, Goals(latency_ms=1.5), target="fp32")) == "int8"


def test_overloaded_and_interfered_variants_are_avoided() -> None:
    states = {"fp32": ACTIVE, "bf16": INTERFERED, "int8": OVERLOADED}
    assert chosen(select(catalogue(), states, Goals(min_accuracy=0.9))) == "fp32"


def test_a_variant_being_released_serves_only_when_no_other_runs() -> None:
    states = {"fp32": ACTIVE, "bf16": OVERLOADED}
    got = select(catalogue(), states, Goals(min_accuracy=0.9), "int8", released={"fp32"})
    assert chosen(got) == "bf16"  # fp32 gives its core to int8: the busy bridge serves
    got = select(catalogue(), {"fp32": ACTIVE}, Goals(min_accuracy=0.9), released={"fp32"})
    assert isinstance(got, Selected)
    assert (got.card.name, got.state) == ("fp32", ACTIVE)  # rather than a cold start


def test_a_busy_target_keeps_its_queries_from_a_released_variant_cheaper_by_its_profile() -> None:
    """Through an overload the target is Overloaded in every window; int8, the variant
    moved away from and cheaper per request by its profile, serves on while it drains. By
    score alone the queries would go to int8; they stay with the target."""
    states = {"int8": ACTIVE, "bf16": OVERLOADED}
    goals = Goals(min_accuracy=0.9)
    assert chosen(select(catalogue(), states, goals)) == "int8"  # nothing released
    assert chosen(select(catalogue(), states, goals, "bf16", released={"int8"})) == "bf16"
    # busy too, or not yet started: still the target
    busy = {"int8": OVERLOADED, "bf16": INTERFERED}
    assert chosen(select(catalogue(), busy, goals, "bf16", released={"int8"})) == "bf16"
    # a busy variant that is neither the target nor released comes before a released one
    three = {"int8": OVERLOADED, "fp32": OVERLOADED}
    assert chosen(select(catalogue(), three, goals, "bf16", released={"int8"})) == "fp32"
    # nothing else running, nothing kept: a released variant is not cold-started first
    cold = select(catalogue(), {}, goals, "bf16", released={"fp32"})
    assert isinstance(cold, Selected)
    assert (cold.card.name, cold.state) == ("bf16", INACTIVE)


def test_with_nothing_active_the_fastest_to_load_and_run_is_started() -> None:
    result = select(catalogue(), {}, Goals(min_accuracy=0.9))
    assert isinstance(result, Selected)
    assert result.state is INACTIVE
    assert result.card.name == "fp32"  # 300 ms load + 2.5 ms beats 400 + 1.9 and 600 + 1.25


def test_only_busy_variants_left_the_best_busy_one_serves() -> None:
    states = {"fp32": OVERLOADED, "bf16": OVERLOADED, "int8": OVERLOADED}
    result = select(catalogue(), states, Goals(min_accuracy=0.99))
    assert isinstance(result, Selected)
    assert result.state is OVERLOADED
    assert result.card.name == "bf16"


def test_impossible_goals_name_the_closest_variants() -> None:
    result = select(catalogue(), {}, Goals(latency_ms=1.0, min_accuracy=0.999))
    assert isinstance(result, NoVariant)
    # fp32 lacks only latency (2.5x the bound: 1.5), int8 lacks 2.9 points plus 0.25
    assert [c.name for c in result.closest] == ["bf16", "fp32", "int8"]
    assert "closest: bf16" in result.message("m")


def entry(target: str | None = None, apps: dict[str, Goals] | None = None) -> ModelEntry:
    """Three variants, all Active, with a `strict` application (and `apps`)."""
    return ModelEntry(
        model="m",
        slo_ms=50.0,
        profiles=tuple(three_variants()),
        apps={"strict": Goals(None, 0.999, 1.0), **(apps or {})},
        states={"fp32": ACTIVE, "bf16": ACTIVE, "int8": ACTIVE},
        target=target,
    )


def test_catalog_chooses_from_headers_and_applications() -> None:
    catalog = ModellessCatalog()
    catalog.publish(entry())
    got = catalog.choose("m", {GOAL_HEADERS["min_accuracy"]: "0.9"})
    assert got is not None
    assert got[1].name == "int8"
    got = catalog.choose("m", {GOAL_HEADERS["app"]: "strict"})
    assert got is not None
    assert got[1].function == "m--fp32"
    assert catalog.choose("other", None) is None


def test_catalog_refuses_bad_goals_and_unknown_apps() -> None:
    catalog = ModellessCatalog()
    catalog.publish(entry())
    with pytest.raises(InvalidInput, match="X-Infless-Min-Accuracy"):
        catalog.choose("m", {GOAL_HEADERS["min_accuracy"]: "high"})
    with pytest.raises(InvalidInput, match="must be in"):
        catalog.choose("m", {GOAL_HEADERS["min_accuracy"]: "1.5"})
    with pytest.raises(InvalidInput, match="not registered"):
        catalog.choose("m", {GOAL_HEADERS["app"]: "nope"})
    with pytest.raises(GoalsUnmet) as info:
        catalog.choose("m", {GOAL_HEADERS["latency_ms"]: "0.5"})
    assert info.value.status == 422
    assert next(c["variant"] for c in info.value.closest) == "int8"


def test_queries_the_target_cannot_serve_are_pinned() -> None:
    catalog = ModellessCatalog()
    e = entry(target="int8")
    catalog.publish(e)
    catalog.choose("m", {GOAL_HEADERS["min_accuracy"]: "1.0"})  # int8 cannot: fp32, pinned
    catalog.choose("m", None)  # the target serves: not pinned
    catalog.pin("m--bf16")  # addressed by name
    assert e.traffic.pinned == {"fp32": 1, "bf16": 1}
    assert e.served == {"fp32": 1, "int8": 1}


def test_a_default_application_governs_queries_that_name_none() -> None:
    catalog = ModellessCatalog()
    e = entry(apps={"default": Goals(None, 0.99, 1.0)})
    catalog.publish(e)
    assert e.default_goals == Goals(50.0, 0.99, 1.0)
    got = catalog.choose("m", None)
    assert got is not None
    assert got[1].name == "bf16"


def test_a_busy_running_variant_is_preferred_to_a_cold_start() -> None:
    # admission control answers in time or refuses at once; a cold start takes its load time
    result = select(catalogue(), {"fp32": OVERLOADED}, Goals(min_accuracy=0.9), target="int8")
    assert isinstance(result, Selected)
    assert result.card.name == "fp32"


def test_fallbacks_are_the_other_running_variants_meeting_the_goals_kept_ones_first() -> None:
    states = {"fp32": ACTIVE, "bf16": OVERLOADED, "int8": ACTIVE}
    names = [c.name for c in fallbacks(catalogue(), states, Goals(min_accuracy=0.9), "fp32")]
    assert names == ["int8", "bf16"]  # Active before busy
    all_active = dict.fromkeys(states, ACTIVE)
    released = fallbacks(catalogue(), all_active, Goals(min_accuracy=0.9), "fp32", {"int8"})
    assert [c.name for c in released] == ["bf16", "int8"]  # being let go: after the kept
    assert fallbacks(catalogue(), {"fp32": ACTIVE}, Goals(min_accuracy=0.9), "fp32") == []
    strict = fallbacks(catalogue(), states, Goals(min_accuracy=0.99), "fp32")
    assert [c.name for c in strict] == ["bf16"]  # int8 misses the goal


def test_a_query_the_target_cannot_admit_spills_over_to_a_running_variant_that_can() -> None:
    catalog = ModellessCatalog()
    e = entry(target="fp32")
    catalog.publish(e)
    room = {"fp32": False, "bf16": False, "int8": True}
    got = catalog.choose("m", None, lambda card, share: room[card.name])
    assert got is not None
    assert got[1].name == "int8"  # bf16 is cheaper than fp32 but has no room either
    assert e.spilled == 1
    assert e.served == {"int8": 1}
    room["fp32"] = True
    got = catalog.choose("m", None, lambda card, share: room[card.name])
    assert got is not None
    assert got[1].name == "fp32"  # the target has room again: it serves
    room = dict.fromkeys(room, False)
    got = catalog.choose("m", None, lambda card, share: room[card.name])
    assert got is not None
    assert got[1].name == "fp32"  # no room anywhere: the target, which refuses it
    assert e.spilled == 1


def test_a_query_stays_within_the_spill_share_else_goes_where_it_is_served_in_time() -> None:
    """The target while it would serve the query within `spill_share` of the SLO; else
    another running variant that would; else the first that would within the whole SLO;
    and the choice says it is held to the SLO (another variant to go to, room within it)."""
    catalog = ModellessCatalog()
    e = entry(target="fp32")
    catalog.publish(e)
    room = {"fp32": 1.0, "bf16": 1.0, "int8": 0.5}  # the least share each serves within

    def has_room(card: VariantCard, share: float) -> bool:
        return share >= room[card.name]

    got = catalog.choose("m", None, has_room, spill_share=0.7)
    assert got is not None
    assert (got.card.name, got.held) == ("int8", True)  # fp32 only past 0.7
    room["int8"] = 2.0  # int8 has no room at all now
    got = catalog.choose("m", None, has_room, spill_share=0.7)
    assert got is not None
    assert (got.card.name, got.held) == ("fp32", True)  # within the SLO: the target
    room["fp32"] = 0.6
    got = catalog.choose("m", None, has_room, spill_share=0.7)
    assert got is not None
    assert got.card.name == "fp32"
    assert e.spilled == 1


def test_a_variant_alone_is_not_held_and_not_probed() -> None:
    catalog = ModellessCatalog()
    e = replace(entry(target="fp32"), states={"fp32": ACTIVE})
    catalog.publish(e)
    probed: list[str] = []

    def has_room(card: VariantCard, share: float) -> bool:
        probed.append(card.name)
        return False

    got = catalog.choose("m", None, has_room, spill_share=0.7)
    assert got is not None
    assert (got.card.name, got.held, probed) == ("fp32", False, [])


def test_a_cold_start_is_not_probed_for_room() -> None:
    catalog = ModellessCatalog()
    e = ModelEntry(
        model="m", slo_ms=50.0, profiles=tuple(three_variants())
    )  # nothing runs: every variant Inactive
    catalog.publish(e)
    probed: list[str] = []

    def has_room(card: VariantCard, share: float) -> bool:
        probed.append(card.name)
        return False

    got = catalog.choose("m", None, has_room)
    assert got is not None
    assert got[1].name == "fp32"  # the quickest to load and run
    assert probed == []


def test_the_manifest_knows_every_transform_the_generator_makes() -> None:
    from infless.modelless.profiles import TRANSFORMS
    from infless.models.package import TRANSFORM_NAMES

    assert set(TRANSFORMS) == TRANSFORM_NAMES - {""}
