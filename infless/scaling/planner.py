"""INFless Algorithm 1 (§3.4): non-uniform scale-out, scale-in and dispatch shares as one plan.

`plan(view, demand, predictor, cfg)` decides, for every function (in name order, sharing one
capacity index so functions compete for the same servers):

1. the rate range of each live instance (Equation 1, from its measured or predicted t_exec);
2. scale-out, while the residual R·(1 + headroom) − Σ r_up(live) is positive:
   - take the largest batch size with a feasible configuration (AvailableConfig:
     t_exec ≤ t_slo for b = 1; t_exec ≤ t_slo/2 and residual ≥ r_low for b > 1);
   - take the configuration × server with the highest e_ij (Equation 10) and subtract its
     r_up;
   - a batch size whose configurations fit no server falls through to the next (the
     paper's loop would spin);
   - what no server can take is reported as `unmet_rps`. The configurations no predictor
     could price (say, a GPU share of a model nobody profiled on that GPU) are reported as
     `unpriced`, one line per reason: never dropped in silence;
   - g > 0 is a configuration like any other where the view has GPUs;
3. min/max instances and keep-warm (one instance at zero demand when the cold-start policy
   says so; on the fewest cores, and for a `standby` function the most throughput on them);
4. the §3.2 regimes over the ready instances (`shares.dispatch_shares`): shares, and below the
   band the instances to release (cover at R·(1 + release_headroom) is never broken: a
   wider margin than scale-out's, so a release does not trigger the next start — the
   hysteresis that keeps a noisy estimate from starting and releasing capacity every tick);
5. downsizing (an extension): when the kept instances stay underfed (Σ r_low > R) and a fresh
   Algorithm-1 set for R needs ≤ `downsize_ratio` of their resources, start that set; once it
   is ready, step 4 releases the oversized instances (they are the underfed ones);
6. upsizing (an extension, the converse): when step 2 left demand uncovered because no
   server has room, nothing is starting, and the weakest ready CPU instance (least r_up per
   unit) can be replaced on its own cores by one whose r_up is ≥ `upsize_gain` × its own,
   stop it and start that one in the same pass (the data plane gives the new instance the
   stopping one's cores): instances sized for a low rate no longer hold every core through
   a peak (docs/benchmarks.md, model-less, 2026-11-28 session 15).

Equation 10, deviations (`efficiency = "paper"`, a tiny `min_fragment` and a zero
`affinity_weight` give the literal form):

- the numerator counts the rate the instance will really receive, min(r_up, residual),
  not r_up;
- the fragment 1 − u/S is floored at `min_fragment` (0.25). Literally, a configuration that
  fills a server exactly has fragment 0 and wins whatever its throughput (the reference
  code's 1.001 only caps it at 1000×): a 16-core instance would be started for 5 RPS on an
  empty 16-core server;
- for sharing (Tetris tensor similarity, Optimus transformation), e_ij is multiplied by
  1 + w·a, with w = `affinity_weight` and a = the server's affinity for F
  (`ServerView.affinity`, in [0, 1]). The servers weighed per configuration are the best
  fit and every fitting server with a nonzero affinity for F (`placement.pick`; it lives in
  `infless.scaling.placement` with `Candidate` and `efficiency`).

`plan_with` takes the placement choice as a `placement.Chooser`: Equation 10 by default,
memory per request for the DTS policy (`scaling.dts`).

Pure: no I/O, no clock (time comes in the view). Starting instances count towards cover for
scale-out but not for release, so nothing is released before its replacement serves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from infless.scaling.available import Knobs, candidates, knobs_from
from infless.scaling.bounds import Bounds, rate_bounds
from infless.scaling.capacity import CapacityIndex
from infless.scaling.config import ScalingConfig
from infless.scaling.demand import Demand
from infless.scaling.placement import Candidate, Chooser, Equation10
from infless.scaling.predictors import LatencyPredictor, ScaledPredictor
from infless.scaling.shares import Regime, ShareInput, dispatch_shares
from infless.scaling.view import (
    Action,
    FunctionDecision,
    FunctionView,
    InstanceState,
    InstanceView,
    PoolView,
    ScalingPlan,
    SetShare,
    StartInstance,
    StopInstance,
)

_EPS = 1e-9


@dataclass(slots=True)
class _Placed:
    start: StartInstance
    pos: int
    device: int | None
    units: float


def schedule(
    function: FunctionView,
    cands: Sequence[Candidate],
    residual_rps: float,
    index: CapacityIndex,
    max_new: int,
    chooser: Chooser,
    ensure_one: bool = False,
) -> tuple[list[_Placed], float]:
    """Algorithm 1's outer loop: start instances until the residual is covered (or none fits).

    Returns the placements (already taken from `index`) and the residual left uncovered.
    """
    placed: list[_Placed] = []
    best_rate = max((c.rate_per_unit for c in cands), default=1.0)
    while (residual_rps > _EPS or (ensure_one and not placed)) and len(placed) < max_new:
        choice = chooser.pick(function, cands, residual_rps, index, best_rate)
        if choice is None:
            break
        cand, pos, e_ij = choice
        device = index.place(pos, cand.config.cpus, cand.config.gpu_pct)
        bounds = cand.bounds
        start = StartInstance(
            function=function.name,
            config=cand.config,
            server_id=index.ids[pos],
            gpu_index=device,
            exec_ms=bounds.exec_ms,
            r_low_rps=bounds.r_low_rps,
            r_up_rps=bounds.r_up_rps,
            batch_timeout_ms=bounds.batch_timeout_ms,
            efficiency=e_ij,
        )
        placed.append(_Placed(start, pos, device, cand.units))
        residual_rps -= bounds.r_up_rps
    return placed, residual_rps if residual_rps > _EPS else 0.0


def _start_kept_warm(
    function: FunctionView,
    cands: Sequence[Candidate],
    index: CapacityIndex,
    chooser: Chooser,
    missing: int,
) -> list[_Placed]:
    """Up to `missing` instances kept warm without demand (`_kept_warm`), placed one by
    one (each taken from `index`) until none fits."""
    placed: list[_Placed] = []
    options, rate_rps = _kept_warm(function, cands)
    while len(placed) < missing:
        more, _ = schedule(function, options, rate_rps, index, 1, chooser, ensure_one=True)
        if not more:
            break
        placed.extend(more)
    return placed


def _kept_warm(function: FunctionView, cands: Sequence[Candidate]) -> tuple[list[Candidate], float]:
    """What an instance kept warm at zero demand may be, and the rate to place it for: on
    the fewest cores (GPU shares aside: it holds no more than it must), for no rate (the
    smallest batch); for a `standby` function, of those the one serving the most, for what
    it serves (it is there to absorb a step another function cannot)."""
    fewest = min((c.config.cpus for c in cands), default=0)
    kept = [c for c in cands if c.config.cpus == fewest]
    if function.standby and kept:
        most = max(kept, key=lambda c: (c.bounds.r_up_rps, -c.config.batch_size))
        return [most], most.bounds.r_up_rps
    return kept, 0.0


def equation10(knobs: Knobs) -> Equation10:
    """INFless's placement choice with these knobs."""
    served = knobs.efficiency == "served"
    return Equation10(served, knobs.min_fragment, knobs.affinity_weight)


def _upsize(
    function: FunctionView,
    ready: list[InstanceView],
    live: list[InstanceView],
    stops: list[StopInstance],
    bounds: dict[str, Bounds],
    cands: Sequence[Candidate],
    unmet_rps: float,
    index: CapacityIndex,
    chooser: Chooser,
    knobs: Knobs,
) -> list[_Placed]:
    """Step 6: the replacement of the weakest ready CPU instance, on its cores (taken from
    `index`; the weakest taken out of `ready` and `live`, its stop added to `stops`), or
    nothing (all as it was) when no replacement serves `upsize_gain` × more.

    The replacement must be larger (a larger batch or more cores), its gain judged on
    predictions for both: a ready instance's measured times on a loaded host are longer
    than a new one's prediction (read as a gain, batch 1 replaced batch 1 live)."""
    cpu_only = [i for i in ready if i.config.gpu_pct == 0 and i.server_id in index.positions]
    if not cpu_only:
        return []

    def per_unit(i: InstanceView) -> tuple[float, str]:
        return bounds[i.instance_id].r_up_rps / max(i.config.cpus, 1), i.instance_id

    weakest = min(cpu_only, key=per_unit)
    pos, cpus = index.positions[weakest.server_id], weakest.config.cpus
    old_rps = bounds[weakest.instance_id].r_up_rps
    index.unplace(pos, cpus, 0, None)
    trial, _ = schedule(function, cands, unmet_rps + old_rps, index, 1, chooser)
    if trial and trial[0].pos == pos and _larger(trial[0].start, weakest, cands, old_rps, knobs):
        ready.remove(weakest)
        live.remove(weakest)
        stops.append(StopInstance(function.name, weakest.instance_id, "upsize"))
        return trial
    undo(trial, index, function, chooser)
    index.retake(pos, cpus)
    return []


def _larger(
    new: StartInstance,
    old: InstanceView,
    cands: Sequence[Candidate],
    old_rps: float,
    knobs: Knobs,
) -> bool:
    """Whether `new` is a larger configuration than `old`'s serving `upsize_gain` × its r_up
    (`old`'s as predicted where its configuration is a candidate, else as measured)."""
    was, now = old.config, new.config
    if now.batch_size <= was.batch_size and now.cpus <= was.cpus:
        return False
    same = next((c for c in cands if c.config == was), None)
    base_rps = same.bounds.r_up_rps if same is not None else old_rps
    return new.r_up_rps >= knobs.upsize_gain * base_rps


def undo(
    placed: Sequence[_Placed], index: CapacityIndex, function: FunctionView, chooser: Chooser
) -> None:
    for p in reversed(placed):
        index.unplace(p.pos, p.start.config.cpus, p.start.config.gpu_pct, p.device)
        chooser.unplaced(function, p.pos)


def instance_bounds(
    instance: InstanceView,
    function: FunctionView,
    predictor: LatencyPredictor,
    knobs: Knobs,
) -> Bounds:
    """Equation 1 for a live instance.

    An instance whose config is (no longer) feasible — unpredictable, over its t_exec budget,
    or r_low > r_up — gets [0, 0]: it counts for nothing, draws no share, is released first,
    and new instances are planned as if it were not there.

    r_up is capped by the service time the data plane measures (`InstanceView.service_ms`)
    where that is longer than t_exec: an instance runs one batch at a time, so the pipe and
    the wait for a core limit its rate as much as the forward does (under load on a small
    host, Equation 1 on the forward alone let a peak's second instance go). Feasibility stays
    the forward's (t_exec against the SLO), so contention does not flip an instance to
    infeasible and have it replaced. Never below r_low: the band stays a band.
    """
    config = instance.config
    exec_ms = instance.exec_ms if knobs.prefer_measured else None
    if exec_ms is None:
        try:
            exec_ms = predictor.predict_latency_ms(
                function.model_key, config.batch_size, config.cpus, config.gpu_pct
            )
        except (LookupError, ValueError):
            exec_ms = math.inf
    if not math.isfinite(exec_ms) or exec_ms <= 0:
        return Bounds(config.batch_size, math.inf, function.slo_ms, 0.0, 0.0, 0.0)
    bounds = rate_bounds(config.batch_size, exec_ms, function.slo_ms, knobs.rounding)
    if not bounds.feasible:
        return Bounds(config.batch_size, exec_ms, function.slo_ms, 0.0, 0.0, 0.0)
    service_ms = instance.service_ms if knobs.prefer_measured else None
    if service_ms is not None and service_ms > exec_ms:
        served = rate_bounds(config.batch_size, service_ms, function.slo_ms, knobs.rounding)
        r_up = max(bounds.r_low_rps, min(bounds.r_up_rps, served.r_up_rps))
        return replace(bounds, r_up_rps=r_up)
    return bounds


def plan_function(
    function: FunctionView,
    demand_rps: float,
    predictor: LatencyPredictor,
    knobs: Knobs,
    index: CapacityIndex,
    chooser: Chooser,
) -> tuple[list[Action], FunctionDecision]:
    """Steps 1–5 of the module docstring for one function; `chooser` places each start."""
    demand_rps = max(0.0, demand_rps)
    target_rps = demand_rps * (1.0 + knobs.headroom)
    found = candidates(function, predictor, knobs, index.max_cpus, index.has_gpus)
    cands = found.feasible
    live = [
        i for i in function.instances if i.state in (InstanceState.STARTING, InstanceState.READY)
    ]
    bounds = {i.instance_id: instance_bounds(i, function, predictor, knobs) for i in live}
    ready = [i for i in live if i.state is InstanceState.READY]
    starting_rps = sum(
        (bounds[i.instance_id].r_up_rps for i in live if i.state is InstanceState.STARTING), 0.0
    )
    stops: list[StopInstance] = []

    def rank(i: InstanceView) -> float:
        units = knobs.beta * i.config.cpus + i.config.gpu_pct
        return bounds[i.instance_id].r_up_rps / max(units, _EPS)

    over = len(live) - function.max_instances
    if over > 0:
        for gone in sorted(ready, key=lambda i: (rank(i), i.instance_id))[:over]:
            stops.append(StopInstance(function.name, gone.instance_id, "over-max"))
            ready.remove(gone)
            live.remove(gone)
    max_new = max(0, function.max_instances - len(live))
    live_rmax = sum(bounds[i.instance_id].r_up_rps for i in live)
    placed, unmet = schedule(function, cands, target_rps - live_rmax, index, max_new, chooser)
    need = max(function.min_instances, 1 if (function.keep_warm or demand_rps > 0) else 0)
    missing = min(need - len(live), max_new) - len(placed)
    placed.extend(_start_kept_warm(function, cands, index, chooser, missing))
    if knobs.upsize and unmet > _EPS and not placed and len(live) == len(ready):
        placed = _upsize(function, ready, live, stops, bounds, cands, unmet, index, chooser, knobs)

    n_starting = len(live) - len(ready)
    floor = 1 if (demand_rps > 0 or function.keep_warm) else 0
    min_keep = max(function.min_instances - n_starting - len(placed), floor)
    if placed:
        min_keep = len(ready)  # scaling out: release nothing this tick
    inputs = [
        ShareInput(
            i.instance_id,
            bounds[i.instance_id].r_low_rps,
            bounds[i.instance_id].r_up_rps,
            release_rank=rank(i),
        )
        for i in sorted(ready, key=lambda i: i.instance_id)
    ]
    cover_rps = demand_rps * (1.0 + max(knobs.headroom, knobs.release_headroom))
    shares = dispatch_shares(inputs, demand_rps, knobs.alpha, min_keep, cover_rps=cover_rps)
    reason = "zero-demand" if demand_rps <= 0 else "release"
    stops.extend(StopInstance(function.name, i, reason) for i in shares.release)

    underfed = shares.regime is Regime.BELOW and shares.r_min_rps > demand_rps + _EPS
    if knobs.downsize and underfed and not placed and n_starting == 0 and demand_rps > 0:
        kept = {s.instance_id for s in shares.shares}
        kept_units = sum(
            knobs.beta * i.config.cpus + i.config.gpu_pct for i in ready if i.instance_id in kept
        )
        trial, left = schedule(function, cands, target_rps, index, max_new, chooser)
        trial_units = sum(p.units for p in trial)
        if trial and left <= _EPS and trial_units <= knobs.downsize_ratio * kept_units:
            placed = trial
        else:
            undo(trial, index, function, chooser)

    # shares first (they only re-weight), then new capacity, then what drains away
    actions: list[Action] = [
        SetShare(function.name, s.instance_id, s.share_rps) for s in shares.shares
    ]
    actions.extend(p.start for p in placed)
    actions.extend(stops)
    decision = FunctionDecision(
        function=function.name,
        demand_rps=demand_rps,
        regime=shares.regime,
        r_min_rps=shares.r_min_rps,
        r_max_rps=shares.r_max_rps,
        starting_rps=starting_rps,
        planned_rps=sum((p.start.r_up_rps for p in placed), 0.0),
        unmet_rps=unmet,
        starts=len(placed),
        stops=len(stops),
        unpriced=found.unpriced,
    )
    return actions, decision


def plan_with(
    view: PoolView,
    demand: Demand,
    predictor: LatencyPredictor,
    knobs: Knobs,
    chooser: Chooser | None = None,
) -> ScalingPlan:
    """Every function of `view`, sharing one capacity index; `chooser` makes every placement
    choice of this plan (default: Equation 10)."""
    index = CapacityIndex(view.servers, knobs.beta, knobs.gpu_core_reserve)
    choose = equation10(knobs) if chooser is None else chooser
    actions: list[Action] = []
    decisions: list[FunctionDecision] = []
    for function in sorted(view.functions, key=lambda f: f.name):
        rate_rps = demand.rate_rps(function.name)
        acts, decision = plan_function(function, rate_rps, predictor, knobs, index, choose)
        actions.extend(acts)
        decisions.append(decision)
    return ScalingPlan(tuple(actions), tuple(decisions))


def plan(
    view: PoolView, demand: Demand, predictor: LatencyPredictor, cfg: ScalingConfig
) -> ScalingPlan:
    """INFless: Algorithm 1 + the §3.2 regimes, for every function of the view."""
    if cfg.prediction_factor != 1.0:
        predictor = ScaledPredictor(predictor, cfg.prediction_factor)
    return plan_with(view, demand, predictor, knobs_from(cfg))
