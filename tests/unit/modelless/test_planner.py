"""The vertical step in the planning pass: targets, demand moved, variants let go.

Driven through the control shell (`control.vertical.VerticalScaling`), which runs the pure
planner and applies its decisions to the catalogue; the tests play the monitor (`given`)
and the request path (the model's `Traffic`)."""

from __future__ import annotations

from dataclasses import replace as replace_entry

import pytest
from msgspec.structs import replace

from infless.control.vertical import VerticalScaling
from infless.modelless.capacity import Capacity
from infless.modelless.catalog import ModelEntry, ModellessCatalog, ModelReading
from infless.modelless.config import ModellessConfig
from infless.modelless.decisions import PlannerMemory, VerticalPlan
from infless.modelless.latency import CatalogPredictor
from infless.modelless.planner import plan_vertical
from infless.modelless.profiles import Goals
from infless.modelless.states import Tracked, VariantState
from infless.scaling.config import DemandConfig
from infless.scaling.demand import Demand
from infless.scaling.view import FunctionView, InstanceState, InstanceView, PoolView, ServerView
from infless.types import InstanceConfig
from tests.unit.modelless.support import profile, three_variants

ACTIVE = VariantState.ACTIVE
ROOMY = ServerView("local", 16, 12)


def instance(function: str, n: int, state: InstanceState = InstanceState.READY) -> InstanceView:
    return InstanceView(f"{function}-{n}", function, "local", InstanceConfig(8, 1), state)


def view(
    now: float,
    instances: dict[str, list[InstanceView]],
    other: bool = True,
    server: ServerView = ROOMY,
) -> PoolView:
    functions = [
        FunctionView(f"m--{v}", f"m/{v}", 50.0, 16, instances=tuple(instances.get(v, [])))
        for v in ("fp32", "bf16", "int8")
    ]
    if other:
        functions.append(FunctionView("plain", "plain", 50.0, 8))
    return PoolView((server,), tuple(functions), now)


def catalog_with(entry: ModelEntry | None = None) -> ModellessCatalog:
    catalog = ModellessCatalog()
    catalog.publish(entry or ModelEntry(model="m", slo_ms=50.0, profiles=tuple(three_variants())))
    return catalog


def setup(cfg: ModellessConfig | None = None) -> tuple[ModellessCatalog, VerticalScaling]:
    catalog = catalog_with()
    cfg = cfg or ModellessConfig(scale_down_ticks=2)
    return catalog, VerticalScaling(catalog, cfg, DemandConfig())


def current(catalog: ModellessCatalog) -> ModelEntry:
    """Model `m`'s entry as the control shell last published it."""
    entry = catalog.get("m")
    assert entry is not None
    return entry


def given(catalog: ModellessCatalog, target: str | None = None, **states: VariantState) -> None:
    """The test plays the monitor (the variants' `states`) and, with `target`, a past
    planning pass."""
    if states:
        tracked = {name: Tracked(state) for name, state in states.items()}
        catalog.observe("m", tracked, current(catalog).capacity)
    if target is not None:
        catalog.publish(replace_entry(current(catalog), target=target))


def test_no_registered_model_changes_nothing() -> None:
    planner = VerticalScaling(ModellessCatalog(), ModellessConfig(), DemandConfig())
    v, d = view(1.0, {}), Demand({"plain": 5.0})
    assert planner.adjust(v, d) == (v, d)


def test_first_tick_picks_a_target_and_lets_the_others_go_cold() -> None:
    catalog, planner = setup()
    out_view, out_demand = planner.adjust(
        view(1.0, {"fp32": [instance("m--fp32", 1)]}),
        Demand({"m--fp32": 10.0, "plain": 3.0}),
    )
    assert current(catalog).target == "fp32"
    warm = {f.name: f.keep_warm for f in out_view.functions}
    assert warm == {"m--fp32": True, "m--bf16": False, "m--int8": False, "plain": True}
    assert out_demand.rate_rps("m--fp32") == 10.0
    assert out_demand.rate_rps("plain") == 3.0


def ticks(
    planner: VerticalScaling,
    catalog: ModellessCatalog,
    running: dict[str, list[InstanceView]],
    served: dict[str, float],
    seconds: float,
    start: float = 0.0,
    pinned: dict[str, float] | None = None,
) -> tuple[PoolView, Demand]:
    """Ticks every 0.5 s for `seconds`, the queries served per variant at the given rates
    (and some of them pinned); the variants' own rates are what they served."""
    out: tuple[PoolView, Demand] = (view(start, running), Demand())
    traffic = current(catalog).traffic
    now = start
    while now < start + seconds - 1e-9:
        now += 0.5
        for variant, rps in served.items():
            traffic.served[variant] = traffic.served.get(variant, 0) + int(rps * 0.5)
        for variant, rps in (pinned or {}).items():
            traffic.pinned[variant] = traffic.pinned.get(variant, 0) + int(rps * 0.5)
        own = Demand({f"m--{v}": rps for v, rps in served.items()})
        out = planner.adjust(view(now, running), own)
    return out


def function(v: PoolView, name: str) -> FunctionView:
    return next(f for f in v.functions if f.name == name)


def upgraded_at_600_rps() -> tuple[
    ModellessCatalog, VerticalScaling, dict[str, list[InstanceView]], tuple[PoolView, Demand]
]:
    """fp32 the target on one instance, then 2 s at 600 rps: fp32 carries ~444 rps an
    instance, int8 ~1100, so the load forces the upgrade to int8 (not serving yet)."""
    catalog, planner = setup()
    given(catalog, target="fp32")
    given(catalog, fp32=ACTIVE)
    running = {"fp32": [instance("m--fp32", 1)]}
    out = ticks(planner, catalog, running, {"fp32": 600.0}, 2.0)
    assert current(catalog).target == "int8"
    return catalog, planner, running, out


def test_a_step_the_target_carries_does_not_switch_it_on_the_rate_planned_ahead() -> None:
    """A step from a trickle to 300 rps, which one fp32 instance carries (~444 rps): the
    planning rate reads the step as a steep ramp (several times 300 rps for seconds) and
    Algorithm 1 gets it; the variant is chosen on the rate measured, and stays."""
    catalog, planner = setup()
    given(catalog, target="fp32")
    given(catalog, fp32=ACTIVE)
    running = {"fp32": [instance("m--fp32", 1)]}
    ticks(planner, catalog, running, {"fp32": 2.0}, 10.0)
    planned = []
    for second in range(4):
        _, out = ticks(planner, catalog, running, {"fp32": 300.0}, 0.5, start=10.0 + second / 2)
        planned.append(out.rate_rps("m--fp32"))
        assert current(catalog).target == "fp32"
    assert max(planned) > 2 * 300.0
    assert current(catalog).switches == 0


def test_instances_still_starting_do_not_hide_the_pressure_that_weighs_a_switch() -> None:
    """600 rps on one ready fp32 instance and one Algorithm 1 started for the rate ahead:
    counted, the two would carry the load and the switch would never be weighed; the
    ready one does not, and int8 on one core costs less than fp32 on two: an upgrade for
    the load at once."""
    catalog, planner = setup()
    given(catalog, target="fp32")
    given(catalog, fp32=ACTIVE)
    starting = instance("m--fp32", 2, InstanceState.STARTING)
    running = {"fp32": [instance("m--fp32", 1), starting]}
    ticks(planner, catalog, running, {}, 0.5)  # the first pass reads the counters only
    ticks(planner, catalog, running, {"fp32": 600.0}, 0.5, start=0.5)
    assert current(catalog).target == "int8"  # at once, not by a steady move ticks later
    assert planner.decisions["m"].reason == "load"


def test_a_load_rise_moves_the_demand_to_the_faster_variant_once_it_serves() -> None:
    catalog, planner, running, (out_view, out) = upgraded_at_600_rps()
    assert current(catalog).switches == 1
    assert planner.decisions["m"].move in ("upgrade", "keep", "replicate")
    # int8 does not serve yet: fp32 keeps its own demand at its size; int8 gets the load
    assert out.rate_rps("m--fp32") == 600.0
    assert out.rate_rps("m--int8") > 400.0
    assert function(out_view, "m--fp32").max_instances == 1
    assert not function(out_view, "m--bf16").keep_warm  # no instance: stays without one
    running["int8"] = [instance("m--int8", 1)]
    given(catalog, int8=ACTIVE)
    out_view, out = ticks(planner, catalog, running, {"int8": 600.0}, 1.0, start=2.0)
    assert out.rate_rps("m--fp32") == 0.0
    assert out.rate_rps("m--int8") > 400.0
    assert not function(out_view, "m--fp32").keep_warm


def test_the_variant_moved_away_from_is_retired_once_the_target_serves() -> None:
    catalog, planner, running, (out_view, _) = upgraded_at_600_rps()
    assert not function(out_view, "m--fp32").retired  # it serves until int8 does
    running["int8"] = [instance("m--int8", 1)]
    given(catalog, int8=ACTIVE)
    out_view, _ = ticks(planner, catalog, running, {"int8": 600.0}, 1.0, start=2.0)
    # its instance goes at once, young or not: the scaling stability does not hold it
    assert function(out_view, "m--fp32").retired
    assert not function(out_view, "m--int8").retired


def test_the_variant_moved_away_from_bridges_until_the_targets_ready_instances_carry_it() -> None:
    """A target that serves on too little (its one ready instance sustains 500 rps of the
    600) does not retire the old variant yet: that one keeps its demand at its size and
    takes what spills over; once the target's ready instances carry the load, it goes."""
    catalog, planner, running, _ = upgraded_at_600_rps()
    small = InstanceView("m--int8-1", "m--int8", "local", InstanceConfig(1, 1))  # 2 ms: 500 rps
    running["int8"] = [small]
    given(catalog, int8=ACTIVE)
    spilled = {"int8": 500.0, "fp32": 100.0}  # what int8 has no room for goes to fp32
    out_view, out = ticks(planner, catalog, running, spilled, 1.0, start=2.0)
    assert not function(out_view, "m--fp32").retired
    assert out.rate_rps("m--fp32") == pytest.approx(100.0)  # its own, at its size
    assert function(out_view, "m--fp32").max_instances == 1  # serving on, not growing
    running["int8"] = [small, instance("m--int8", 2, InstanceState.STARTING)]
    out_view, _ = ticks(planner, catalog, running, spilled, 1.0, start=3.0)
    assert not function(out_view, "m--fp32").retired  # starting carries nothing yet
    running["int8"] = [small, instance("m--int8", 2)]
    out_view, out = ticks(planner, catalog, running, {"int8": 600.0}, 1.0, start=4.0)
    assert function(out_view, "m--fp32").retired
    assert out.rate_rps("m--fp32") == 0.0


def test_the_cores_of_a_retired_variant_without_demand_are_free_for_this_pass() -> None:
    catalog, planner = setup()
    given(catalog, target="int8")
    given(catalog, fp32=ACTIVE, int8=ACTIVE)
    full = ServerView("local", 2, 0)  # fp32 and int8 hold both cores
    running = {"fp32": [instance("m--fp32", 1)], "int8": [instance("m--int8", 1)]}
    out_view, out = planner.adjust(view(0.5, running, server=full), Demand())
    assert function(out_view, "m--fp32").retired
    assert out.rate_rps("m--fp32") == 0.0
    # Algorithm 1 stops fp32 and may start int8's next instance on its core in this pass
    assert out_view.servers[0].free_cpus == 1
    # with queries pinned to it, fp32 keeps its instance: its core stays taken
    ticks(planner, catalog, running, {"int8": 100.0}, 1.0, start=0.5, pinned={"fp32": 20.0})
    out_view, out = planner.adjust(view(2.0, running, server=full), Demand())
    assert out.rate_rps("m--fp32") > 0.0
    assert out_view.servers[0].free_cpus == 0


def test_a_retired_instance_that_outlives_its_stop_has_its_core_handed_out_once() -> None:
    """Its core counts as free in the pass that should stop it; if it is still there at the
    next pass (the stop was lost or refused), the core is not free again — else every
    pass would start one more instance of the target on it."""
    catalog, planner = setup(ModellessConfig(scale_down_ticks=10))  # int8 stays the target
    given(catalog, target="int8")
    given(catalog, fp32=ACTIVE, int8=ACTIVE)
    full = ServerView("local", 2, 0)
    running = {"fp32": [instance("m--fp32", 1)], "int8": [instance("m--int8", 1)]}
    out_view, _ = planner.adjust(view(0.5, running, server=full), Demand())
    assert out_view.servers[0].free_cpus == 1
    for now in (1.0, 1.5):  # fp32's instance was not stopped
        out_view, _ = planner.adjust(view(now, running, server=full), Demand())
        assert function(out_view, "m--fp32").retired
        assert out_view.servers[0].free_cpus == 0


def test_with_every_core_taken_the_weakest_variant_makes_room_for_the_target() -> None:
    catalog, planner = setup()
    given(catalog, target="bf16")
    given(catalog, fp32=ACTIVE, bf16=ACTIVE)
    running = {"fp32": [instance("m--fp32", 1)], "bf16": [instance("m--bf16", 1)]}
    full = ServerView("local", 2, 0)
    traffic = current(catalog).traffic
    for tick in range(1, 5):  # 900 rps: only int8 carries it on two cores
        traffic.served["bf16"] = traffic.served.get("bf16", 0) + 450
        out_view, out = planner.adjust(
            view(tick * 0.5, running, other=False, server=full),
            Demand({"m--bf16": 900.0, "m--fp32": 0.0}),
        )
    assert current(catalog).target == "int8"
    # fp32 (less capacity) gives its core up wholly; bf16 serves on until int8 does
    assert not function(out_view, "m--fp32").keep_warm
    assert out.rate_rps("m--fp32") == 0.0
    assert current(catalog).released == {"fp32"}  # per-query selection sends it nothing new
    assert function(out_view, "m--bf16").max_instances == 1
    assert out.rate_rps("m--bf16") == 900.0
    assert out.rate_rps("m--int8") > 500.0


def test_pinned_queries_keep_their_variant_warm_with_their_demand() -> None:
    catalog, planner = setup()
    given(catalog, target="int8")
    given(catalog, int8=ACTIVE, fp32=ACTIVE)
    running = {"fp32": [instance("m--fp32", 1)], "int8": [instance("m--int8", 1)]}
    served = {"int8": 800.0, "fp32": 20.0}  # only int8 carries 800 rps on one core
    _, out = ticks(planner, catalog, running, served, 3.0, pinned={"fp32": 20.0})
    assert current(catalog).target == "int8"
    assert 10.0 < out.rate_rps("m--fp32") <= 25.0  # its pinned queries' rate
    assert out.rate_rps("m--int8") > 600.0


def test_a_load_fall_returns_to_the_accurate_variant_after_the_delay() -> None:
    catalog, planner = setup()
    given(catalog, target="int8")
    given(catalog, int8=ACTIVE)
    running = {"int8": [instance("m--int8", 1)]}
    ticks(planner, catalog, running, {"int8": 5.0}, 0.5)
    assert current(catalog).target == "int8"
    assert planner.decisions["m"].hold.ticks == 1
    ticks(planner, catalog, running, {"int8": 5.0}, 0.5, start=0.5)
    assert current(catalog).target == "fp32"
    assert planner.decisions["m"].move == "downgrade"


def test_no_second_switch_before_the_first_lands() -> None:
    catalog, planner = setup()
    given(catalog, target="fp32")
    given(catalog, fp32=ACTIVE)
    running = {"fp32": [instance("m--fp32", 1)]}
    ticks(planner, catalog, running, {"fp32": 600.0}, 1.0)
    assert current(catalog).target == "int8"
    assert current(catalog).switches == 1
    # int8 starts (not serving yet) while fp32 is now overloaded: no move back and forth
    running["int8"] = [instance("m--int8", 1, InstanceState.STARTING)]
    given(catalog, fp32=VariantState.OVERLOADED)
    ticks(planner, catalog, running, {"fp32": 600.0}, 3.0, start=1.0)
    assert current(catalog).target == "int8"
    assert current(catalog).switches == 1


def test_the_autoscaler_predicts_variants_from_their_profiles() -> None:
    profiles = tuple(replace(p, package_dir=f"/r/{p.name}") for p in three_variants())
    catalog = catalog_with(ModelEntry(model="m", slo_ms=50.0, profiles=profiles))
    predictor = CatalogPredictor(catalog)
    # fp32: t(b, 1) = 4 + 2 (b - 1): 18 ms at b8, 34 at b16, beyond: the last slope
    assert predictor.predict_latency_ms("/r/fp32", 8, 1) == 18.0
    assert predictor.predict_latency_ms("/r/fp32", 12, 1) == 26.0
    assert predictor.predict_latency_ms("/r/fp32", 32, 1) == 66.0
    assert predictor.predict_latency_ms("/r/fp32", 1, 4) == 4.0 / 1.6  # nearest: 2 cores
    with pytest.raises(LookupError):
        predictor.predict_latency_ms("/r/unknown", 1, 1)
    with pytest.raises(LookupError):
        predictor.predict_latency_ms("/r/fp32", 1, 1, 10)
    # served at half its profiled speed here: predicted twice as slow
    catalog.observe("m", {}, Capacity(host=0.5))
    assert predictor.predict_latency_ms("/r/fp32", 8, 1) == 36.0


def test_the_overflow_variant_stays_warm_beside_the_target_with_what_spills_to_it() -> None:
    catalog, planner = setup()
    given(catalog, target="fp32")
    given(catalog, fp32=ACTIVE, int8=ACTIVE)
    running = {"fp32": [instance("m--fp32", 1)], "int8": [instance("m--int8", 1)]}
    # a low load: fp32 (the most accurate) carries it; a burst spilled 30 rps to int8
    out_view, out = ticks(planner, catalog, running, {"fp32": 50.0, "int8": 30.0}, 2.0)
    assert current(catalog).target == "fp32"
    assert current(catalog).overflow == "int8"
    assert function(out_view, "m--int8").keep_warm
    assert current(catalog).released == {"bf16"}  # int8 keeps getting what fp32 has no room for
    assert 20.0 < out.rate_rps("m--int8") <= 35.0  # planned for what it served
    assert out.rate_rps("m--fp32") > 60.0  # the application's load: fp32 is to carry it
    assert not function(out_view, "m--bf16").keep_warm
    # were int8's warm instance to start again, it is standby capacity (a step the target
    # cannot admit spills over to it), not sized for the little it served
    assert function(out_view, "m--int8").standby
    assert not function(out_view, "m--fp32").standby


def test_without_an_overflow_variant_the_others_go_cold() -> None:
    catalog, planner = setup(ModellessConfig(scale_down_ticks=2, overflow=False))
    given(catalog, target="fp32")
    given(catalog, fp32=ACTIVE, int8=ACTIVE)
    running = {"fp32": [instance("m--fp32", 1)], "int8": [instance("m--int8", 1)]}
    out_view, _ = ticks(planner, catalog, running, {"fp32": 50.0, "int8": 30.0}, 2.0)
    assert current(catalog).overflow is None
    assert not function(out_view, "m--int8").keep_warm
    assert current(catalog).released == {"bf16", "int8"}


def test_the_overflow_variant_starts_once_the_target_serves() -> None:
    catalog, planner = setup()
    out_view, _ = planner.adjust(view(0.5, {}), Demand())
    assert current(catalog).target == "fp32"  # one core each at no load: the most accurate
    assert not function(out_view, "m--int8").keep_warm  # its core is fp32's to start on
    running = {"fp32": [instance("m--fp32", 1)]}
    given(catalog, fp32=ACTIVE)
    out_view, _ = planner.adjust(view(1.0, running), Demand())
    assert function(out_view, "m--int8").keep_warm
    assert not function(out_view, "m--bf16").keep_warm


def test_a_load_fall_keeps_the_overflow_variant_while_the_accurate_one_starts() -> None:
    catalog, planner = setup()
    given(catalog, target="int8")
    given(catalog, int8=ACTIVE)
    running = {"int8": [instance("m--int8", 1)]}
    out_view, _ = ticks(planner, catalog, running, {"int8": 5.0}, 1.0)
    assert (current(catalog).target, planner.decisions["m"].move) == ("fp32", "downgrade")
    assert function(out_view, "m--int8").keep_warm  # it serves until fp32 does, and after
    running["fp32"] = [instance("m--fp32", 1)]
    given(catalog, fp32=ACTIVE)
    out_view, _ = ticks(planner, catalog, running, {"fp32": 5.0}, 1.0, start=1.0)
    assert current(catalog).target == "fp32"
    assert function(out_view, "m--int8").keep_warm
    assert current(catalog).released == {"bf16"}


Inputs = tuple[ModellessCatalog, tuple[ModelReading, ...], PoolView, Demand, PlannerMemory]


def pure_inputs() -> Inputs:
    """A catalogue with fp32 the serving target at 600 rps (only int8 carries that), its
    snapshot, and the inputs of a second pass (the first pass's memory)."""
    catalog, _ = setup()
    given(catalog, target="fp32", fp32=ACTIVE)
    traffic = current(catalog).traffic
    running = {"fp32": [instance("m--fp32", 1)]}
    demand = Demand({"m--fp32": 600.0, "plain": 3.0})
    traffic.served["fp32"] = 300
    first = plan_at(catalog.snapshot(), view(1.5, running), demand, PlannerMemory())
    traffic.served["fp32"] = 600
    return catalog, catalog.snapshot(), view(2.0, running), demand, first.memory


CFG = ModellessConfig(scale_down_ticks=0)


def plan_at(
    snapshot: tuple[ModelReading, ...], pool: PoolView, demand: Demand, memory: PlannerMemory
) -> VerticalPlan:
    """One pure pass at 0.5-s ticks with `CFG`."""
    return plan_vertical(snapshot, pool, demand, memory=memory, cfg=CFG, demand_cfg=DemandConfig())


def test_the_planner_returns_decisions_and_mutates_nothing_it_reads() -> None:
    catalog, snapshot, pool, demand, memory = pure_inputs()
    _, *before = pure_inputs()  # the same inputs, built again: what they must still be
    plan = plan_at(snapshot, pool, demand, memory)
    assert [snapshot, pool, demand, memory] == before
    assert catalog.snapshot() == snapshot  # the catalogue is untouched too
    # what it decided: upgrade to int8, which does not serve yet, so fp32 stays frozen
    (decided,) = plan.apps
    assert (decided.model, decided.target, decided.switched) == ("m", "int8", True)
    assert decided.decision.move == "upgrade"
    assert plan.frozen == {"m--fp32": 1}
    assert plan.rates_rps["m--int8"] > 0.0
    assert plan.memory.pending == {"m": ("int8", 2.0)}
    assert plan.memory.last_s == 2.0
    # the catalogue changes only when the shell applies the decision
    assert current(catalog).target == "fp32"
    catalog.apply(decided)
    assert (current(catalog).target, current(catalog).switches) == ("int8", 1)


def test_a_target_whose_tail_misses_hands_its_demand_to_the_overflow_variant_in_one_pass() -> None:
    # fp32 13 ms and bf16 4.5 ms at batch 1 against a 20-ms SLO (int8 below the goal)
    near = (
        profile("fp32", 1.0, 13.0, 9.0),
        profile("bf16", 0.977, 4.5, 6.0),
        profile("int8", 0.945, 1.8, 0.3),
    )
    goals = {"default": Goals(min_accuracy=0.95)}
    entry = ModelEntry(model="m", slo_ms=20.0, profiles=near, apps=goals)
    catalog = catalog_with(entry)
    planner = VerticalScaling(catalog, ModellessConfig(), DemandConfig())
    given(catalog, target="fp32")
    running = {"fp32": [instance("m--fp32", 1)], "bf16": [instance("m--bf16", 1)]}
    # the monitor measured fp32's p99 at 1.6x its forward time: 20.8 ms
    catalog.observe("m", {"fp32": Tracked(ACTIVE), "bf16": Tracked(ACTIVE)}, Capacity())
    out_view, out = ticks(planner, catalog, running, {"fp32": 19.0}, 1.0)
    assert current(catalog).target == "fp32"  # nothing measured yet: as profiled
    catalog.observe("m", current(catalog).tracked, Capacity(tail_ratio=1.6))
    out_view, out = ticks(planner, catalog, running, {"fp32": 19.0}, 0.5, start=1.0)
    assert (current(catalog).target, planner.decisions["m"].move) == ("bf16", "upgrade")
    # in the same pass: bf16 serves already, so Algorithm 1 plans the load there
    assert out.rate_rps("m--fp32") == 0.0
    assert out.rate_rps("m--bf16") > 15.0
    assert not function(out_view, "m--fp32").keep_warm


def test_with_no_core_free_a_target_serving_more_per_core_takes_its_bridges_cores() -> None:
    """int8 serves on one ready instance short of a 2,000-rps load; fp32 bridges on two
    more cores. On a roomy server int8's next instance starts on a free core and fp32
    bridges on until int8 carries the load. On three cores all held, int8 would never
    carry it with fp32 there (it needs one core more): fp32, serving a quarter of what
    int8 would per core, is retired now and both its cores are free for int8 in this
    pass — not one of them, with fp32 frozen on the other refusing most of what it gets."""
    for server, retired in ((ROOMY, False), (ServerView("local", 3, 0), True)):
        catalog, planner = setup()
        given(catalog, target="int8")
        given(catalog, fp32=ACTIVE, int8=ACTIVE)
        running = {"int8": [instance("m--int8", 1)]}
        planner.adjust(view(0.5, running, other=False, server=server), Demand())  # counters
        running["fp32"] = [instance("m--fp32", 1), instance("m--fp32", 2)]
        traffic = current(catalog).traffic
        handed = []  # the cores free in each pass (each instance's once: `handed` memory)
        for tick in range(2, 6):
            traffic.served["int8"] = traffic.served.get("int8", 0) + 1000
            out_view, out = planner.adjust(
                view(tick * 0.5, running, other=False, server=server),
                Demand({"m--int8": 2000.0, "m--fp32": 100.0}),
            )
            handed.append(out_view.servers[0].free_cpus - server.free_cpus)
        assert current(catalog).target == "int8"
        assert function(out_view, "m--fp32").retired is retired
        assert (out.rate_rps("m--fp32") == 0.0) is retired
        assert ("fp32" in current(catalog).released) is retired
        assert sum(handed) == (2 if retired else 0)
