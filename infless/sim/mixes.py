"""The paper's workloads on the models measured here (`sim.latency`), and a large one.

- `qa`: INFless's Q&A robot — textcnn-69, lstm-2365, dssm-2365, SLO 50 ms;
- `osvt`: its second-hand vehicle trading — ssd, mobilenet, resnet-50, SLO 200 ms;
- `scale`: up to 40 functions over INFless Table 1's models (as §5.3: "no more than 40
  functions by varying their respective SLOs and request loads"), each with an SLO its
  model can meet and a load of its own shape (constant, bursty, periodic, sporadic) and
  size (a Zipf-like spread).

Every function batches up to 32 (§5.1). Loads have a `shape`: "constant", "bursty",
"periodic" or "sporadic" (INFless Figure 10). `sized` scales a mix's loads so that the
planner, on an empty cluster, starts a given number of instances for their peaks.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from infless.scaling.config import ScalingConfig
from infless.scaling.demand import Demand
from infless.scaling.planner import plan
from infless.scaling.predictors import LatencyPredictor
from infless.scaling.view import FunctionView, PoolView, ServerView
from infless.sim.cluster import SimFunction
from infless.sim.workload import RateSchedule, bursty, constant, periodic, sporadic

Shape = Literal["constant", "bursty", "periodic", "sporadic"]
SHAPES: tuple[Shape, ...] = ("constant", "bursty", "periodic", "sporadic")
MAX_BATCH = 32
QA = (("textcnn-69", 1.0), ("lstm-2365", 0.5), ("dssm-2365", 0.75))
OSVT = (("ssd", 0.4), ("mobilenet", 1.0), ("resnet-50", 0.3))
# (model, SLOs it is given in the scale mix): text models tight, vision and speech looser
SCALE_MODELS = (
    ("textcnn-69", (50.0, 100.0)),
    ("lstm-2365", (50.0, 100.0)),
    ("dssm-2365", (50.0, 100.0)),
    ("mnist", (50.0, 100.0)),
    ("mobilenet", (100.0, 200.0)),
    ("resnet-20", (150.0, 300.0)),
    ("yamnet", (150.0, 300.0)),
    ("ssd", (200.0, 300.0)),
    ("resnet-50", (200.0, 400.0)),
    ("vggnet", (200.0, 400.0)),
    ("bert-v1", (300.0, 600.0)),
)
# The measured models the scale mix runs: the Q&A robot's. OSVT's are measured too (Fig.
# 11 runs them), but at this host's CPU times their instances are large: 2,000 servers
# hold about 6,500 instances of a mix with them, short of the 10,000 the paper's scale
# figures reach.
SCALE_MEASURED = ("textcnn-69", "lstm-2365", "dssm-2365")


def scale_models(measured: Sequence[str]) -> list[str]:
    """The models of `measured` the scale mix runs (`SCALE_MEASURED`)."""
    return [m for m in measured if m in SCALE_MEASURED]


def load(shape: Shape, rate_rps: float, duration_s: float, k: int = 0) -> RateSchedule:
    """A load of `shape` whose peak is `rate_rps` (`k` staggers functions' phases)."""
    if shape == "constant":
        return constant(rate_rps)
    if shape == "bursty":
        return bursty(rate_rps / 5.0, rate_rps, duration_s, first_burst_s=5.0 + 3.0 * (k % 5))
    if shape == "periodic":
        return periodic(rate_rps / 5.0, rate_rps, duration_s, 20.0, phase_s=2.0 * k)
    return sporadic(rate_rps, duration_s, start_s=1.0 + 2.0 * (k % 6))


def qa(total_rps: float, duration_s: float, shape: Shape = "constant") -> tuple[SimFunction, ...]:
    return _app(QA, 50.0, total_rps, duration_s, shape)


def osvt(total_rps: float, duration_s: float, shape: Shape = "constant") -> tuple[SimFunction, ...]:
    return _app(OSVT, 200.0, total_rps, duration_s, shape)


def _app(
    models: Sequence[tuple[str, float]],
    slo_ms: float,
    total_rps: float,
    duration_s: float,
    shape: Shape,
) -> tuple[SimFunction, ...]:
    """One application: its models share `total_rps` by their weights."""
    total_weight = sum(w for _, w in models)
    functions = []
    for k, (model, weight) in enumerate(models):
        rate_rps = total_rps * weight / total_weight
        functions.append(
            SimFunction(model, model, slo_ms, MAX_BATCH, load(shape, rate_rps, duration_s, k))
        )
    return tuple(functions)


def scale_mix(
    functions: int,
    total_rps: float,
    duration_s: float,
    shapes: Sequence[Shape] = SHAPES,
    models: Sequence[str] | None = None,
) -> tuple[SimFunction, ...]:
    """`functions` functions (see the module docstring) sharing `total_rps` at their peaks."""
    catalogue = [(m, slos) for m, slos in SCALE_MODELS if models is None or m in models]
    if not catalogue:
        raise ValueError(f"models = {list(models or [])}: none of them is in the scale mix")
    weights = [1.0 / (1 + k % 10) for k in range(functions)]
    total_weight = sum(weights)
    found = []
    for k in range(functions):
        model, slos = catalogue[k % len(catalogue)]
        slo_ms = slos[(k // len(catalogue)) % len(slos)]
        rate = total_rps * weights[k] / total_weight
        shaped = load(shapes[k % len(shapes)], rate, duration_s, k)
        found.append(SimFunction(f"f{k:02d}-{model}", model, slo_ms, MAX_BATCH, shaped))
    return tuple(found)


def scaled(functions: Sequence[SimFunction], factor: float) -> tuple[SimFunction, ...]:
    """Every load times `factor`."""
    return tuple(
        replace(f, load=RateSchedule(tuple((t, r * factor) for t, r in f.load.points)))
        for f in functions
    )


def planned_instances(
    functions: Sequence[SimFunction],
    servers: Sequence[ServerView],
    predictor: LatencyPredictor,
    scaling: ScalingConfig,
) -> int:
    """How many instances the configured policy's planner starts for the peaks on `servers`."""
    views = tuple(FunctionView(f.name, f.model_key, f.slo_ms, f.max_batch) for f in functions)
    demand = Demand({f.name: f.load.peak_rps for f in functions})
    return len(plan(PoolView(tuple(servers), views), demand, predictor, scaling).starts)


def sized(
    functions: Sequence[SimFunction],
    instances: int,
    servers: Sequence[ServerView],
    predictor: LatencyPredictor,
    scaling: ScalingConfig,
) -> tuple[SimFunction, ...]:
    """The mix with its loads scaled so that INFless plans about `instances` instances."""
    found = tuple(functions)
    for _ in range(4):
        planned = planned_instances(found, servers, predictor, scaling)
        if planned <= 0 or abs(planned - instances) <= 0.02 * instances:
            break
        found = scaled(found, instances / planned)
    return found
