"""`placement.pick` passes over a configuration whose bound (its normalised rate over
`min_fragment`) cannot beat the best so far, before its best-fit lookup: the choice must be
exactly the one a full argmax of Equation 10 over every configuration makes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from infless.scaling.bounds import Bounds
from infless.scaling.capacity import CapacityIndex
from infless.scaling.placement import Candidate, efficiency, pick
from infless.scaling.view import ServerView
from infless.types import InstanceConfig

BETA = 2.2


def _candidate(batch: int, cpus: int, rate_rps: float) -> Candidate:
    bounds = Bounds(batch, 10.0, 50.0, 0.0, rate_rps, 10.0)
    return Candidate(InstanceConfig(batch, cpus), bounds, BETA * cpus)


def _full_argmax(
    cands: list[Candidate], index: CapacityIndex, best_rate: float, min_fragment: float
) -> tuple[Candidate, int, float] | None:
    """Every configuration of the largest placeable batch size weighed: no bound."""
    best: tuple[float, Candidate, int] | None = None
    current = None
    for cand in cands:
        if cand.config.batch_size != current:
            if best is not None:
                break
            current = cand.config.batch_size
        fit = index.best_fit(cand.config.cpus, 0)
        if fit is None:
            continue
        e_ij = efficiency(
            cand.bounds.r_up_rps, cand.units, best_rate, index.score(fit), min_fragment
        )
        if best is None or e_ij > best[0]:
            best = (e_ij, cand, fit)
    return None if best is None else (best[1], best[2], best[0])


@settings(max_examples=300, deadline=None)
@given(
    free=st.lists(st.integers(0, 16), min_size=1, max_size=6),
    configs=st.lists(
        st.tuples(st.sampled_from([8, 4, 1]), st.integers(1, 8), st.floats(1.0, 500.0)),
        min_size=1,
        max_size=12,
    ),
    min_fragment=st.sampled_from([0.001, 0.1, 0.25, 1.0]),
)
def test_the_bound_never_changes_the_choice(
    free: list[int], configs: list[tuple[int, int, float]], min_fragment: float
) -> None:
    servers = [ServerView(f"s{i}", 16, f) for i, f in enumerate(free)]
    cands = sorted((_candidate(b, c, r) for b, c, r in configs), key=lambda c: -c.config.batch_size)
    best_rate = max(c.rate_per_unit for c in cands)
    expected = _full_argmax(cands, CapacityIndex(servers, BETA), best_rate, min_fragment)
    got = pick(
        cands,
        1e9,
        CapacityIndex(servers, BETA),
        best_rate,
        function="f",
        served=False,
        min_fragment=min_fragment,
        affinity_weight=0.0,
    )
    assert got == expected
