"""Property tests of the plan: capacity, share bounds, and cover when capacity allows."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from infless.scaling.available import knobs_from
from infless.scaling.config import ScalingConfig
from infless.scaling.demand import Demand
from infless.scaling.planner import instance_bounds, plan
from infless.scaling.predictors import AnalyticModel, AnalyticPredictor
from infless.scaling.view import FunctionView, InstanceState, InstanceView, PoolView, ServerView
from infless.types import InstanceConfig

CFG = ScalingConfig(gpu_options_pct=(10, 30, 50))


@st.composite
def server_views(draw: st.DrawFn) -> ServerView:
    cpus = draw(st.integers(1, 32))
    gpus = draw(st.integers(0, 2))
    free_gpu = tuple(draw(st.integers(0, 100)) for _ in range(gpus))
    return ServerView(
        f"s{draw(st.integers(0, 10**6))}",
        cpus,
        draw(st.integers(0, cpus)),
        (100,) * gpus,
        free_gpu,
    )


models = st.builds(
    AnalyticModel,
    fixed_ms=st.floats(0.5, 20.0),
    per_item_ms=st.floats(0.5, 60.0),
    batch_exp=st.floats(0.5, 1.0),
    cpu_exp=st.floats(0.3, 1.0),
    gpu_per_pct=st.sampled_from([0.0, 0.2, 1.0]),
)


@st.composite
def functions(draw: st.DrawFn, name: str) -> FunctionView:
    states = st.sampled_from([InstanceState.READY, InstanceState.STARTING])
    instances = tuple(
        InstanceView(
            f"{name}-{k}",
            name,
            "s-old",
            InstanceConfig(draw(st.sampled_from([1, 2, 4, 8])), draw(st.integers(1, 8))),
            draw(states),
        )
        for k in range(draw(st.integers(0, 4)))
    )
    return FunctionView(
        name=name,
        model_key=name,
        slo_ms=draw(st.floats(5.0, 400.0)),
        max_batch=draw(st.sampled_from([1, 4, 16, 32])),
        min_instances=draw(st.integers(0, 2)),
        keep_warm=draw(st.booleans()),
        instances=instances,
    )


@settings(max_examples=60, deadline=None)
@given(
    servers=st.lists(server_views(), min_size=1, max_size=30, unique_by=lambda s: s.server_id),
    fns=st.tuples(functions("a"), functions("b")),
    model_pair=st.tuples(models, models),
    rates=st.tuples(st.floats(0.0, 5000.0), st.floats(0.0, 5000.0)),
)
def test_the_plan_never_exceeds_server_capacity(
    servers: list[ServerView],
    fns: tuple[FunctionView, FunctionView],
    model_pair: tuple[AnalyticModel, AnalyticModel],
    rates: tuple[float, float],
) -> None:
    predictor = AnalyticPredictor({"a": model_pair[0], "b": model_pair[1]})
    view = PoolView(tuple(servers), fns)
    result = plan(view, Demand({"a": rates[0], "b": rates[1]}), predictor, CFG)
    cpus: dict[str, int] = defaultdict(int)
    gpu: dict[tuple[str, int], int] = defaultdict(int)
    for start in result.starts:
        cpus[start.server_id] += start.config.cpus
        if start.config.gpu_pct:
            assert start.gpu_index is not None
            gpu[(start.server_id, start.gpu_index)] += start.config.gpu_pct
    by_id = {s.server_id: s for s in servers}
    for server_id, used in cpus.items():
        assert used <= by_id[server_id].free_cpus
    for (server_id, device), used in gpu.items():
        assert used <= by_id[server_id].free_gpu_pct[device]
    for start in result.starts:  # every start is feasible under its function's SLO
        slo_ms = next(f.slo_ms for f in fns if f.name == start.function)
        budget = slo_ms if start.config.batch_size == 1 else slo_ms / 2
        assert start.exec_ms <= budget + 1e-9
        assert start.r_low_rps <= start.r_up_rps


@settings(max_examples=60, deadline=None)
@given(fns=st.tuples(functions("a")), model=models, rate=st.floats(0.0, 5000.0))
def test_every_share_stays_within_its_instance_bounds(
    fns: tuple[FunctionView], model: AnalyticModel, rate: float
) -> None:
    predictor = AnalyticPredictor({"a": model})
    view = PoolView((ServerView("s0", 16, 16),), fns)
    result = plan(view, Demand({"a": rate}), predictor, CFG)
    knobs = knobs_from(CFG)
    instances = {i.instance_id: i for i in fns[0].instances}
    for share in result.shares:
        instance = instances[share.instance_id]
        assert instance.state is InstanceState.READY
        bounds = instance_bounds(instance, fns[0], predictor, knobs)
        assert bounds.r_low_rps - 1e-6 <= share.share_rps <= bounds.r_up_rps + 1e-6
    stopped = {s.instance_id for s in result.stops}
    assert stopped.isdisjoint(s.instance_id for s in result.shares)


@settings(max_examples=60, deadline=None)
@given(
    fns=st.tuples(functions("a")),
    model=models.filter(lambda m: m.latency_ms(1, 16) <= 5.0),
    rate=st.floats(0.0, 3000.0),
)
def test_covered_rate_reaches_demand_when_capacity_allows(
    fns: tuple[FunctionView], model: AnalyticModel, rate: float
) -> None:
    predictor = AnalyticPredictor({"a": model})
    function = fns[0]
    function = FunctionView(
        name=function.name,
        model_key=function.model_key,
        slo_ms=max(function.slo_ms, 10.0),
        max_batch=function.max_batch,
        min_instances=function.min_instances,
        max_instances=10**6,
        keep_warm=function.keep_warm,
        instances=function.instances,
    )
    plenty = tuple(ServerView(f"s{k}", 16, 16) for k in range(200))
    result = plan(PoolView(plenty, (function,)), Demand({"a": rate}), predictor, CFG)
    decision = result.decision("a")
    assert decision is not None
    assert decision.unmet_rps == 0
    knobs = knobs_from(CFG)
    stopped = {s.instance_id for s in result.stops}
    live = sum(
        instance_bounds(i, function, predictor, knobs).r_up_rps
        for i in function.instances
        if i.instance_id not in stopped
    )
    assert live + sum(s.r_up_rps for s in result.starts) >= rate - 1e-6
