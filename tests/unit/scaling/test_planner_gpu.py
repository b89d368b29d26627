"""Algorithm 1 with GPU shares: <b, c, g > 0> chosen from GPU profiles, placed on a device with
room, never over a device's 100 %, what cannot be priced reported, CPU-only planning unchanged."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from infless.profiler.database import GpuLatencyRow
from infless.scaling.available import candidates, knobs_from
from infless.scaling.config import ScalingConfig
from infless.scaling.demand import Demand
from infless.scaling.gpu_profiles import GpuProfilePredictor
from infless.scaling.planner import plan
from infless.scaling.predictors import AnalyticModel, AnalyticPredictor
from infless.scaling.view import FunctionView, PoolView, ScalingPlan, ServerView

H100 = "NVIDIA H100 80GB HBM3"
# on cores: t = 40 ms · b / c, so one core serves 25 requests per second at b = 1
CPU = AnalyticPredictor({"m": AnalyticModel(0.0, 40.0, batch_exp=1.0, cpu_exp=1.0)})
CFG = ScalingConfig(cpu_options=(1, 2, 4))
BATCHES = (1, 2, 4, 8, 16, 32)


def gpu_rows(
    launch_ms: float,
    per_item_ms_at_30: float,
    shares: tuple[int, ...] = (30, 50, 100),
    model: str = "m",
) -> list[GpuLatencyRow]:
    """A GPU profile: t = launch + per item × b × 30 / g (work spread over the share)."""
    return [
        GpuLatencyRow(H100, model, b, g, 1, launch_ms + per_item_ms_at_30 * b * 30.0 / g)
        for g in shares
        for b in BATCHES
    ]


# profiled at 30 % only: b = 8 takes 32 ms there, 250 requests per second, ten cores' worth
# (a larger share is priced as 30 %: never slower, and no faster that anyone measured)
TEN_CORES = GpuProfilePredictor(gpu_rows(8.0, 3.0, shares=(30,)), [H100], fallback=CPU)


def gpu_server(free_gpu_pct: tuple[int, ...] = (100, 100), cpus: int = 8) -> ServerView:
    return ServerView("g", cpus, cpus, (100,) * len(free_gpu_pct), free_gpu_pct)


def fn(max_batch: int = 8, slo_ms: float = 100.0) -> FunctionView:
    return FunctionView("f", "m", slo_ms, max_batch)


def used_per_device(result: ScalingPlan) -> dict[tuple[str, int], int]:
    used: dict[tuple[str, int], int] = defaultdict(int)
    for start in result.starts:
        if start.config.gpu_pct:
            assert start.gpu_index is not None
            used[(start.server_id, start.gpu_index)] += start.config.gpu_pct
        else:
            assert start.gpu_index is None
    return used


def test_a_gpu_share_serving_ten_cores_is_chosen_where_it_allows_the_larger_batch() -> None:
    """Cores cannot run b = 8 within half the SLO; 30 % of a GPU can, and Algorithm 1 tries
    the largest batch first."""
    view = PoolView((gpu_server((20, 100)),), (fn(),))
    result = plan(view, Demand({"f": 600.0}), TEN_CORES, CFG)
    first = result.starts[0]
    assert (first.config.batch_size, first.config.cpus, first.config.gpu_pct) == (8, 1, 30)
    assert all(s.config.batch_size == 8 and s.config.gpu_pct >= 30 for s in result.starts)
    assert {s.gpu_index for s in result.starts} == {1}  # device 0 has 20 % free: no room
    assert sum(s.r_up_rps for s in result.starts) >= 600.0 * 1.1
    assert used_per_device(result)[("g", 1)] <= 100


def test_when_the_devices_are_full_the_rest_goes_to_cores_or_is_reported_unmet() -> None:
    view = PoolView((gpu_server((20, 100)),), (fn(),))
    result = plan(view, Demand({"f": 5000.0}), TEN_CORES, CFG)
    used = used_per_device(result)
    assert used[("g", 0)] <= 20
    assert used[("g", 1)] <= 100
    assert sum(s.config.cpus for s in result.starts) <= 8
    assert any(s.config.gpu_pct == 0 for s in result.starts)  # the cores left take b = 4
    decision = result.decision("f")
    assert decision is not None
    assert decision.unmet_rps > 0


def test_at_one_batch_size_equation_10_weighs_a_share_by_beta() -> None:
    """β = 64/142: 30 % of a GPU weighs as much as 66 cores. Serving ten cores' worth it
    loses to a core; serving eighty cores' worth it wins."""
    view = PoolView((gpu_server(),), (fn(max_batch=1),))
    ten = GpuProfilePredictor(gpu_rows(0.0, 4.0), [H100], fallback=CPU)  # 4 ms: 250 rps
    first = plan(view, Demand({"f": 3000.0}), ten, CFG).starts[0]
    assert first.config.gpu_pct == 0
    eighty = GpuProfilePredictor(gpu_rows(0.0, 0.5), [H100], fallback=CPU)  # 2000 rps
    first = plan(view, Demand({"f": 3000.0}), eighty, CFG).starts[0]
    assert first.config.cpus == 1
    assert first.config.gpu_pct > 0


def test_the_whole_gpu_is_an_option_where_the_profile_has_it() -> None:
    """At 100 % b = 32 fits half the SLO (38 ms), at 50 % it does not (65 ms)."""
    assert 100 in ScalingConfig().gpu_options_pct
    whole = GpuProfilePredictor(gpu_rows(0.0, 2.4), [H100], fallback=CPU)
    view = PoolView((gpu_server((60, 100)),), (fn(max_batch=32),))
    result = plan(view, Demand({"f": 700.0}), whole, CFG)
    assert [(s.config.batch_size, s.config.gpu_pct, s.gpu_index) for s in result.starts] == [
        (32, 100, 1)
    ]


def test_unpriced_configurations_are_reported_once_per_reason() -> None:
    unprofiled = GpuProfilePredictor([], [H100], fallback=CPU)
    found = candidates(fn(), unprofiled, knobs_from(CFG), 8, has_gpus=True)
    assert found.feasible
    assert all(c.config.gpu_pct == 0 for c in found.feasible)
    n_gpu_configs = 4 * 3 * len(CFG.gpu_options_pct)  # b in 1..8, c in 1, 2, 4
    assert found.unpriced == (
        f"b8/c1/g10 and {n_gpu_configs - 1} more: no GPU profile of m on {H100} "
        "(run infless profile --gpu m)",
    )
    view = PoolView((gpu_server(),), (fn(),))
    decision = plan(view, Demand({"f": 50.0}), unprofiled, CFG).decision("f")
    assert decision is not None
    assert decision.unpriced == found.unpriced


def test_shares_below_the_profiled_ones_are_reported_with_the_smallest_measured() -> None:
    found = candidates(fn(max_batch=1), TEN_CORES, knobs_from(CFG), 8, has_gpus=True)
    assert [line.split(": ", 1)[0] for line in found.unpriced] == [
        "b1/c1/g10 and 2 more",
        "b1/c1/g20 and 2 more",
    ]
    assert all("measured down to 30 %" in line for line in found.unpriced)


def test_priced_but_over_the_slo_is_infeasible_not_unpriced() -> None:
    slow = AnalyticPredictor({"m": AnalyticModel(500.0, 1.0)})
    found = candidates(fn(), slow, knobs_from(CFG), 8, has_gpus=False)
    assert found.feasible == ()
    assert found.unpriced == ()


def test_cpu_only_views_plan_exactly_as_without_gpu_profiles() -> None:
    cpu_only = PoolView(tuple(ServerView(f"s{k}", 16, 16 - 3 * k) for k in range(4)), (fn(),))
    for rate_rps in (5.0, 80.0, 400.0, 2000.0):
        alone = plan(cpu_only, Demand({"f": rate_rps}), CPU, CFG)
        chained = plan(cpu_only, Demand({"f": rate_rps}), TEN_CORES, CFG)
        assert chained == alone


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 16), st.lists(st.integers(0, 100), min_size=1, max_size=2)),
        min_size=1,
        max_size=3,
    ),
    st.floats(1.0, 20_000.0),
    st.sampled_from([1, 8, 32]),
)
def test_no_device_is_ever_given_more_than_it_has_free(
    servers: list[tuple[int, list[int]]], rate_rps: float, max_batch: int
) -> None:
    views = tuple(
        ServerView(f"s{k}", cpus, cpus, (100,) * len(free), tuple(free))
        for k, (cpus, free) in enumerate(servers)
    )
    predictor = GpuProfilePredictor(gpu_rows(2.0, 1.0, shares=(10, 30, 100)), [H100], CPU)
    result = plan(PoolView(views, (fn(max_batch),)), Demand({"f": rate_rps}), predictor, CFG)
    used = used_per_device(result)
    for k, (cpus, free) in enumerate(servers):
        assert sum(s.config.cpus for s in result.starts if s.server_id == f"s{k}") <= cpus
        for device, free_pct in enumerate(free):
            assert used[(f"s{k}", device)] <= free_pct
