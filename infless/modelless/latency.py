"""`CatalogPredictor`: the autoscaler's latency predictions for variant functions, from their
profiles — so Algorithm 1 can plan a variant no instance has run yet (the measured
predictor knows only what ran; the operator profiles know the fp32 graph at best).

A variant function's model key is its package directory (`FunctionSpec.image`), which the
profile records. The prediction at <b, c>: the profile's points at the nearest profiled
core count, linear between profiled batch sizes, beyond the largest the last slope. GPU
shares were not profiled: LookupError. Other keys go to the fallback. Reads the catalogue
live, so a model registered later is known at once. Pure: no I/O.
"""

from __future__ import annotations

import itertools

from infless.modelless.catalog import ModellessCatalog
from infless.modelless.profiles import VariantProfile
from infless.scaling.predictors import LatencyPredictor


class CatalogPredictor:
    def __init__(self, catalog: ModellessCatalog, fallback: LatencyPredictor | None = None) -> None:
        self._catalog = catalog
        self._fallback = fallback

    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float:
        profile = self._catalog.profile_for_package(model_key)
        if profile is None:
            if self._fallback is None:
                raise LookupError(f"no variant profile for {model_key!r}")
            return self._fallback.predict_latency_ms(model_key, batch_size, cpus, gpu_pct)
        if gpu_pct > 0:
            raise LookupError(f"{model_key!r}: variants are profiled on CPUs only")
        return profile_ms(profile, batch_size, cpus)


def profile_ms(profile: VariantProfile, batch_size: float, cpus: int) -> float:
    """The profile's t_exec at <batch_size, nearest profiled cpus> (see the module doc)."""
    counts = sorted({p.cpus for p in profile.latency})
    if not counts:
        raise LookupError(f"variant {profile.name!r} has no latency points")
    nearest = min(counts, key=lambda c: (abs(c - cpus), -c))
    points = sorted((p.batch_size, p.measured_ms) for p in profile.latency if p.cpus == nearest)
    if batch_size <= points[0][0]:
        return points[0][1]
    for (b0, t0), (b1, t1) in itertools.pairwise(points):
        if batch_size <= b1:
            return t0 + (t1 - t0) * (batch_size - b0) / (b1 - b0)
    if len(points) == 1:
        return points[0][1] * batch_size / points[0][0]
    (b0, t0), (b1, t1) = points[-2], points[-1]
    return t1 + max(0.0, (t1 - t0) / (b1 - b0)) * (batch_size - b1)
