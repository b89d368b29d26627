"""A zoo model's description (`ZooEntry`) and the signature shorthands the zoo's lists use.

Torch-free, no I/O: the gateway and `infless models list` read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from infless.models.package import PackageManifest, TensorSignature

# Bump when the seeded weights of existing entries change (seeding scheme, calibration):
# packages built before are then no longer current and get rebuilt.
WEIGHTS_VERSION = 1


@dataclass(frozen=True, slots=True)
class ZooEntry:
    """One zoo model. Tensors whose state-dict name starts with a `head_seeds` prefix are
    drawn from that seed, every other tensor from `seed`; so models built from the same
    backbone seed share their backbone tensors bit for bit."""

    name: str
    builder: str
    inputs: tuple[TensorSignature, ...]
    outputs: tuple[TensorSignature, ...]
    seed: int
    kwargs: Mapping[str, object] = field(default_factory=dict)
    head_seeds: Mapping[str, int] = field(default_factory=dict)
    postprocess: str | None = None
    description: str = ""
    table_size_mib: float | None = None
    table_gflops: float | None = None

    def seed_for(self, tensor_name: str) -> int:
        matches = [p for p in self.head_seeds if tensor_name.startswith(p)]
        return self.head_seeds[max(matches, key=len)] if matches else self.seed

    @property
    def provenance(self) -> str:
        heads = "".join(f" {prefix}={seed}" for prefix, seed in sorted(self.head_seeds.items()))
        return f"infless-zoo/weights-v{WEIGHTS_VERSION} seed={self.seed}{heads}"

    def manifest(self, *, weights_sha256: str = "", weights_bytes: int = 0) -> PackageManifest:
        return PackageManifest(
            name=self.name,
            architecture=self.builder,
            inputs=list(self.inputs),
            outputs=list(self.outputs),
            arch_kwargs=dict(self.kwargs),
            weights_sha256=weights_sha256,
            weights_bytes=weights_bytes,
            postprocess=self.postprocess,
            description=self.description,
            provenance=self.provenance,
        )


def sig(name: str, dtype: str, *shape: int) -> TensorSignature:
    return TensorSignature(name, dtype, list(shape))


def image(channels: int, side: int) -> tuple[TensorSignature, ...]:
    return (sig("image", "float32", channels, side, side),)


def probabilities(classes: int) -> tuple[TensorSignature, ...]:
    return (sig("probabilities", "float32", classes),)
