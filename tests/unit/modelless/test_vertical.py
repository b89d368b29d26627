"""Model-vertical scaling: replicate or switch by the ILP's cost, delays, retargeting, and
the tail headroom an accurate variant needs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infless.modelless.capacity import Capacity, ServiceTimes, outserves
from infless.modelless.cards import cards_for
from infless.modelless.config import ModellessConfig
from infless.modelless.overflow import overflow_card
from infless.modelless.profiles import Goals, LatencyPoint, VariantProfile
from infless.modelless.vertical import (
    AppLoad,
    Hold,
    decide,
    options,
    retarget,
    tail_fits,
)
from tests.unit.modelless.support import profile, three_variants

CFG = ModellessConfig(scale_down_ticks=3)
CARDS = cards_for(three_variants(), 50.0)
QPS = {c.name: c.qps for c in CARDS}


def load(
    rps: float, live: dict[str, int], goals: Goals | None = None, free: int | None = None
) -> AppLoad:
    return AppLoad("m", goals or Goals(latency_ms=50.0), CARDS, live, rps, free)


def test_cost_is_cores_plus_weighted_load_time_of_new_instances() -> None:
    by_name = {o.card.name: o for o in options(load(0.0, {"fp32": 1}), CFG)}
    assert by_name["fp32"].cost == pytest.approx(1.0)  # already running: no load cost
    assert by_name["int8"].cost == pytest.approx(1.0 + 0.2 * 0.6)


def test_at_low_load_equal_cost_keeps_the_most_accurate() -> None:
    got = decide(load(10.0, {}), None, Hold(), CFG)
    assert (got.target, got.move) == ("fp32", "start")  # every option is one core
    got = decide(load(10.0, {"fp32": 1}), "fp32", Hold(), CFG)
    assert (got.target, got.move) == ("fp32", "keep")


def test_load_beyond_the_current_variant_upgrades_at_once() -> None:
    rps = QPS["fp32"] * 1.5  # fp32 needs two instances; int8 carries it on one core
    got = decide(load(rps, {"fp32": 1}), "fp32", Hold(), CFG)
    assert (got.target, got.move, got.reason) == ("int8", "upgrade", "load")


def test_pressure_is_weighed_in_what_the_live_instances_sustain_at_their_sizes() -> None:
    """Algorithm 1 sizes the instances, not always at the card's configuration: two small
    fp32 instances count as two of the card's, yet sustain far less. The load presses on
    what they sustain, so the upgrade is not missed while fp32 keeps being widened."""
    rps = QPS["fp32"] * 1.5  # two of the card's fp32 instances would carry it
    two = {"fp32": 2}
    counted = decide(load(rps, two), "fp32", Hold(), CFG)
    assert counted.move != "upgrade"  # in instances, nothing presses
    small = replace(load(rps, two), live_qps={"fp32": QPS["fp32"] * 0.8})
    got = decide(small, "fp32", Hold(), CFG)
    assert (got.target, got.move) == ("int8", "upgrade")
    roomy = replace(load(rps, two), live_qps={"fp32": QPS["fp32"] * 2.0})
    assert decide(roomy, "fp32", Hold(), CFG).move != "upgrade"


def test_replicating_wins_when_no_variant_is_cheaper() -> None:
    rps = QPS["int8"] * 1.5
    got = decide(load(rps, {"int8": 1}), "int8", Hold(), CFG)
    assert (got.target, got.move) == ("int8", "replicate")
    assert got.options[0].instances == 2


def test_accuracy_goal_limits_the_upgrade() -> None:
    rps = QPS["bf16"] * 0.85  # fp32 needs two instances, bf16 one, int8 is not accurate enough
    got = decide(
        load(rps, {"fp32": 1}, Goals(latency_ms=50.0, min_accuracy=0.99)), "fp32", Hold(), CFG
    )
    assert got.target == "bf16"


def test_a_downgrade_waits_for_consecutive_ticks() -> None:
    low = load(5.0, {"int8": 1})
    hold = Hold()
    for tick in range(CFG.scale_down_ticks - 1):
        got = decide(low, "int8", hold, CFG)
        assert (got.target, got.move) == ("int8", "keep"), tick
        hold = got.hold
    got = decide(low, "int8", hold, CFG)
    assert (got.target, got.move, got.reason) == ("fp32", "downgrade", "steady")


def test_a_load_spike_resets_the_downgrade_delay() -> None:
    got = decide(load(5.0, {"int8": 1}), "int8", Hold(), CFG)
    assert got.hold.ticks == 1
    got = decide(load(QPS["int8"] * 0.9, {"int8": 1}), "int8", got.hold, CFG)
    assert got.hold == Hold()  # int8 is the cheapest again


def test_options_that_do_not_fit_the_cores_are_dropped() -> None:
    rps = QPS["fp32"] * 2.5  # fp32: 3 instances = 3 cores; one core free
    names = [o.card.name for o in options(load(rps, {"fp32": 0}, free=1), CFG)]
    assert "fp32" not in names
    assert names[0] == "int8"
    got = decide(load(rps, {"fp32": 1}, free=0), "fp32", Hold(), CFG)  # it runs, is out
    assert (got.target, got.move, got.reason) == ("int8", "upgrade", "unfit")


def test_a_variant_out_of_the_options_goes_where_the_rise_is_heading() -> None:
    """Mid-step the measured load is the part of the step seen so far: fp32 no longer fits
    (two instances, one core), bf16 would carry what arrived on one — but the rate
    planned for ahead of the rise needs two of bf16, and int8 carries it on one core."""
    rps = QPS["fp32"] * 1.2
    seen = load(rps, {"fp32": 1}, free=0)
    got = decide(seen, "fp32", Hold(), CFG)
    assert (got.target, got.reason) == ("bf16", "unfit")
    got = decide(replace(seen, ahead_rps=QPS["bf16"] * 1.5), "fp32", Hold(), CFG)
    assert (got.target, got.move, got.reason) == ("int8", "upgrade", "unfit")
    # a measured load within the current variant's instances: the rate ahead moves nothing
    calm = replace(load(QPS["fp32"] * 0.5, {"fp32": 1}, free=0), ahead_rps=QPS["bf16"] * 1.5)
    assert decide(calm, "fp32", Hold(), CFG).target == "fp32"


def test_retarget_moves_the_movable_demand_once_the_target_serves() -> None:
    variants = ["fp32", "int8"]
    rates = {"fp32": 100.0, "int8": 20.0}
    # the application's 120 rps (one estimate), 10 of them pinned to fp32
    moved = retarget(120.0, rates, {"fp32": 10.0}, "int8", True, variants)
    assert moved == {"fp32": 10.0, "int8": 110.0}
    starting = retarget(120.0, rates, {"fp32": 10.0}, "int8", False, variants)
    assert starting == {"fp32": 100.0, "int8": 110.0}  # the old variant serves meanwhile


def test_a_variant_short_of_its_profile_counts_as_slower() -> None:
    half = QPS["fp32"] * 0.5  # the profile says one fp32 is plenty
    assert decide(load(half, {"fp32": 1}), "fp32", Hold(), CFG).move == "keep"
    measured = Capacity(own={"fp32": 0.4})
    short = AppLoad("m", Goals(latency_ms=50.0), CARDS, {"fp32": 1}, half, None, measured)
    got = decide(short, "fp32", Hold(), CFG)  # it delivers 40 %: two would be needed
    assert (got.target, got.move) == ("bf16", "upgrade")


def test_variants_not_running_are_judged_with_the_host_contention() -> None:
    # at 500 rps one bf16 suffices by its profile (592 rps): the upgrade goes there ...
    idle = AppLoad(
        "m", Goals(latency_ms=50.0), CARDS, {"fp32": 1}, 500.0, None, Capacity(own={"fp32": 0.5})
    )
    assert decide(idle, "fp32", Hold(), CFG).target == "bf16"
    # ... but where everything runs at half its profile, bf16 would need two: int8
    busy = AppLoad(
        "m",
        Goals(latency_ms=50.0),
        CARDS,
        {"fp32": 1},
        500.0,
        None,
        Capacity(host=0.5, own={"fp32": 0.5}),
    )
    got = decide(busy, "fp32", Hold(), CFG)
    assert (got.target, got.move) == ("int8", "upgrade")


def test_a_downgrade_needs_headroom_over_the_load() -> None:
    cfg = ModellessConfig(scale_down_ticks=1, downgrade_headroom=0.5)
    # at 400 rps one bf16 (592 rps; 493 on a host `STEADY_SPEED_MARGIN` slower) carries
    # the load with less than half of it again: int8 stays
    assert decide(load(400.0, {"int8": 1}), "int8", Hold(), cfg).move == "keep"
    exact = ModellessConfig(scale_down_ticks=1, downgrade_headroom=0.0)
    assert decide(load(400.0, {"int8": 1}), "int8", Hold(), exact).target == "bf16"
    # at 280 rps, with half as much again, one bf16 still does: the more accurate one
    got = decide(load(280.0, {"int8": 1}), "int8", Hold(), cfg)
    assert (got.target, got.move) == ("bf16", "downgrade")


def test_under_pressure_a_switch_must_cost_less_than_replicating() -> None:
    cfg = ModellessConfig(load_weight_per_s=0.0)  # load times aside: costs are cores
    # int8 serves at 35 % of its profile (589 rps an instance), bf16 would give 592: at
    # 600 rps both need two instances — the same cost, so int8 is replicated, not swapped
    # for the more accurate bf16 in the middle of a burst
    slow = AppLoad(
        "m", Goals(latency_ms=50.0), CARDS, {"int8": 1}, 600.0, None, Capacity(own={"int8": 0.35})
    )
    got = decide(slow, "int8", Hold(), cfg)
    assert (got.target, got.move) == ("int8", "replicate")


def test_the_overflow_variant_is_the_cheapest_per_request_meeting_the_goals() -> None:
    loose = overflow_card(CARDS, Goals(latency_ms=50.0))
    assert loose is not None
    assert loose.name == "int8"
    strict = overflow_card(CARDS, Goals(latency_ms=50.0, min_accuracy=0.99))
    assert strict is not None
    assert strict.name == "bf16"
    assert overflow_card(CARDS, Goals(latency_ms=50.0, min_accuracy=1.1)) is None


def test_the_overflow_variants_core_is_not_another_options_to_take() -> None:
    # two cores, both held: int8 (the overflow) and bf16; fp32 may take bf16's core only
    live = {"int8": 1, "bf16": 1}
    kept = replace(load(10.0, live, free=0), overflow="int8")
    assert {o.card.name for o in options(kept, CFG)} == {"int8", "bf16", "fp32"}
    # with one core held by the overflow and none free, nothing else fits beside it
    alone = replace(load(10.0, {"int8": 1}, free=0), overflow="int8")
    assert [o.card.name for o in options(alone, CFG)] == ["int8"]
    # without an overflow variant its core is anyone's
    names = {o.card.name for o in options(load(10.0, {"int8": 1}, free=0), CFG)}
    assert names == {"int8", "bf16", "fp32"}


def test_under_pressure_the_load_never_moves_to_a_slower_variant() -> None:
    # bf16 refuses on a busy host and measures 30 % of its profile; fp32, barely used,
    # measures 90 %: by the factors one fp32 would carry what two bf16 would. The move
    # would trade a variant that serves more per core for one that serves less.
    goals = Goals(latency_ms=50.0, min_accuracy=0.99)  # int8 is out
    measured = Capacity(own={"bf16": 0.3, "fp32": 0.9})
    busy = AppLoad("m", goals, CARDS, {"bf16": 1}, 300.0, None, measured)
    by_name = {o.card.name: o for o in options(busy, CFG)}
    assert by_name["fp32"].instances < by_name["bf16"].instances  # what the factors say
    got = decide(busy, "bf16", Hold(), CFG)
    assert (got.target, got.move) == ("bf16", "replicate")


def test_a_downgrade_never_goes_to_a_variant_this_host_runs_past_the_slo() -> None:
    cfg = ModellessConfig(scale_down_ticks=1)
    tight = cards_for(three_variants(), 5.0)  # batch 1: fp32 4 ms, bf16 3 ms, int8 2 ms

    def low(host: float) -> AppLoad:
        return AppLoad(
            "m",
            Goals(latency_ms=5.0),
            tight,
            {"int8": 1},
            5.0,
            None,
            Capacity(host=host, own={"int8": host}),
        )

    # profiled speed: back to the exact variant
    assert decide(low(1.0), "int8", Hold(), cfg).target == "fp32"
    # at 0.7 of it fp32 takes 5.7 ms at batch 1, past the 5-ms SLO; bf16's 4.3 ms fits
    got = decide(low(0.7), "int8", Hold(), cfg)
    assert (got.target, got.move) == ("bf16", "downgrade")
    # at 0.5 only int8 fits: it stays
    assert decide(low(0.5), "int8", Hold(), cfg).move == "keep"


# -- the tail: accuracy only with headroom under the SLO at this host ---------------------------
# like lstm-2365 at a 20-ms SLO: fp32 13 ms, bf16 4.5 ms, both served one query at a time;
# int8 is below the accuracy goal
NEAR = cards_for(
    [
        profile("fp32", 1.0, 13.0, 9.0),
        profile("bf16", 0.977, 4.5, 6.0),
        profile("int8", 0.945, 1.8, 0.3),
    ],
    20.0,
)
NEAR_GOALS = Goals(latency_ms=20.0, min_accuracy=0.95)


def near(live: dict[str, int], tail_ratio: float | None, overflow: str | None = "bf16") -> AppLoad:
    """19 rps of the application, with the host's measured tail stretch (None: unmeasured)."""
    return AppLoad(
        model="m",
        goals=NEAR_GOALS,
        cards=NEAR,
        live=live,
        load_rps=19.0,
        capacity=Capacity(tail_ratio=tail_ratio),
        overflow=overflow,
    )


def test_the_cards_near_the_slo_serve_one_query_at_a_time() -> None:
    by_name = {c.name: c for c in NEAR}
    assert (by_name["fp32"].batch_size, by_name["bf16"].batch_size) == (1, 1)
    assert overflow_card(NEAR, NEAR_GOALS) == by_name["bf16"]


def test_a_variant_fits_the_tail_only_while_its_predicted_p99_leaves_headroom() -> None:
    fp32 = next(c for c in NEAR if c.name == "fp32")
    cfg = ModellessConfig(tail_share=0.7)  # 14 ms of the 20-ms SLO
    assert tail_fits(fp32, Capacity(), cfg)  # nothing measured: as profiled
    assert tail_fits(fp32, Capacity(tail_ratio=1.0), cfg)  # 13 ms
    assert not tail_fits(fp32, Capacity(tail_ratio=1.2), cfg)  # 15.6 ms
    # a host running it at 90 % of its profile: 14.4 ms before any queueing
    assert not tail_fits(fp32, Capacity(own={"fp32": 0.9}, tail_ratio=1.0), cfg)
    # 18 ms, as a share of 0.9
    assert tail_fits(fp32, Capacity(tail_ratio=18.0 / 13.0), ModellessConfig(tail_share=0.9))


def test_until_the_tail_is_measured_a_one_at_a_time_app_starts_where_fixed_would() -> None:
    got = decide(near({}, None), None, Hold(), CFG)
    assert (got.target, got.move) == ("bf16", "start")  # the overflow variant
    # measured headroom: the accurate variant
    assert decide(near({}, 1.0), None, Hold(), CFG).target == "fp32"
    # measured and short of it: not fp32 (15.6 ms of a 14-ms allowance)
    assert decide(near({}, 1.2), None, Hold(), CFG).target == "bf16"
    # no overflow variant to start on: the profile is all there is
    assert decide(near({}, None, overflow=None), None, Hold(), CFG).target == "fp32"
    # batching variants absorb the tail in their planned wait: the most accurate at once
    batching = AppLoad(
        model="m",
        goals=Goals(latency_ms=50.0),
        cards=CARDS,
        live={},
        load_rps=10.0,
        overflow="int8",
    )
    assert decide(batching, None, Hold(), CFG).target == "fp32"


def test_a_target_whose_tail_no_longer_fits_moves_at_once_to_a_quicker_one() -> None:
    running = {"fp32": 1, "bf16": 1}
    assert decide(near(running, 1.0), "fp32", Hold(), CFG).move == "keep"
    got = decide(near(running, 1.6), "fp32", Hold(), CFG)  # fp32's p99 here: 20.8 ms
    assert (got.target, got.move, got.reason) == ("bf16", "upgrade", "tail")  # at once
    # where nothing quicker fits either (bf16 at 4.5 ms x 4 = 18 ms), the target stays
    got = decide(near(running, 4.0), "fp32", Hold(), CFG)
    assert (got.target, got.move) == ("fp32", "keep")


def test_a_downgrade_to_accuracy_needs_a_measured_tail_with_headroom() -> None:
    cfg = ModellessConfig(scale_down_ticks=1)
    got = decide(near({"bf16": 1}, 1.6), "bf16", Hold(), cfg)
    assert (got.target, got.move) == ("bf16", "keep")
    got = decide(near({"bf16": 1}, 1.0), "bf16", Hold(), cfg)
    assert (got.target, got.move) == ("fp32", "downgrade")


# today's lstm-2365 profiles on this host (ms at 1 core): fp32's batches 2-8 only just fit
# half of a 50-ms SLO, bf16's batch 4 with room
KNIFE_EDGE = cards_for(
    [
        VariantProfile(
            model="m",
            name=name,
            transform=name,
            status="ready",
            accuracy=accuracy,
            metric="top1-agreement",
            latency=[LatencyPoint(b, 1, ms) for b, ms in points.items()],
            load_ms=50.0,
            peak_memory_bytes=300 << 20,
        )
        for name, accuracy, points in (
            ("fp32", 1.0, {1: 14.3, 2: 20.8, 4: 21.5, 8: 23.5, 16: 35.8}),
            ("bf16", 0.9727, {1: 6.8, 2: 10.4, 4: 14.4, 8: 25.6, 16: 48.4}),
        )
    ],
    50.0,
)
KNIFE_GOALS = Goals(latency_ms=50.0, min_accuracy=0.95)


def test_the_overflow_variant_is_the_cheapest_per_request_at_the_speed_measured_here() -> None:
    as_profiled = overflow_card(KNIFE_EDGE, KNIFE_GOALS)
    assert as_profiled is not None
    assert as_profiled.name == "fp32"  # 340 rps a core at batch 8 against bf16's 278
    # a host running everything at 0.75 of its profile: fp32's batches past 1 miss half the
    # SLO (52 rps a core), bf16's batch 4 still fits (208)
    slow = overflow_card(KNIFE_EDGE, KNIFE_GOALS, Capacity(host=0.75))
    assert slow is not None
    assert slow.name == "bf16"
    # fp32's instance measured its batches past 1 at the 0.75 a slower host gives
    measured = {b: ms / 0.75 for b, _, ms in KNIFE_EDGE[0].points}
    slow_fp32 = overflow_card(
        KNIFE_EDGE, KNIFE_GOALS, Capacity(service={"fp32": ServiceTimes(1, measured)})
    )
    assert slow_fp32 is not None
    assert slow_fp32.name == "bf16"


def test_the_overflow_variant_is_judged_at_the_hosts_speed_not_its_own_factor() -> None:
    """bf16, the target, refuses through a peak and its own factor reads 0.5 (what it
    delivered): by that, the fp32 standby would look twice as cheap and keep its core.
    At the host's speed bf16 is cheaper, and the standby moves to it."""
    refusing = Capacity(host=0.75, own={"bf16": 0.5, "fp32": 1.0})
    got = overflow_card(KNIFE_EDGE, KNIFE_GOALS, refusing, current="fp32")
    assert got is not None
    assert got.name == "bf16"


def test_the_overflow_variant_moves_only_to_one_cheaper_by_a_margin() -> None:
    # at profiled speed fp32 is cheaper by 340 / 278 = 1.22: within the margin, the
    # current overflow stays; once fp32's instance measured batch 8 at 19.6 ms (408 rps a
    # core) it is 1.47
    kept = overflow_card(KNIFE_EDGE, KNIFE_GOALS, Capacity(), current="bf16")
    assert kept is not None
    assert kept.name == "bf16"
    quick = Capacity(service={"fp32": ServiceTimes(1, {8: 19.6})})
    moved = overflow_card(KNIFE_EDGE, KNIFE_GOALS, quick, current="bf16")
    assert moved is not None
    assert moved.name == "fp32"


def test_under_pressure_the_variants_are_ordered_by_what_they_serve_at_the_hosts_speed() -> None:
    """fp32 measured at 0.75 of its profile keeps only batch 1 (52 rps a core); bf16 at
    that speed keeps batch 4 (208). As profiled fp32 serves more per core (340 against
    278), so on a host measured at profiled speed the load stays on fp32 however its own
    factor reads; on a host measured at 0.75 it goes to bf16 at once."""

    def pressed(host: float) -> AppLoad:
        return AppLoad(
            "m", KNIFE_GOALS, KNIFE_EDGE, {"fp32": 1}, 150.0, None,
            Capacity(host=host, own={"fp32": 0.75}),
        )  # fmt: skip

    got = decide(pressed(1.0), "fp32", Hold(), CFG)
    assert (got.target, got.move) == ("fp32", "replicate")
    got = decide(pressed(0.75), "fp32", Hold(), CFG)
    assert (got.target, got.move, got.reason) == ("bf16", "upgrade", "load")


def test_an_overload_no_option_fits_stays_on_the_variant_serving_most_at_the_hosts_speed() -> None:
    """900 rps on two cores both held: bf16 would need more than two, and so would fp32.
    bf16 refuses and measures 30 % of its profile, fp32 (barely used) 90 %: by their own
    factors fp32 serves more per core and would be the one option left, and the load would
    move to the slower variant. At the host's speed bf16 serves more: it stays."""
    goals = Goals(latency_ms=50.0, min_accuracy=0.99)  # int8 is out
    measured = Capacity(own={"bf16": 0.3, "fp32": 0.9})
    busy = AppLoad("m", goals, CARDS, {"bf16": 1, "fp32": 1}, 900.0, 0, measured)
    assert [o.card.name for o in options(busy, CFG)] == ["bf16"]
    got = decide(busy, "bf16", Hold(), CFG)
    assert (got.target, got.move) == ("bf16", "replicate")


def test_a_peak_does_not_move_to_a_variant_whose_batches_fit_only_by_their_mean() -> None:
    """bf16 on both cores at a peak of 560 rps: it would need three instances. At a host
    factor of 0.95 fp32's batch 8 takes 24.7 ms by its mean, within the 25 a batch may
    take, and two instances of it would carry the peak: as profiled, the load moves there.
    The instances measured a batch's tail at 1.15 x its mean: fp32's batches past 1 do not
    fit at their tail and the data plane would serve it one query at a time (66 rps a
    core), while bf16's batch 4 still fits (264). Live (session 16, R9), the move was made
    and fp32's sibling refused three quarters of the peak. bf16 stays."""

    def peak(batch_tail: float | None) -> AppLoad:
        measured = Capacity(host=0.95, batch_tail=batch_tail)
        return AppLoad("m", KNIFE_GOALS, KNIFE_EDGE, {"bf16": 2}, 560.0, 0, measured)

    got = decide(peak(None), "bf16", Hold(), CFG)
    assert (got.target, got.move, got.reason) == ("fp32", "upgrade", "unfit")
    got = decide(peak(1.15), "bf16", Hold(), CFG)
    assert (got.target, got.move) == ("bf16", "replicate")


def test_a_standby_whose_batches_measured_slow_gives_way_to_the_target() -> None:
    """R10 (session 17), round 1: bf16 carried a peak while the overflow variant, fp32, held
    the other of two cores with one standby instance — fp32 by its profile serves the most
    per core (batch 8). Its instance had measured batch 8 at 58 ms and batch 4 at 40 (25
    allowed): the data plane served it one query at a time. Judged at what it measured,
    fp32 costs four times bf16 per request, and the standby moves to bf16 (the target:
    no second variant holds a core)."""
    as_profiled = overflow_card(KNIFE_EDGE, KNIFE_GOALS, Capacity(), current="fp32")
    assert as_profiled is not None
    assert as_profiled.name == "fp32"
    slow = ServiceTimes(1, {1: 15.0, 2: 30.0, 4: 40.0, 8: 58.0})
    measured = Capacity(service={"fp32": slow})
    got = overflow_card(KNIFE_EDGE, KNIFE_GOALS, measured, current="fp32")
    assert got is not None
    assert got.name == "bf16"


def test_a_downgrade_needs_its_variant_to_fit_on_a_slower_host_too() -> None:
    """R12, round 2: bf16 at 91 rps; at a host factor of 0.94 fp32's batch 4 (21.5 ms
    profiled) fits the 25 ms a batch may take, one fp32 instance carries the load, and
    fp32 is more accurate: the application moved there, and 1.5 s later, the factor
    reading 0.83, back. On a host `STEADY_SPEED_MARGIN` slower fp32 keeps only batch 1
    and would need more cores than bf16: bf16 stays."""
    cfg = ModellessConfig(scale_down_ticks=1)
    measured = Capacity(host=0.94, batch_tail=1.1)
    low = AppLoad("m", KNIFE_GOALS, KNIFE_EDGE, {"bf16": 1}, 91.0, None, measured)
    assert decide(low, "bf16", Hold(), cfg).move == "keep"
    # light enough for fp32 one query at a time, even on the slower host: it goes there
    lighter = replace(low, load_rps=25.0)
    got = decide(lighter, "bf16", Hold(), cfg)
    assert (got.target, got.move) == ("fp32", "downgrade")


def test_a_target_outserves_its_bridge_only_by_a_margin_at_the_hosts_speed() -> None:
    fp32, bf16 = KNIFE_EDGE
    assert not outserves(bf16, [fp32], Capacity())  # 278 against 340 rps a core
    assert outserves(bf16, [fp32], Capacity(host=0.75))  # 208 against 52
    assert outserves(fp32, [], Capacity())  # nothing bridging


def test_a_variant_out_of_the_options_that_is_still_the_best_for_the_rate_ahead_stays() -> None:
    """fp32 beside the overflow variant bf16 on two cores: at 400 rps fp32 would need two
    instances and only one core is not the overflow's, so it is out, and bf16 alone fits.
    The rate ahead (1,000 rps) fits nothing, and fp32 serves the most per core: the move
    lands on fp32 itself — a replication, not a switch (live it was logged and counted as
    "upgrade bf16 -> bf16")."""
    live = {"fp32": 1, "bf16": 1}
    out = AppLoad("m", KNIFE_GOALS, KNIFE_EDGE, live, 400.0, 0, overflow="bf16", ahead_rps=1000.0)
    assert [o.card.name for o in options(out, CFG)] == ["bf16"]
    got = decide(out, "fp32", Hold(), CFG)
    assert (got.target, got.move, got.reason) == ("fp32", "replicate", "")
