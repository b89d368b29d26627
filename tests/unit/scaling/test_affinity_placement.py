"""Sharing-aware placement: e_ij × (1 + affinity_weight · affinity), weighed over few servers."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infless.scaling.capacity import CapacityIndex
from infless.scaling.config import ScalingConfig, check_scaling
from infless.scaling.demand import Demand
from infless.scaling.placement import efficiency
from infless.scaling.planner import plan
from infless.scaling.predictors import AnalyticModel, AnalyticPredictor
from infless.scaling.view import FunctionView, PoolView, ScalingPlan, ServerView, StartInstance

PRED = AnalyticPredictor({"m": AnalyticModel(2.0, 8.0, gpu_per_pct=0.2)})
TWO_CORES = ScalingConfig(cpu_options=(2,))  # one configuration size: placement alone decides


def fn(name: str = "f") -> FunctionView:
    return FunctionView(name, "m", 50.0, 32)


def server(
    sid: str, free: int, affinity: Mapping[str, float] | None = None, cpus: int = 16
) -> ServerView:
    return ServerView(sid, cpus, free, affinity=dict(affinity or {}))


def starts(view: PoolView, rates: Mapping[str, float], cfg: ScalingConfig) -> list[StartInstance]:
    return list(plan(view, Demand(dict(rates)), PRED, cfg).starts)


def test_equal_servers_the_one_with_affinity_wins() -> None:
    plain = PoolView((server("s0", 16), server("s1", 16)), (fn(),))
    (before,) = starts(plain, {"f": 5.0}, TWO_CORES)
    assert before.server_id == "s0"  # a tie: the lowest position
    shared = PoolView((server("s0", 16), server("s1", 16, {"f": 1.0})), (fn(),))
    (start,) = starts(shared, {"f": 5.0}, TWO_CORES)
    assert start.server_id == "s1"
    assert start.config == before.config
    # the reported e_ij is the boosted one: × (1 + 0.5 · 1.0)
    assert start.efficiency == pytest.approx(before.efficiency * 1.5)


def test_efficiency_factor() -> None:
    plain = efficiency(200.0, 2.0, 100.0, 8.0, 0.01)
    assert efficiency(200.0, 2.0, 100.0, 8.0, 0.01, 1.0, 0.0) == plain
    assert efficiency(200.0, 2.0, 100.0, 8.0, 0.01, 0.0, 0.5) == plain
    assert efficiency(200.0, 2.0, 100.0, 8.0, 0.01, 0.5, 0.5) == pytest.approx(plain * 1.25)


def test_affinity_for_another_function_does_not_count() -> None:
    view = PoolView((server("s0", 16), server("s1", 16, {"g": 1.0})), (fn(),))
    (start,) = starts(view, {"f": 5.0}, TWO_CORES)
    assert start.server_id == "s0"


def test_a_much_tighter_fit_still_beats_a_modest_affinity() -> None:
    # snug: fragment floored at 0.25 (e × 4); roomy: 1 − 2/16 (e × 1.14), × 1.5 is still less
    view = PoolView((server("roomy", 16, {"f": 1.0}), server("snug", 2)), (fn(),))
    (start,) = starts(view, {"f": 5.0}, TWO_CORES)
    assert start.server_id == "snug"
    strong = ScalingConfig(cpu_options=(2,), affinity_weight=4.0)
    (start,) = starts(view, {"f": 5.0}, strong)
    assert start.server_id == "roomy"


def views() -> list[PoolView]:
    """Pools with affinity everywhere (random-ish values), and functions that compete."""
    cpu = tuple(
        server(f"c{k}", (k * 7) % 17, {"a": (k % 5) / 4, "b": 1.0 if k % 3 == 0 else 0.0})
        for k in range(40)
    )
    gpu = tuple(
        ServerView(
            f"g{k}", 8, (k * 3) % 9, (100,), ((k * 37) % 101,), affinity={"a": 0.5, "c": 0.9}
        )
        for k in range(10)
    )
    functions = (fn("a"), fn("b"), fn("c"))
    return [PoolView(cpu, functions), PoolView(cpu + gpu, functions), PoolView(gpu, functions)]


def without_affinity(view: PoolView) -> PoolView:
    servers = tuple(
        ServerView(s.server_id, s.cpus, s.free_cpus, s.gpu_pct, s.free_gpu_pct)
        for s in view.servers
    )
    return PoolView(servers, view.functions, view.now_s)


def zero_affinity(view: PoolView) -> PoolView:
    servers = tuple(
        ServerView(
            s.server_id,
            s.cpus,
            s.free_cpus,
            s.gpu_pct,
            s.free_gpu_pct,
            affinity=dict.fromkeys(s.affinity, 0.0),
        )
        for s in view.servers
    )
    return PoolView(servers, view.functions, view.now_s)


@pytest.mark.parametrize("rate", [5.0, 400.0, 5_000.0])
@pytest.mark.parametrize("which", range(3))
def test_weight_zero_or_zero_affinity_reproduces_the_plain_plan(rate: float, which: int) -> None:
    view = views()[which]
    demand = Demand({"a": rate, "b": rate / 2, "c": rate * 2})
    cfg = ScalingConfig()
    off = ScalingConfig(affinity_weight=0.0)
    before: ScalingPlan = plan(without_affinity(view), demand, PRED, cfg)
    assert before.starts  # the comparison means something
    assert plan(view, demand, PRED, off) == before
    assert plan(zero_affinity(view), demand, PRED, cfg) == before
    assert plan(without_affinity(view), demand, PRED, off) == before
    assert plan(view, demand, PRED, cfg) != before  # and the feature does act here


def test_a_server_where_the_config_does_not_fit_is_never_chosen() -> None:
    home = server("home", 1, {"f": 1.0})  # 1 core free: a 2-core instance cannot go there
    view = PoolView((home, server("s1", 16), server("s2", 4)), (fn(),))
    chosen = starts(view, {"f": 2_000.0}, TWO_CORES)
    assert chosen
    assert all(s.server_id != "home" for s in chosen)
    full = PoolView((home,), (fn(),))
    result = plan(full, Demand({"f": 5.0}), PRED, TWO_CORES)
    assert result.starts == ()
    decision = result.decision("f")
    assert decision is not None
    assert decision.unmet_rps > 0


def test_a_gpu_share_that_fits_no_device_of_the_affine_server_is_not_placed_there() -> None:
    home = ServerView("home", 8, 8, (100, 100), (20, 30), affinity={"f": 1.0})
    other = ServerView("other", 8, 8, (100,), (100,))
    cfg = ScalingConfig(cpu_options=(1,), gpu_options_pct=(50,))
    chosen = starts(PoolView((home, other), (fn(),)), {"f": 200.0}, cfg)
    gpu_starts = [s for s in chosen if s.config.gpu_pct > 0]
    assert gpu_starts
    assert all(s.server_id == "other" for s in gpu_starts)


def test_thousands_of_servers_with_affinity_on_a_handful() -> None:
    many = [server(f"s{k}", (k * 7) % 17) for k in range(2_000)]
    best_fit = next(k for k in range(2_000) if many[k].free_cpus == 2)
    # free cores 4, 16, 1 (no fit), 9, 3, 2: the 3-core one wins, 1.5 / (1 − 2/3) > 1 / 0.25
    affine = {3: 1.0, 29: 1.0, 5: 1.0, 11: 0.8, 15: 1.0, 27: 0.2}
    for k, value in affine.items():
        many[k] = server(f"s{k}", many[k].free_cpus, {"f": value})
    view = PoolView(tuple(many), (fn(), fn("g")))
    result = plan(view, Demand({"f": 5.0, "g": 5.0}), PRED, TWO_CORES)
    (f_start,) = (s for s in result.starts if s.function == "f")

    # brute force over every server: argmax (1 + w·a) / fragment among those where 2 cores fit
    beta = TWO_CORES.beta

    def boosted(k: int) -> float:
        score = beta * many[k].free_cpus
        fragment = max(1.0 - 2 * beta / score, TWO_CORES.min_fragment)
        a = affine.get(k, 0.0)
        return (1.0 + TWO_CORES.affinity_weight * a) / fragment

    fitting = [k for k in range(2_000) if many[k].free_cpus >= 2]
    expected = max(fitting, key=lambda k: (boosted(k), -k))
    assert expected in affine
    assert expected != best_fit
    assert f_start.server_id == f"s{expected}"
    # g has no affinity anywhere: plain best fit, on a server f did not take
    (g_start,) = (s for s in result.starts if s.function == "g")
    g_server = int(g_start.server_id[1:])
    assert g_server not in affine
    assert many[g_server].free_cpus == 2


@settings(max_examples=60, deadline=None)
@given(
    frees=st.lists(st.integers(0, 16), min_size=1, max_size=30),
    marks=st.lists(st.tuples(st.integers(0, 29), st.floats(-1.0, 2.0)), max_size=8),
    cpus=st.integers(1, 16),
)
def test_choices_are_the_best_fit_and_every_fitting_affine_server(
    frees: list[int], marks: list[tuple[int, float]], cpus: int
) -> None:
    affinity: dict[int, float] = {k % len(frees): v for k, v in marks}
    servers = [
        server(f"s{k}", free, {"f": affinity[k]} if k in affinity else None)
        for k, free in enumerate(frees)
    ]
    index = CapacityIndex(servers, beta=0.5)
    got = index.choices(cpus, 0, "f")
    best = index.best_fit(cpus, 0)
    if best is None:
        assert got == []
        return
    assert got[0][0] == best
    assert index.choices(cpus, 0) == [(best, 0.0)]
    want = {k: min(1.0, v) for k, v in affinity.items() if v > 0 and frees[k] >= cpus and k != best}
    assert dict(got[1:]) == want
    assert [k for k, _ in got[1:]] == sorted(want)
    assert got[0][1] == (min(1.0, affinity[best]) if affinity.get(best, 0.0) > 0 else 0.0)


def test_affinity_weight_is_checked() -> None:
    assert check_scaling(ScalingConfig(affinity_weight=0.0)) == []
    (problem,) = check_scaling(ScalingConfig(affinity_weight=-0.1))
    assert "scaling.affinity_weight = -0.1" in problem


def test_server_view_stays_hashable_with_an_affinity() -> None:
    a = server("s", 4, {"f": 1.0})
    assert hash(a) == hash(server("s", 4))
    assert a != server("s", 4)
    assert a == server("s", 4, {"f": 1.0})
