"""The operator predictor's figures for the generated variants' latency points.

This needs a state directory holding operator profiles of the model (`infless profile`).
fp32's points then get the combined-operator predictor's figure (`predicted_ms`, without
the planning offset). Every other variant gets fp32's prediction scaled by its
measured/fp32 ratio at the smallest <batch, cores>. That is one calibration point: the
other figures remain predictions to check against the measurements. It never profiles
operators itself. It imports torch (the profiler's) only when there is a profile database
to read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from infless.modelless.profiles import LatencyPoint, VariantProfile
from infless.models.package import PackageManifest


def with_predictions(
    profiles: list[VariantProfile],
    package_dir: Path,
    manifest: PackageManifest,
    state_dir: Path,
    log: Callable[[str], None],
) -> list[VariantProfile]:
    """`predicted_ms` filled from the operator profiles in `state_dir` where it has them
    (module docstring); any trouble leaves them None."""
    try:
        predicted = fp32_predictions(package_dir, manifest, state_dir, profiles[0].cpu_latency)
    except Exception as exc:  # a stale or foreign profile database must not stop generation
        log(f"no latency predictions: {type(exc).__name__}: {exc}")
        return profiles
    if not predicted:
        return profiles
    fp32 = profiles[0]
    first = fp32.cpu_latency[0]
    result = []
    for profile in profiles:
        if profile.status != "ready" or not profile.latency:
            result.append(profile)
            continue
        own = profile.latency_ms(first.batch_size, first.cpus)
        ratio = (own / first.measured_ms) if own and first.measured_ms > 0 else None
        points = []
        for point in profile.latency:
            if point.gpu_pct:  # the operator profiles predict CPU cores only
                points.append(point)
                continue
            base = predicted.get((point.batch_size, point.cpus))
            value = None if base is None or ratio is None else base * ratio
            points.append(msgspec.structs.replace(point, predicted_ms=value))
        result.append(msgspec.structs.replace(profile, latency=points))
    return result


def fp32_predictions(
    package_dir: Path, manifest: PackageManifest, state_dir: Path, points: Sequence[LatencyPoint]
) -> dict[tuple[int, int], float]:
    """The combined-operator predictor's raw figure (no offset) at each point it can
    predict; empty without a profile database."""
    from infless.profiler.database import ProfileDatabase
    from infless.profiler.prediction import default_db_path, predictor_from
    from infless.profiler.predictor import MissingProfile

    db_path = default_db_path(state_dir)
    if not db_path.is_file() or manifest.format != "module":
        return {}
    from infless.models.programs import add_source_path
    from infless.profiler.service import ModelSource, graph_for

    add_source_path(package_dir)
    graph = graph_for(ModelSource(manifest.name, manifest, package_dir), state_dir)
    with ProfileDatabase(db_path) as db:
        predictor = predictor_from(db, [graph])
    found: dict[tuple[int, int], float] = {}
    for point in points:
        try:
            found[(point.batch_size, point.cpus)] = predictor.predict_raw_ms(
                graph.model_key, point.batch_size, point.cpus
            )
        except MissingProfile:
            continue
    return found
