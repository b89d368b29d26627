"""The fluid (decisions-level) mode against the per-request mode: on small configurations
both give the same verdicts — mean cores and violation rate — within the stated tolerance
(`sim.calibration`), and the fluid mode keeps the books straight."""

from __future__ import annotations

import pytest

from infless.scaling.predictors import ScaledPredictor
from infless.sim import calibration, mixes
from infless.sim.fluid import FluidSimulation
from infless.sim.latency import load_zoo, measured_models

ZOO = load_zoo()
TRUTH = ZOO.truth(gpus=False)
PLANNER = ScaledPredictor(TRUTH, 1.1)
# seeds averaged per load shape: single bursty runs differ by a third (sim.calibration)
SEEDS: dict[mixes.Shape, int] = {"constant": 1, "periodic": 3, "bursty": 8}


def _available(mix: str) -> bool:
    wanted = [m for m, _ in (mixes.QA if mix == "qa" else mixes.OSVT)]
    return measured_models(ZOO, wanted) == wanted


@pytest.mark.parametrize(
    ("mix", "shape", "rate_rps", "policy"),
    [case for case in calibration.CASES if _available(case[0])],
)
def test_fluid_verdicts_match_the_per_request_mode(
    mix: str, shape: mixes.Shape, rate_rps: float, policy: str
) -> None:
    cfg = calibration.small_config(duration_s=15.0)
    functions = calibration.case_functions(mix, shape, rate_rps, cfg.duration_s)
    seeds = range(1, 1 + SEEDS[shape])
    found = calibration.compare(functions, TRUTH, PLANNER, cfg, policy, seeds)
    assert all(r.requests > 0.3 * rate_rps * cfg.duration_s for r in found.request)
    assert found.cores_error <= calibration.CORES_TOLERANCE, (
        found.request_cores,
        found.fluid_cores,
    )
    assert found.violation_error <= calibration.VIOLATION_TOLERANCE
    assert found.agrees


def test_the_fluid_mode_accounts_for_every_request() -> None:
    cfg = calibration.small_config(duration_s=20.0)
    functions = mixes.qa(20_000.0, cfg.duration_s, "bursty")  # more than 4 servers carry
    result = FluidSimulation(functions, TRUTH, cfg, planner_predictor=PLANNER).run()
    assert result.mode == "fluid"
    assert result.rejected > 0  # the bursts are refused where no instance has room
    accounted = result.completed + result.rejected + result.unserved
    assert abs(accounted - result.requests) <= 0.01 * result.requests  # the last step's backlog
    assert result.capacity_overruns == 0
    assert result.p50_ms <= result.p99_ms
