"""The vertical step in the planning pass: targets, demand moved, variants let go."""

from __future__ import annotations

import pytest
from msgspec.structs import replace

from infless.modelless.capacity import Capacity
from infless.modelless.catalog import ModelEntry, ModellessCatalog
from infless.modelless.config import ModellessConfig
from infless.modelless.latency import CatalogPredictor
from infless.modelless.planner import ModellessPlanner
from infless.modelless.states import VariantState
from infless.scaling.config import DemandConfig
from infless.scaling.demand import Demand
from infless.scaling.view import FunctionView, InstanceState, InstanceView, PoolView, ServerView
from infless.types import InstanceConfig
from tests.unit.modelless.support import three_variants

ACTIVE = VariantState.ACTIVE
ROOMY = ServerView("local", 16, 12)


def instance(function: str, n: int, state: InstanceState = InstanceState.READY) -> InstanceView:
    return InstanceView(f"{function}-{n}", function, "local", InstanceConfig(8, 1), state)


def view(now: float, instances: dict[str, list[InstanceView]], other: bool = True,
         server: ServerView = ROOMY) -> PoolView:  # fmt: skip
    functions = [
        FunctionView(f"m--{v}", f"m/{v}", 50.0, 16, instances=tuple(instances.get(v, [])))
        for v in ("fp32", "bf16", "int8")
    ]
    if other:
        functions.append(FunctionView("plain", "plain", 50.0, 8))
    return PoolView((server,), tuple(functions), now)


def setup() -> tuple[ModellessCatalog, ModelEntry, ModellessPlanner]:
    catalog = ModellessCatalog()
    entry = ModelEntry("m", 50.0, tuple(three_variants()))
    catalog.put(entry)
    planner = ModellessPlanner(catalog, ModellessConfig(scale_down_ticks=2), DemandConfig())
    return catalog, entry, planner


def test_no_registered_model_changes_nothing() -> None:
    planner = ModellessPlanner(ModellessCatalog(), ModellessConfig(), DemandConfig())
    v, d = view(1.0, {}), Demand({"plain": 5.0})
    assert planner.adjust(v, d, 0.5) == (v, d)


def test_first_tick_picks_a_target_and_lets_the_others_go_cold() -> None:
    _, entry, planner = setup()
    out_view, out_demand = planner.adjust(
        view(1.0, {"fp32": [instance("m--fp32", 1)]}), Demand({"m--fp32": 10.0, "plain": 3.0}),
        0.5,
    )  # fmt: skip
    assert entry.target == "fp32"
    warm = {f.name: f.keep_warm for f in out_view.functions}
    assert warm == {"m--fp32": True, "m--bf16": False, "m--int8": False, "plain": True}
    assert out_demand.rate_rps("m--fp32") == 10.0
    assert out_demand.rate_rps("plain") == 3.0


def ticks(planner: ModellessPlanner, entry: ModelEntry, running: dict[str, list[InstanceView]],
          served: dict[str, float], seconds: float, start: float = 0.0,
          pinned: dict[str, float] | None = None) -> tuple[PoolView, Demand]:  # fmt: skip
    """Ticks every 0.5 s for `seconds`, the queries served per variant at the given rates
    (and some of them pinned); the variants' own rates are what they served."""
    out: tuple[PoolView, Demand] = (view(start, running), Demand())
    now = start
    while now < start + seconds - 1e-9:
        now += 0.5
        for variant, rps in served.items():
            entry.served[variant] = entry.served.get(variant, 0) + int(rps * 0.5)
        for variant, rps in (pinned or {}).items():
            entry.pinned[variant] = entry.pinned.get(variant, 0) + int(rps * 0.5)
        own = Demand({f"m--{v}": rps for v, rps in served.items()})
        out = planner.adjust(view(now, running), own, 0.5)
    return out


def function(v: PoolView, name: str) -> FunctionView:
    return next(f for f in v.functions if f.name == name)


def test_a_load_rise_moves_the_demand_to_the_faster_variant_once_it_serves() -> None:
    _, entry, planner = setup()
    entry.target = "fp32"
    entry.states["fp32"] = ACTIVE
    running = {"fp32": [instance("m--fp32", 1)]}
    # fp32 carries ~444 rps an instance, int8 ~1100: 600 rps forces the upgrade
    out_view, out = ticks(planner, entry, running, {"fp32": 600.0}, 2.0)
    assert entry.target == "int8"
    assert entry.switches == 1
    assert planner.decisions["m"].move in ("upgrade", "keep", "replicate")
    # int8 does not serve yet: fp32 keeps its own demand at its size; int8 gets the load
    assert out.rate_rps("m--fp32") == 600.0
    assert out.rate_rps("m--int8") > 400.0
    assert function(out_view, "m--fp32").max_instances == 1
    assert not function(out_view, "m--bf16").keep_warm  # no instance: stays without one
    running["int8"] = [instance("m--int8", 1)]
    entry.states["int8"] = ACTIVE
    out_view, out = ticks(planner, entry, running, {"int8": 600.0}, 1.0, start=2.0)
    assert out.rate_rps("m--fp32") == 0.0
    assert out.rate_rps("m--int8") > 400.0
    assert not function(out_view, "m--fp32").keep_warm


def test_the_variant_moved_away_from_is_retired_once_the_target_serves() -> None:
    _, entry, planner = setup()
    entry.target = "fp32"
    entry.states["fp32"] = ACTIVE
    running = {"fp32": [instance("m--fp32", 1)]}
    out_view, _ = ticks(planner, entry, running, {"fp32": 600.0}, 2.0)
    assert entry.target == "int8"
    assert not function(out_view, "m--fp32").retired  # it serves until int8 does
    running["int8"] = [instance("m--int8", 1)]
    entry.states["int8"] = ACTIVE
    out_view, _ = ticks(planner, entry, running, {"int8": 600.0}, 1.0, start=2.0)
    # its instance goes at once, young or not: the scaling stability does not hold it
    assert function(out_view, "m--fp32").retired
    assert not function(out_view, "m--int8").retired


def test_with_every_core_taken_the_weakest_variant_makes_room_for_the_target() -> None:
    _, entry, planner = setup()
    entry.target = "bf16"
    entry.states.update({"fp32": ACTIVE, "bf16": ACTIVE})
    running = {"fp32": [instance("m--fp32", 1)], "bf16": [instance("m--bf16", 1)]}
    full = ServerView("local", 2, 0)
    for tick in range(1, 5):  # 900 rps: only int8 carries it on two cores
        entry.served["bf16"] = entry.served.get("bf16", 0) + 450
        out_view, out = planner.adjust(
            view(tick * 0.5, running, other=False, server=full),
            Demand({"m--bf16": 900.0, "m--fp32": 0.0}), 0.5,
        )  # fmt: skip
    assert entry.target == "int8"
    # fp32 (less capacity) gives its core up wholly; bf16 serves on until int8 does
    assert not function(out_view, "m--fp32").keep_warm
    assert out.rate_rps("m--fp32") == 0.0
    assert entry.released == {"fp32"}  # per-query selection sends it nothing new
    assert function(out_view, "m--bf16").max_instances == 1
    assert out.rate_rps("m--bf16") == 900.0
    assert out.rate_rps("m--int8") > 500.0


def test_pinned_queries_keep_their_variant_warm_with_their_demand() -> None:
    _, entry, planner = setup()
    entry.target = "int8"
    entry.states.update({"int8": ACTIVE, "fp32": ACTIVE})
    running = {"fp32": [instance("m--fp32", 1)], "int8": [instance("m--int8", 1)]}
    served = {"int8": 800.0, "fp32": 20.0}  # only int8 carries 800 rps on one core
    _, out = ticks(planner, entry, running, served, 3.0, pinned={"fp32": 20.0})
    assert entry.target == "int8"
    assert 10.0 < out.rate_rps("m--fp32") <= 25.0  # its pinned queries' rate
    assert out.rate_rps("m--int8") > 600.0


def test_a_load_fall_returns_to_the_accurate_variant_after_the_delay() -> None:
    _, entry, planner = setup()
    entry.target = "int8"
    entry.states["int8"] = ACTIVE
    running = {"int8": [instance("m--int8", 1)]}
    ticks(planner, entry, running, {"int8": 5.0}, 0.5)
    assert entry.target == "int8"
    assert planner.decisions["m"].hold.ticks == 1
    ticks(planner, entry, running, {"int8": 5.0}, 0.5, start=0.5)
    assert entry.target == "fp32"
    assert planner.decisions["m"].move == "downgrade"


def test_no_second_switch_before_the_first_lands() -> None:
    _, entry, planner = setup()
    entry.target = "fp32"
    entry.states["fp32"] = ACTIVE
    running = {"fp32": [instance("m--fp32", 1)]}
    ticks(planner, entry, running, {"fp32": 600.0}, 1.0)
    assert entry.target == "int8"
    assert entry.switches == 1
    # int8 starts (not serving yet) while fp32 is now overloaded: no move back and forth
    running["int8"] = [instance("m--int8", 1, InstanceState.STARTING)]
    entry.states["fp32"] = VariantState.OVERLOADED
    ticks(planner, entry, running, {"fp32": 600.0}, 3.0, start=1.0)
    assert entry.target == "int8"
    assert entry.switches == 1


def test_the_autoscaler_predicts_variants_from_their_profiles() -> None:
    catalog = ModellessCatalog()
    profiles = tuple(replace(p, package_dir=f"/r/{p.name}") for p in three_variants())
    entry = ModelEntry("m", 50.0, profiles)
    catalog.put(entry)
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
    entry.capacity = Capacity(host=0.5)
    assert predictor.predict_latency_ms("/r/fp32", 8, 1) == 36.0


def test_the_overflow_variant_stays_warm_beside_the_target_with_what_spills_to_it() -> None:
    _, entry, planner = setup()
    entry.target = "fp32"
    entry.states.update({"fp32": ACTIVE, "int8": ACTIVE})
    running = {"fp32": [instance("m--fp32", 1)], "int8": [instance("m--int8", 1)]}
    # a low load: fp32 (the most accurate) carries it; a burst spilled 30 rps to int8
    out_view, out = ticks(planner, entry, running, {"fp32": 50.0, "int8": 30.0}, 2.0)
    assert entry.target == "fp32"
    assert entry.overflow == "int8"
    assert function(out_view, "m--int8").keep_warm
    assert entry.released == {"bf16"}  # int8 keeps getting what fp32 has no room for
    assert 20.0 < out.rate_rps("m--int8") <= 35.0  # planned for what it served
    assert out.rate_rps("m--fp32") > 60.0  # the application's load: fp32 is to carry it
    assert not function(out_view, "m--bf16").keep_warm


def test_without_an_overflow_variant_the_others_go_cold() -> None:
    catalog = ModellessCatalog()
    entry = ModelEntry("m", 50.0, tuple(three_variants()))
    catalog.put(entry)
    cfg = ModellessConfig(scale_down_ticks=2, overflow=False)
    planner = ModellessPlanner(catalog, cfg, DemandConfig())
    entry.target = "fp32"
    entry.states.update({"fp32": ACTIVE, "int8": ACTIVE})
    running = {"fp32": [instance("m--fp32", 1)], "int8": [instance("m--int8", 1)]}
    out_view, _ = ticks(planner, entry, running, {"fp32": 50.0, "int8": 30.0}, 2.0)
    assert entry.overflow is None
    assert not function(out_view, "m--int8").keep_warm
    assert entry.released == {"bf16", "int8"}


def test_the_overflow_variant_starts_once_the_target_serves() -> None:
    _, entry, planner = setup()
    out_view, _ = planner.adjust(view(0.5, {}), Demand(), 0.5)
    assert entry.target == "fp32"  # one core each at no load: the most accurate
    assert not function(out_view, "m--int8").keep_warm  # its core is fp32's to start on
    running = {"fp32": [instance("m--fp32", 1)]}
    entry.states["fp32"] = ACTIVE
    out_view, _ = planner.adjust(view(1.0, running), Demand(), 0.5)
    assert function(out_view, "m--int8").keep_warm
    assert not function(out_view, "m--bf16").keep_warm


def test_a_load_fall_keeps_the_overflow_variant_while_the_accurate_one_starts() -> None:
    _, entry, planner = setup()
    entry.target = "int8"
    entry.states["int8"] = ACTIVE
    running = {"int8": [instance("m--int8", 1)]}
    out_view, _ = ticks(planner, entry, running, {"int8": 5.0}, 1.0)
    assert (entry.target, planner.decisions["m"].move) == ("fp32", "downgrade")
    assert function(out_view, "m--int8").keep_warm  # it serves until fp32 does, and after
    running["fp32"] = [instance("m--fp32", 1)]
    entry.states["fp32"] = ACTIVE
    out_view, _ = ticks(planner, entry, running, {"fp32": 5.0}, 1.0, start=1.0)
    assert entry.target == "fp32"
    assert function(out_view, "m--int8").keep_warm
    assert entry.released == {"bf16"}
