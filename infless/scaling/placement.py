"""Algorithm 1's inner choice (§3.4, lines 3–11): which configuration, on which server.

Owns `Candidate` (a feasible <b, c, g> with its Equation-1 bounds), `efficiency` (Equation 10's
e_ij, with the planner's deviations and the sharing-affinity factor) and `pick` (the largest
batch size with a placeable configuration, then argmax e_ij over configuration × server). Moved
out of `planner` (which owns the loop around it, the regimes and the plan) to keep both small.

Servers per configuration: the best fit (smallest free score, `CapacityIndex.best_fit`) and,
when `affinity_weight` > 0, every fitting server with a nonzero affinity for the function
(`CapacityIndex.choices`: O(those few), never a scan of the pool). e_ij is multiplied by
1 + affinity_weight · affinity(server, function), so a server that already holds the
function's stored tensors (or an idle instance cheaply transformed into it) wins over an
otherwise better fit. With affinity_weight = 0, or no affinity anywhere, the choice is exactly
the plain best-fit one.

The planner's loop asks a `Chooser` for each placement: `Equation10` (this module's `pick`)
for INFless, `scaling.dts.DtsChooser` for the memory-aware policy.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from infless.scaling.bounds import Bounds
from infless.scaling.capacity import CapacityIndex
from infless.scaling.view import FunctionView
from infless.types import InstanceConfig

_EPS = 1e-9
_NOWHERE: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Candidate:
    """A feasible <b, c, g> of one function with its Equation-1 bounds."""

    config: InstanceConfig
    bounds: Bounds
    units: float  # β·c + g

    @property
    def rate_per_unit(self) -> float:
        return self.bounds.r_up_rps / self.units


def efficiency(
    rate_rps: float,
    units: float,
    best_rate_per_unit: float,
    free_units: float,
    min_fragment: float,
    affinity: float = 0.0,
    affinity_weight: float = 0.0,
) -> float:
    """Equation 10: e_ij = (RPS/resource, normalised to [0, 1]) / (1 − u_i / S_j), floored,

    times the sharing factor 1 + affinity_weight · affinity (exactly 1 when either is 0).
    """
    fragment = max(1.0 - units / free_units, min_fragment) if free_units > 0 else 1.0
    return (rate_rps / units / best_rate_per_unit) / fragment * (1.0 + affinity_weight * affinity)


def pick(
    cands: Sequence[Candidate],
    residual_rps: float,
    index: CapacityIndex,
    best_rate: float,
    *,
    function: str,
    served: bool,
    min_fragment: float,
    affinity_weight: float,
) -> tuple[Candidate, int, float] | None:
    """Algorithm 1, lines 3–11: the largest batch with a placeable config; argmax e_ij.

    `served`: Equation 10's numerator is min(r_up, residual) (the planner's "served" mode),
    else r_up. Returns the candidate, the server's index position and its (boosted) e_ij.
    Ties keep the first: larger config order first, then the best fit, then position order.
    (`efficiency`, inlined: this runs once per instance placed.) On the plain best-fit path
    a configuration whose bound — its normalised rate over `min_fragment`, what e_ij is at
    most — does not beat the best so far is passed over before its server is looked up: the
    same choice, a third of the time at 10,000 instances.
    """
    current: int | None = None
    best: tuple[float, Candidate, int] | None = None
    affine = function if affinity_weight > 0 and index.has_affinity(function) else None
    scores: dict[int, float] = {}
    found: Sequence[tuple[int, float]]
    floor_rate = max(residual_rps, 1.0)
    for cand in cands:  # grouped by batch size, largest first
        config, bounds = cand.config, cand.bounds
        b = config.batch_size
        if b != current:
            if best is not None:
                break  # a larger batch size already has a placement
            current = b
        if b > 1 and residual_rps + _EPS < bounds.r_low_rps:
            continue
        rate_rps = bounds.r_up_rps
        if served and rate_rps > floor_rate:
            rate_rps = floor_rate
        units = cand.units
        normalised = rate_rps / units / best_rate
        if affine is None:  # the plain best fit: most functions, most of the time
            if best is not None and normalised / min_fragment <= best[0]:
                continue  # e_ij <= normalised / min_fragment: it cannot win (nor tie first)
            fit = index.best_fit(config.cpus, config.gpu_pct)
            found = _NOWHERE if fit is None else ((fit, 0.0),)
        else:  # the best fit and the servers with an affinity for the function
            found = index.choices(config.cpus, config.gpu_pct, function=affine)
        for pos, affinity in found:
            free_units = scores.get(pos)
            if free_units is None:
                free_units = scores[pos] = index.score(pos)
            fragment = max(1.0 - units / free_units, min_fragment) if free_units > 0 else 1.0
            e_ij = normalised / fragment * (1.0 + affinity_weight * affinity)
            if best is None or e_ij > best[0]:
                best = (e_ij, cand, pos)
    return None if best is None else (best[1], best[2], best[0])


Choice = tuple[Candidate, int, float]  # the candidate, the server's position, its score


class Chooser(Protocol):
    """How the planner's loop picks one placement (a configuration and a server)."""

    def pick(
        self,
        function: FunctionView,
        cands: Sequence[Candidate],
        residual_rps: float,
        index: CapacityIndex,
        best_rate: float,
    ) -> Choice | None:
        """The next instance of `function`; the planner places it on `index` right after."""
        ...

    def unplaced(self, function: FunctionView, pos: int) -> None:
        """The planner took back an instance of `function` it had placed at `pos`."""
        ...


@dataclass(frozen=True, slots=True)
class Equation10:
    """INFless's choice: `pick` with the planner's knobs. Keeps no state."""

    served: bool
    min_fragment: float
    affinity_weight: float

    def pick(
        self,
        function: FunctionView,
        cands: Sequence[Candidate],
        residual_rps: float,
        index: CapacityIndex,
        best_rate: float,
    ) -> Choice | None:
        return pick(
            cands,
            residual_rps,
            index,
            best_rate,
            function=function.name,
            served=self.served,
            min_fragment=self.min_fragment,
            affinity_weight=self.affinity_weight,
        )

    def unplaced(self, function: FunctionView, pos: int) -> None:
        return None
