"""A model-less registration (what `POST /system/register` and `infless register` send) and
an application's goals, parsed and checked: errors name the field, the value and the fix.

Like `deployment` for functions: the wire format only. Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from infless.errors import InvalidDeployment
from infless.modelless.profiles import TRANSFORMS, Goals
from infless.registry.deployment import is_function_name

VALIDATION_SUFFIXES = (".npz", ".safetensors", ".txt")


class AppGoals(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    id: str
    latency_ms: float | None = None
    min_accuracy: float = 0.0
    cost_weight: float = 1.0

    def goals(self) -> Goals:
        return Goals(self.latency_ms, self.min_accuracy, self.cost_weight)


class Validation(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    generate: int | None = None  # seeded random samples from the signature
    filename: str = ""  # or a file: .npz / .safetensors (tensors, `labels`), .txt (bodies)
    data: str = ""  # its bytes, base64


class Registration(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    model: str
    image: str
    slo_ms: float
    validation: Validation
    max_batch: int = 16
    metric: str = ""
    variants: list[str] = []
    cpus: list[int] = []
    apps: list[AppGoals] = []


def parse_registration(body: object) -> Registration:
    try:
        reg = msgspec.convert(body, type=Registration)
    except msgspec.ValidationError as exc:
        raise InvalidDeployment(f"registration: {exc}") from None
    if not is_function_name(reg.model) or len(reg.model) > 40 or "--" in reg.model:
        raise InvalidDeployment(
            f"model {reg.model!r}: lowercase letters, digits and single dashes, at most 40"
        )
    if reg.slo_ms <= 0 or not 1 <= reg.max_batch <= 256:
        raise InvalidDeployment("registration: need sloMs > 0 and 1 <= maxBatch <= 256")
    unknown = [v for v in reg.variants if v not in TRANSFORMS]
    if unknown:
        raise InvalidDeployment(f"variants {unknown}: unknown; known: {', '.join(TRANSFORMS)}")
    v = reg.validation
    if (v.generate is None) == (not v.filename):
        raise InvalidDeployment("validation: give either generate (a count) or filename + data")
    if v.generate is not None and not 1 <= v.generate <= 4096:
        raise InvalidDeployment("validation.generate: between 1 and 4096 samples")
    if v.filename and not v.filename.endswith(VALIDATION_SUFFIXES):
        raise InvalidDeployment(
            f"validation.filename {v.filename!r}: expected {', '.join(VALIDATION_SUFFIXES)}"
        )
    for app in reg.apps:
        check_goals(app)
    return reg


def check_goals(app: AppGoals) -> None:
    if not is_function_name(app.id):
        raise InvalidDeployment(f"application id {app.id!r}: lowercase letters, digits, dashes")
    if app.latency_ms is not None and app.latency_ms <= 0:
        raise InvalidDeployment(f"application {app.id!r}: latencyMs must be > 0")
    if not 0 <= app.min_accuracy <= 1 or not 0 <= app.cost_weight <= 1:
        raise InvalidDeployment(
            f"application {app.id!r}: minAccuracy and costWeight must be in [0, 1]"
        )
