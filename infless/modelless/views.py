"""The model-less status views: frozen msgspec structs that the gateway renders to JSON.

`ModelView` is what `GET /system/variants/{model}` answers: the registration record, the
generator's progress, the applications' goals, the catalogue's target, overflow variant,
switches and spills, and one `VariantView` per variant. `GET /system/models` answers the
registration records themselves (`registry.variants.RegisteredModel`).

The keys are the ones clients have always read. A view extends the record it shows
(`RegisteredModel`, `VariantProfile`), so the record's own keys stay snake_case; the keys
added here are camelCase, named one by one. A field left `UNSET` is not in the document:
a variant that failed has no `function`, and one outside the catalogue has no `state`.
Built by `control.modelless`; rendered by the gateway only. No I/O.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

from infless.modelless.profiles import GenerationProgress, Goals, VariantProfile
from infless.modelless.states import VariantState
from infless.registry.variants import RegisteredModel


class VariantConfigView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The configuration a variant's card runs at, and what one instance of it delivers."""

    batch_size: int
    cpus: int
    qps: float
    cost_per_request: float


class VariantView(VariantProfile, frozen=True, kw_only=True):
    """One variant: its profile, and for a ready one, its function and live figures."""

    function: str | UnsetType = UNSET  # its function (ready variants)
    slo_problem: str | UnsetType | None = msgspec.field(default=UNSET, name="sloProblem")
    meets_slo: bool | UnsetType = msgspec.field(default=UNSET, name="meetsSlo")
    config: VariantConfigView | UnsetType | None = UNSET  # None: no card fits the SLO
    state: VariantState | UnsetType = UNSET  # the monitor's (variants in the catalogue)
    served: int | UnsetType = UNSET  # queries routed to it by selection
    capacity_factor: float | UnsetType = msgspec.field(default=UNSET, name="capacityFactor")
    released: bool | UnsetType = UNSET  # vertical scaling sends it nothing new


class ModelView(RegisteredModel, frozen=True, kw_only=True):
    """One registered model: its record, its applications and its variants."""

    progress: GenerationProgress | None = None  # variants done of all, while generating
    apps: dict[str, Goals] = msgspec.field(default_factory=dict)
    target: str | None = None  # the variant vertical scaling chose
    overflow: str | None = None  # the variant kept warm beside it
    switches: int = 0
    spilled: int = 0
    variants: tuple[VariantView, ...] = ()


VIEW_TYPES: tuple[type[msgspec.Struct], ...] = (
    ModelView,
    GenerationProgress,
    VariantView,
    VariantConfigView,
    RegisteredModel,
)
