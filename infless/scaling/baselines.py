"""Scaling policies by name: INFless, the baselines it is compared with, and its ablations.

Every policy has the planner's signature, `(view, demand, predictor, cfg) -> ScalingPlan`,
so the shell, the simulator and the benchmarks run them through the same machinery:

- `infless`: Algorithm 1 + the §3.2 regimes (`planner.plan`).
- `openfaas+`: one request per instance (b = 1), fixed resources (`baseline_cpus`,
  `baseline_gpu_pct`), as many instances as ceil(R·(1 + headroom) / r_up), and a fixed
  keep-alive: a surplus instance is stopped once it has been idle `keep_alive_s` (300 s).
  Placed as OpenFaaS's Kubernetes places them: the server with the most free (spread).
- `batch` (BATCH / OTP): the same uniform scaling and placement, but every instance batches
  with one batch size chosen offline (`batch_baseline_size`, or the largest feasible at the
  fixed resources) and timeout t_slo − t_exec.
- `batch+rs` (INFless §5.3): BATCH's instances placed by INFless's scheduler (Equation 10
  over BATCH's one configuration: the best fit, sharing affinity included).
- `infless-nobatch`: INFless with b = 1 only. `infless-nors`: no resource scheduling — for each
  batch size only the maximum-throughput <c, g>. `infless-x1.5`, `infless-x2`: INFless with
  every prediction inflated.
- `dts`: Tetris's DTS — the planner's loop with each instance's <b, c, g> and server chosen
  by served rate per MiB of cost, memory (the store's sharing counted) plus cores × alpha
  (`scaling.dts`).

The pool starts a function's first instance itself, INFless-style: it measures every batch
size and batches with the largest feasible one, on `cpus_per_instance` cores. A policy whose
instances must all look one way (openfaas+ and infless-nobatch: b = 1; openfaas+ and batch:
the fixed resources) treats such an instance as foreign (`replacing_foreign`): it plans as if
the instance were not there, lets it serve until its own instances are ready, then stops it.

Uniform baselines fill instances in start order (each up to r_up; the rest get share 0), so
surplus instances go idle and their keep-alive can expire; with an equal split no instance
would ever idle and they would never scale in. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from infless.dataplane.policy import powers_of_two_up_to
from infless.scaling.available import knobs_from
from infless.scaling.bounds import Bounds, rate_bounds
from infless.scaling.capacity import CapacityIndex
from infless.scaling.config import POLICY_NAMES, ScalingConfig
from infless.scaling.demand import Demand
from infless.scaling.dts import plan_dts
from infless.scaling.placement import Candidate, pick
from infless.scaling.planner import plan, plan_with
from infless.scaling.predictors import LatencyPredictor, ScaledPredictor
from infless.scaling.shares import Regime, regime_of
from infless.scaling.view import (
    Action,
    FunctionDecision,
    FunctionView,
    InstanceState,
    PoolView,
    ScalingPlan,
    SetShare,
    StartInstance,
    StopInstance,
)
from infless.types import InstanceConfig

ScalingPolicy = Callable[[PoolView, Demand, LatencyPredictor, ScalingConfig], ScalingPlan]


def uniform_config(
    function: FunctionView,
    predictor: LatencyPredictor,
    cfg: ScalingConfig,
    batching: bool,
    max_cpus: int,
    has_gpus: bool,
) -> tuple[InstanceConfig, Bounds] | None:
    """The one configuration every instance of `function` gets under openfaas+ / batch."""
    cpus = max(1, min(cfg.baseline_cpus, max_cpus))
    gpu_pct = cfg.baseline_gpu_pct if has_gpus else 0

    def bounds_at(b: int) -> Bounds | None:
        try:
            exec_ms = predictor.predict_latency_ms(function.model_key, b, cpus, gpu_pct)
        except (LookupError, ValueError):
            return None
        if not math.isfinite(exec_ms) or exec_ms <= 0:
            return None
        return rate_bounds(b, exec_ms, function.slo_ms, cfg.rounding)

    batch = 1
    if batching:
        if cfg.batch_baseline_size > 0:
            batch = min(cfg.batch_baseline_size, max(1, function.max_batch))
        else:
            for b in sorted(powers_of_two_up_to(max(1, function.max_batch)), reverse=True):
                found = bounds_at(b)
                if found is not None and found.feasible:
                    batch = b
                    break
    bounds = bounds_at(batch)
    if bounds is None or bounds.r_up_rps <= 0:
        return None
    return InstanceConfig(batch, cpus, gpu_pct), bounds


def _plan_uniform_function(
    function: FunctionView,
    demand_rps: float,
    predictor: LatencyPredictor,
    cfg: ScalingConfig,
    index: CapacityIndex,
    now_s: float,
    batching: bool,
    scheduled: bool,
) -> tuple[list[Action], FunctionDecision]:
    demand_rps = max(0.0, demand_rps)
    chosen = uniform_config(function, predictor, cfg, batching, index.max_cpus, index.has_gpus)
    live = [
        i for i in function.instances if i.state in (InstanceState.STARTING, InstanceState.READY)
    ]
    ready = sorted(
        (i for i in live if i.state is InstanceState.READY),
        key=lambda i: (i.started_s, i.instance_id),
    )
    if chosen is None:
        decision = FunctionDecision(
            function=function.name,
            demand_rps=demand_rps,
            regime=Regime.IDLE,
            r_min_rps=0.0,
            r_max_rps=0.0,
            starting_rps=0.0,
            planned_rps=0.0,
            unmet_rps=demand_rps,
        )
        return [], decision
    config, bounds = chosen
    r_up = bounds.r_up_rps
    wanted = math.ceil(demand_rps * (1.0 + cfg.headroom) / r_up - 1e-9) if demand_rps > 0 else 0
    target = min(max(function.min_instances, wanted), function.max_instances)
    starts: list[Action] = []
    place = _scheduler(function.name, config, bounds, cfg) if scheduled else _spread(config)
    for _ in range(target - len(live)):
        pos = place(index)
        if pos is None:
            break
        device = index.place(pos, config.cpus, config.gpu_pct)
        starts.append(
            StartInstance(
                function=function.name,
                config=config,
                server_id=index.ids[pos],
                gpu_index=device,
                exec_ms=bounds.exec_ms,
                r_low_rps=bounds.r_low_rps,
                r_up_rps=r_up,
                batch_timeout_ms=bounds.batch_timeout_ms,
                efficiency=0.0,
            )
        )
    unmet = max(0.0, demand_rps - (len(live) + len(starts)) * r_up)
    remaining = demand_rps
    shares: dict[str, float] = {}
    for instance in ready:
        shares[instance.instance_id] = min(r_up, remaining)
        remaining = max(0.0, remaining - r_up)
    surplus = len(live) - target
    stops: list[Action] = []
    for instance in reversed(ready):
        if len(stops) >= surplus:
            break
        idle_since = instance.idle_since_s
        if shares[instance.instance_id] > 0 or idle_since is None:
            continue
        if now_s - idle_since >= cfg.keep_alive_s:
            stops.append(StopInstance(function.name, instance.instance_id, "keep-alive"))
    actions: list[Action] = [SetShare(function.name, i, s) for i, s in shares.items()]
    actions += starts + stops
    r_max = len(ready) * r_up
    r_min = len(ready) * bounds.r_low_rps
    decision = FunctionDecision(
        function=function.name,
        demand_rps=demand_rps,
        regime=regime_of(demand_rps, r_min, r_max, cfg.alpha),
        r_min_rps=r_min,
        r_max_rps=r_max,
        starting_rps=(len(live) - len(ready)) * r_up,
        planned_rps=len(starts) * r_up,
        unmet_rps=unmet,
        starts=len(starts),
        stops=len(stops),
    )
    return actions, decision


def _spread(config: InstanceConfig) -> Callable[[CapacityIndex], int | None]:
    """Kubernetes' default placement (OpenFaaS): the server with the most free."""
    return lambda index: index.spread_fit(config.cpus, config.gpu_pct)


def _scheduler(
    function: str, config: InstanceConfig, bounds: Bounds, cfg: ScalingConfig
) -> Callable[[CapacityIndex], int | None]:
    """INFless's Schedule() for one configuration: the server with the best e_ij."""
    candidate = Candidate(config, bounds, cfg.beta * config.cpus + config.gpu_pct)

    def place(index: CapacityIndex) -> int | None:
        # BATCH decided how many; Equation 10 only places each (a full instance's rate)
        choice = pick(
            [candidate],
            bounds.r_up_rps,
            index,
            candidate.rate_per_unit,
            function=function,
            served=cfg.efficiency == "served",
            min_fragment=cfg.min_fragment,
            affinity_weight=cfg.affinity_weight,
        )
        return None if choice is None else choice[1]

    return place


def _uniform_policy(batching: bool, scheduled: bool = False) -> ScalingPolicy:
    def policy(
        view: PoolView, demand: Demand, predictor: LatencyPredictor, cfg: ScalingConfig
    ) -> ScalingPlan:
        index = CapacityIndex(view.servers, cfg.beta, cfg.gpu_core_reserve)
        actions: list[Action] = []
        decisions: list[FunctionDecision] = []
        for function in sorted(view.functions, key=lambda f: f.name):
            acts, decision = _plan_uniform_function(
                function,
                demand.rate_rps(function.name),
                predictor,
                cfg,
                index,
                view.now_s,
                batching,
                scheduled,
            )
            actions.extend(acts)
            decisions.append(decision)
        return ScalingPlan(tuple(actions), tuple(decisions))

    return policy


def _ablation(
    factor: float = 1.0, allow_batching: bool = True, max_throughput_only: bool = False
) -> ScalingPolicy:
    def policy(
        view: PoolView, demand: Demand, predictor: LatencyPredictor, cfg: ScalingConfig
    ) -> ScalingPlan:
        scale = factor * cfg.prediction_factor
        if scale != 1.0:
            predictor = ScaledPredictor(predictor, scale)
        knobs = replace(
            knobs_from(cfg),
            allow_batching=allow_batching,
            max_throughput_only=max_throughput_only,
        )
        return plan_with(view, demand, predictor, knobs)

    return policy


Conforms = Callable[[InstanceConfig, InstanceConfig], bool]  # (config, the fixed one at b = 1)


def _fixed_resources(config: InstanceConfig, fixed: InstanceConfig) -> bool:
    return (config.cpus, config.gpu_pct) == (fixed.cpus, fixed.gpu_pct)


def _unbatched(config: InstanceConfig, fixed: InstanceConfig) -> bool:
    return config.batch_size == 1


def _unbatched_fixed(config: InstanceConfig, fixed: InstanceConfig) -> bool:
    return config == fixed


_LIVE = (InstanceState.STARTING, InstanceState.READY)


def replacing_foreign(policy: ScalingPolicy, conforms: Conforms) -> ScalingPolicy:
    """`policy`, planning only over the instances that `conforms` accepts, with the cores of
    the foreign ones counted as free (a replacement may share them until they stop, as the
    CPU allocator lets instances share cores); each foreign ready instance keeps serving
    (share = the demand) while its function has no ready instance of its own or some still
    start, and is stopped ("foreign") once they are all ready."""

    def wrapped(
        view: PoolView, demand: Demand, predictor: LatencyPredictor, cfg: ScalingConfig
    ) -> ScalingPlan:
        has_gpus = any(s.gpu_pct for s in view.servers)
        max_cpus = max((s.cpus for s in view.servers), default=1)
        fixed = InstanceConfig(  # what uniform_config gives every openfaas+ / batch instance
            1, max(1, min(cfg.baseline_cpus, max_cpus)), cfg.baseline_gpu_pct if has_gpus else 0
        )
        foreign = {
            f.name: {i.instance_id for i in f.instances if not conforms(i.config, fixed)}
            for f in view.functions
        }
        if not any(foreign.values()):
            return policy(view, demand, predictor, cfg)
        lent: dict[str, int] = {}  # a replacement may use the cores of what it replaces
        for function in view.functions:
            for instance in function.instances:
                if instance.instance_id in foreign[function.name] and instance.state in _LIVE:
                    lent[instance.server_id] = (
                        lent.get(instance.server_id, 0) + instance.config.cpus
                    )
        own_view = replace(
            view,
            servers=tuple(
                replace(s, free_cpus=min(s.cpus, s.free_cpus + lent.get(s.server_id, 0)))
                for s in view.servers
            ),
            functions=tuple(
                replace(
                    f,
                    instances=tuple(i for i in f.instances if i.instance_id not in foreign[f.name]),
                )
                for f in view.functions
            ),
        )
        result = policy(own_view, demand, predictor, cfg)
        extra: list[Action] = []
        for function in view.functions:
            own_states = [
                i.state for i in function.instances if i.instance_id not in foreign[function.name]
            ]
            replaced = (
                InstanceState.READY in own_states and InstanceState.STARTING not in own_states
            )
            for instance in function.instances:
                if instance.instance_id not in foreign[function.name]:
                    continue
                if instance.state is not InstanceState.READY:
                    continue
                if replaced:
                    extra.append(StopInstance(function.name, instance.instance_id, "foreign"))
                else:
                    share = max(demand.rate_rps(function.name), 1.0)
                    extra.append(SetShare(function.name, instance.instance_id, share))
        return ScalingPlan((*result.actions, *extra), result.decisions)

    return wrapped


plan_openfaas_plus = replacing_foreign(_uniform_policy(batching=False), _unbatched_fixed)
plan_batch = replacing_foreign(_uniform_policy(batching=True), _fixed_resources)
plan_batch_rs = replacing_foreign(_uniform_policy(batching=True, scheduled=True), _fixed_resources)

POLICIES: dict[str, ScalingPolicy] = {
    "infless": plan,
    "batch": plan_batch,
    "batch+rs": plan_batch_rs,
    "openfaas+": plan_openfaas_plus,
    "infless-nobatch": replacing_foreign(_ablation(allow_batching=False), _unbatched),
    "infless-nors": _ablation(max_throughput_only=True),
    "infless-x1.5": _ablation(1.5),
    "infless-x2": _ablation(2.0),
    "dts": plan_dts,
}
assert tuple(POLICIES) == POLICY_NAMES


def get_policy(name: str) -> ScalingPolicy:
    """The policy called `name` ([scaling] policy in config.toml)."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(
            f"scaling policy {name!r} is unknown; use one of {', '.join(POLICY_NAMES)}"
        ) from None
