"""Tetris's DTS as a scaling policy: each instance's <b, c, g> chosen by throughput per cost,
with memory in the cost and the tensor store's sharing counted.

Tetris (`faas-netes/gpu/controller/estimator.go`) sorts an instance's configurations by
`qps / cost`, with `qps = 1000 / latency × concurrency × batch` and
`cost = cpus × alpha + memory`, and takes the first with latency ≤ SLO/2 (≤ SLO at b = 1).
Its placement prefers the server whose functions share the most memory with the new one.
Tetris shipped alpha = 0 (its loader is commented out), so its cost is memory alone.

Here, for every instance the planner's loop starts (`planner.plan_with`, with this module's
`DtsChooser` in place of Equation 10):

- the candidates are Algorithm 1's (`planner.candidates`): t_exec ≤ t_slo for b = 1,
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
  weights (ties: the tightest fit);
- Tetris's "concurrency" (several requests in one runtime, one copy of the weights) is
  what co-located instances of one model are here: each its own runtime, the weights once.

alpha (`scaling.dts_alpha_mib_per_core`, default 64): with 0, as Tetris shipped, cores are
free, so every function takes its widest feasible instance (16 cores) whatever the load;
at a cloud's price ratio (one core ≈ 4–8 GiB) memory never changes a choice for models
whose instances hold 50–70 MiB. 64 MiB per core makes one core weigh about one instance's
runtime (48 MiB assumed) on the models measured here, so both terms decide.

Release, shares, keep-warm and downsizing are the planner's. A function without memory
figures is priced as a bare runtime (`memory.UNKNOWN_MODEL`). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from infless.scaling.capacity import CapacityIndex
from infless.scaling.config import ScalingConfig
from infless.scaling.demand import Demand
from infless.scaling.memory import MIB, UNKNOWN_MODEL
from infless.scaling.placement import Candidate, Choice
from infless.scaling.planner import knobs_from, plan_with
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


class DtsChooser:
    """The placement choice of one plan: best throughput per MiB of cost (module docstring).

    Keeps which servers hold which model's weights, and adds each placement of this plan."""

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

    def cost_mib(self, function: FunctionView, cand: Candidate, held_share: float) -> float:
        """The cost of one instance with `cand`'s config on a server holding `held_share`
        of the model's weights: private memory, missing weights, cores × alpha."""
        memory = function.memory or UNKNOWN_MODEL
        config = cand.config
        weights = memory.weight_bytes * max(0.0, 1.0 - held_share)
        private = memory.private_bytes(config.batch_size)
        cores = config.cpus + config.gpu_pct / self._beta
        return max((private + weights) / MIB + self._alpha * cores, _MIN_COST_MIB)

    def pick(
        self,
        function: FunctionView,
        cands: Sequence[Candidate],
        residual_rps: float,
        index: CapacityIndex,
        best_rate: float,
    ) -> Choice | None:
        """The (candidate, server) of highest served qps per MiB of cost; None if none fits.

        Candidates are tried by their best case (on a server holding all the weights); the
        search stops once that cannot beat the best found. Ties: candidate order (larger b
        first), then a server holding more of the weights, then the tighter fit."""
        held = self._held.get(function.model_key, {})
        floor_rps = max(residual_rps, 1.0)
        ranked: list[tuple[float, float, Candidate]] = []
        for cand in cands:
            bounds = cand.bounds
            if cand.config.batch_size > 1 and residual_rps + _EPS < bounds.r_low_rps:
                continue
            rate_rps = min(bounds.r_up_rps, floor_rps) if self._served else bounds.r_up_rps
            ranked.append((rate_rps / self.cost_mib(function, cand, 1.0), rate_rps, cand))
        ranked.sort(key=lambda r: -r[0])  # stable: equal scores keep the candidates' order
        best: tuple[float, Candidate, int] | None = None
        for bound, rate_rps, cand in ranked:
            if best is not None and bound <= best[0]:
                break
            for pos, share in self._servers(held, cand, index):
                score = rate_rps / self.cost_mib(function, cand, share)
                if best is None or score > best[0] + _EPS:
                    best = (score, cand, pos)
        if best is None:
            return None
        score, cand, pos = best
        self._mark(function.model_key, pos)
        return cand, pos, score

    def _servers(
        self, held: dict[int, float], cand: Candidate, index: CapacityIndex
    ) -> list[tuple[int, float]]:
        """The servers worth weighing: the fitting one holding the most of the weights
        (ties: the smallest free score), then the best fit, each with its held share."""
        cpus, gpu_pct = cand.config.cpus, cand.config.gpu_pct
        found: list[tuple[int, float]] = []
        top: tuple[float, float, int] | None = None  # (-share, free score, position)
        for pos, share in held.items():
            if index.fits(pos, cpus, gpu_pct):
                key = (-share, index.score(pos), pos)
                if top is None or key < top:
                    top = key
        if top is not None:
            found.append((top[2], -top[0]))
        fit = index.best_fit(cpus, gpu_pct)
        if fit is not None and (top is None or fit != top[2]):
            found.append((fit, held.get(fit, 0.0)))
        return found

    def _mark(self, model: str, pos: int) -> None:
        held = self._held.setdefault(model, {})
        key = (model, pos)
        if key not in self._placed:
            self._before[key] = held.get(pos)
        self._placed[key] = self._placed.get(key, 0) + 1
        held[pos] = 1.0

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
    held = held_weights(view)

    def chooser(index: CapacityIndex) -> DtsChooser:
        served = knobs.efficiency == "served"
        return DtsChooser(held, cfg.dts_alpha_mib_per_core, knobs.beta, served)

    return plan_with(view, demand, predictor, knobs, chooser)
