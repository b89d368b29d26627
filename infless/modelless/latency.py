"""`CatalogPredictor`: the autoscaler's latency predictions for variant functions, from
their profiles.

With it, Algorithm 1 can plan a variant that no instance has run yet. The measured
predictor knows only what ran, and the operator profiles know the fp32 graph at best.

A variant function's model key is its package directory (`FunctionSpec.image`), which the
profile records. On cores, the prediction is `VariantProfile.exec_ms` over the variant's
capacity factor (`modelless.capacity`: profiles are timed on an idle core, and the factor
is what contention for the host's cores leaves of that). On a GPU share, it is the
variant's GPU points as `VariantProfile.exec_ms` prices them, not divided by the factor: a
GPU batch does not slow with the host's cores. A variant without GPU points raises
LookupError with the reason, which the planner reports as unpriced. Other keys go to the
fallback (the GPU profiles, then the operator profiles). It reads the catalogue live, so a
model registered later is known at once. Pure: no I/O.
"""

from __future__ import annotations

from infless.modelless.catalog import ModellessCatalog
from infless.scaling.predictors import LatencyPredictor


class CatalogPredictor:
    def __init__(self, catalog: ModellessCatalog, fallback: LatencyPredictor | None = None) -> None:
        self._catalog = catalog
        self._fallback = fallback

    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float:
        found = self._catalog.variant_for_package(model_key)
        if found is None:
            if self._fallback is None:
                raise LookupError(f"no variant profile for {model_key!r}")
            return self._fallback.predict_latency_ms(model_key, batch_size, cpus, gpu_pct)
        entry, profile = found
        if gpu_pct > 0:
            return profile.exec_ms(batch_size, cpus, gpu_pct)
        return profile.exec_ms(batch_size, cpus) / entry.capacity.factor(profile.name)
