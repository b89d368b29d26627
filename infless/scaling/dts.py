"""Tetris's DTS as a scaling policy: each instance's <b, c, g> chosen by throughput per cost,
with memory in the cost and the tensor store's sharing counted.

Tetris (`faas-netes/gpu/controller/estimator.go`) sorts an instance's configurations by
`qps / cost`, with `qps = 1000 / latency × concurrency × batch` and
`cost = cpus × alpha + memory`, and takes the first with latency ≤ SLO/2 (≤ SLO at b = 1).
Its placement prefers the server whose functions share the most memory with the new one.
Tetris shipped alpha = 0 (its loader is commented out), so its cost is memory alone.

Here, for every instance the planner's loop starts (`planner.plan_with`, with this module's
`DtsChooser` in place of Equation 10):

- the candidates are Algorithm 1's (`available.candidates`): t_exec ≤ t_slo for b = 1,
  ≤ t_slo/2 above, and a b > 1 only while the residual reaches its r_low (so the batch
  fills before its timeout);
- qps is the rate the instance will serve, min(r_up, residual) (the planner's "served"
  numerator; `efficiency = "paper"`: r_up, as Tetris);
- cost, in MiB, on server j: the instance's private memory at batch b (runtime plus b ×
  activations, `FunctionView.memory`), plus the model's weights times the share of them
  server j does not hold yet, plus `dts_alpha_mib_per_core` × its cores (a GPU share counts
  as g/β cores, the planner's FLOPS ratio);
- a server holds a model's weights when an instance of that model runs (or drains) there,
  when this plan placed one there, or as far as its store affinity for the function says
  (`ServerView.affinity`: the share of its tensors stored). So the second instance of a
  model on a server is cheaper than the first, and placement prefers servers that hold the
  weights (the tightest such server, kept while it fits: it only gets tighter);
- Tetris's "concurrency" (several requests in one runtime, one copy of the weights) is
  what co-located instances of one model are here: each its own runtime, the weights once.

alpha (`scaling.dts_alpha_mib_per_core`, default 64): with 0, as Tetris shipped, cores and
GPU shares are free, so the widest feasible instance wins wherever the residual fills it
(in the simulator, GPU shares for most functions: docs/reproduction.md); at a cloud's
price ratio (one core ≈ 4–8 GiB) memory never changes a choice for models
whose instances hold 50–70 MiB. 64 MiB per core makes one core weigh about one instance's
runtime (48 MiB assumed) on the models measured here, so both terms decide.

Release, shares, keep-warm and downsizing are the planner's. A function without memory
figures is priced as a bare runtime (`memory.UNKNOWN_MODEL`). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infless.scaling.available import knobs_from
from infless.scaling.capacity import CapacityIndex
from infless.scaling.config import ScalingConfig
from infless.scaling.demand import Demand
from infless.scaling.memory import MIB, UNKNOWN_MODEL
from infless.scaling.placement import Candidate, Choice
from infless.scaling.planner import plan_with
from infless.scaling.predictors import LatencyPredictor, ScaledPredictor
from infless.scaling.view import FunctionView, PoolView, ScalingPlan

_EPS = 1e-9
_MIN_COST_MIB = 1e-6  # a model whose figures are all zero still divides by something


def held_weights(view: PoolView) -> dict[str, dict[int, float]]:
    """Model → {server position: share of its weights that server holds} (see the module
    docstring): 1 where an instance of the model runs or drains, else the store affinity."""
    position = {server.server_id: pos for pos, server in enumerate(view.servers)}
    model_of = {function.name: function.model_key for function in view.functions}
    held: dict[str, dict[int, float]] = {}
    for pos, server in enumerate(view.servers):
        for name, affinity in server.affinity.items():
            model = model_of.get(name)
            if model is not None and affinity > 0:
                shares = held.setdefault(model, {})
                shares[pos] = max(shares.get(pos, 0.0), min(1.0, affinity))
    for function in view.functions:
        for instance in function.instances:
            where = position.get(instance.server_id)
            if where is not None:
                held.setdefault(function.model_key, {})[where] = 1.0
    return held


@dataclass(frozen=True, slots=True)
class _Priced:
    """One candidate's cost, computed once per plan: on a server holding all the weights,
    and what the weights add where none are held."""

    cand: Candidate
    held_mib: float
    weights_mib: float
    best_cost_mib: float  # cost_mib(1.0)

    def cost_mib(self, held_share: float) -> float:
        missing = self.weights_mib * max(0.0, 1.0 - held_share)
        return max(self.held_mib + missing, _MIN_COST_MIB)


_Ranked = tuple[float, float, _Priced]  # (best-case score, served rate, the candidate)


@dataclass(frozen=True, slots=True)
class _Prices:
    """One function's candidates priced, and ranked for a residual they are all under."""

    cands: Sequence[Candidate]
    priced: list[_Priced]
    full: list[_Ranked]  # rate = r_up, highest score first
    top_rps: float  # the largest r_up: from this residual up, `full` is the ranking


class DtsChooser:
    """The placement choice of one plan: best throughput per MiB of cost (module docstring).

    Keeps which servers hold which model's weights, and adds each placement of this plan.
    Per plan it remembers each candidate's cost and, per model and shape, the held server it
    last chose: kept while it fits (it only gets tighter), so a plan of thousands of
    instances does not scan every held server for each."""

    def __init__(
        self,
        held: dict[str, dict[int, float]],
        alpha_mib_per_core: float,
        beta: float,
        served: bool = True,
    ) -> None:
        self._held = held
        self._alpha = alpha_mib_per_core
        self._beta = beta
        self._served = served
        self._before: dict[tuple[str, int], float | None] = {}  # what a placement overwrote
        self._placed: dict[tuple[str, int], int] = {}  # instances this plan put there
        self._priced: dict[str, _Prices] = {}
        self._sticky: dict[tuple[str, int, int], int] = {}  # (model, c, g) → held position
        # per model, the held servers that may still fit something (no core left: dropped)
        self._open: dict[str, set[int]] = {model: set(shares) for model, shares in held.items()}

    def _price(self, function: FunctionView, cand: Candidate) -> _Priced:
        memory = function.memory or UNKNOWN_MODEL
        config = cand.config
        cores = config.cpus + config.gpu_pct / self._beta
        held_mib = memory.private_bytes(config.batch_size) / MIB + self._alpha * cores
        weights_mib = memory.weight_bytes / MIB
        best_cost_mib = max(held_mib, _MIN_COST_MIB)
        return _Priced(cand, held_mib, weights_mib, best_cost_mib)

    def cost_mib(self, function: FunctionView, cand: Candidate, held_share: float) -> float:
        """The cost of one instance with `cand`'s config on a server holding `held_share`
        of the model's weights: private memory, missing weights, cores × alpha."""
        return self._price(function, cand).cost_mib(held_share)

    def _prices(self, function: FunctionView, cands: Sequence[Candidate]) -> _Prices:
        cached = self._priced.get(function.name)
        if cached is None or cached.cands is not cands:
            priced = [self._price(function, cand) for cand in cands]
            full = [
                (p.cand.bounds.r_up_rps / p.best_cost_mib, p.cand.bounds.r_up_rps, p)
                for p in priced
            ]
            full.sort(key=lambda r: -r[0])  # stable: equal scores keep the candidates' order
            top_rps = max((p.cand.bounds.r_up_rps for p in priced), default=0.0)
            cached = _Prices(cands, priced, full, top_rps)
            self._priced[function.name] = cached
        return cached

    def _ranked(self, prices: _Prices, residual_rps: float) -> list[_Ranked]:
        """The candidates by their best-case score, highest first, at this residual."""
        if residual_rps >= prices.top_rps:  # every r_up is served whole, every r_low met
            return prices.full
        floor_rps = max(residual_rps, 1.0)
        ranked: list[_Ranked] = []
        for priced in prices.priced:
            bounds = priced.cand.bounds
            if priced.cand.config.batch_size > 1 and residual_rps + _EPS < bounds.r_low_rps:
                continue
            rate_rps = min(bounds.r_up_rps, floor_rps) if self._served else bounds.r_up_rps
            ranked.append((rate_rps / priced.best_cost_mib, rate_rps, priced))
        ranked.sort(key=lambda r: -r[0])  # stable: equal scores keep the candidates' order
        return ranked

    def pick(
        self,
        function: FunctionView,
        cands: Sequence[Candidate],
        residual_rps: float,
        index: CapacityIndex,
        best_rate: float,
    ) -> Choice | None:
        """The (candidate, server) of highest served qps per MiB of cost; None if none fits.

        Candidates are tried by their best case (on a server holding all the weights),
        highest first; the search stops once that cannot beat the best found. Ties:
        candidate order (larger b first), then a server holding more of the weights, then
        the tighter fit."""
        ranked = self._ranked(self._prices(function, cands), residual_rps)
        best: tuple[float, Candidate, int] | None = None
        for entry in ranked:
            if best is not None and entry[0] <= best[0]:
                break
            best = self._weigh(function.model_key, entry, index, best)
        if best is None:
            return None
        score, cand, pos = best
        self._mark(function.model_key, pos)
        return cand, pos, score

    def _weigh(
        self,
        model: str,
        entry: _Ranked,
        index: CapacityIndex,
        best: tuple[float, Candidate, int] | None,
    ) -> tuple[float, Candidate, int] | None:
        """`best`, or `entry` on one of its servers where that scores higher."""
        _, rate_rps, priced = entry
        for pos, share in self._servers(model, priced.cand, index):
            score = rate_rps / priced.cost_mib(share)
            if best is None or score > best[0] + _EPS:
                best = (score, priced.cand, pos)
        return best

    def _servers(
        self, model: str, cand: Candidate, index: CapacityIndex
    ) -> list[tuple[int, float]]:
        """The servers worth weighing: the fitting one holding the most of the weights
        (ties: the smallest free score; then kept while it fits), then the best fit, each
        with its held share."""
        held = self._held.get(model, {})
        cpus, gpu_pct = cand.config.cpus, cand.config.gpu_pct
        shape = (model, cpus, gpu_pct)
        chosen = self._sticky.get(shape)
        if chosen is None or held.get(chosen) != 1.0 or not index.fits(chosen, cpus, gpu_pct):
            chosen = self._scan(model, cpus, gpu_pct, index)
            if chosen is None:
                self._sticky.pop(shape, None)
            else:
                self._sticky[shape] = chosen
        found: list[tuple[int, float]] = []
        if chosen is not None:
            found.append((chosen, held[chosen]))
        fit = index.best_fit(cpus, gpu_pct)
        if fit is not None and fit != chosen:
            found.append((fit, held.get(fit, 0.0)))
        return found

    def _scan(self, model: str, cpus: int, gpu_pct: int, index: CapacityIndex) -> int | None:
        """The fitting held server with the most of the weights, then the tightest; the
        full ones (no core left) leave the model's open set on the way."""
        held = self._held.get(model, {})
        open_set = self._open.get(model, set())
        top: tuple[float, float, int] | None = None  # (-share, free score, position)
        for pos in list(open_set):  # the key below orders them: no sort needed
            if index.free_cpus[pos] < 1:  # every instance needs a core
                open_set.discard(pos)
                continue
            share = held.get(pos, 0.0)
            if share > 0 and index.fits(pos, cpus, gpu_pct):
                key = (-share, index.score(pos), pos)
                if top is None or key < top:
                    top = key
        return None if top is None else top[2]

    def _mark(self, model: str, pos: int) -> None:
        held = self._held.setdefault(model, {})
        key = (model, pos)
        if key not in self._placed:
            self._before[key] = held.get(pos)
        self._placed[key] = self._placed.get(key, 0) + 1
        held[pos] = 1.0
        self._open.setdefault(model, set()).add(pos)

    def unplaced(self, function: FunctionView, pos: int) -> None:
        """Undo `_mark` for one instance: the last one taken back restores the old share."""
        key = (function.model_key, pos)
        count = self._placed.get(key, 0) - 1
        if count > 0:
            self._placed[key] = count
            return
        self._placed.pop(key, None)
        before = self._before.pop(key, None)
        held = self._held.setdefault(function.model_key, {})
        if before is None:
            held.pop(pos, None)
        else:
            held[pos] = before


def plan_dts(
    view: PoolView, demand: Demand, predictor: LatencyPredictor, cfg: ScalingConfig
) -> ScalingPlan:
    """Tetris DTS: the planner's loop with memory-aware placement choices (module doc)."""
    if cfg.prediction_factor != 1.0:
        predictor = ScaledPredictor(predictor, cfg.prediction_factor)
    knobs = knobs_from(cfg)
    served = knobs.efficiency == "served"
    chooser = DtsChooser(held_weights(view), cfg.dts_alpha_mib_per_core, knobs.beta, served)
    return plan_with(view, demand, predictor, knobs, chooser)
