"""The function package format, gateway side: read and validate manifests, resolve images.

A package is a directory:

    <dir>/manifest.json        PackageManifest as JSON
    <dir>/weights.safetensors  the state dict, fp32 (or the model's own dtypes)

`architecture` names a builder in the zoo (`infless.models.zoo`), `arch_kwargs` its keyword
arguments; `inputs`/`outputs` are the signature without the batch dimension. `preprocess`
and `postprocess` optionally name built-in steps applied in the worker ("softmax", ...).
Torch-free: the gateway imports this module.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from infless.errors import UnknownModel
from infless.types import SUPPORTED_DTYPES, TensorSpec

MANIFEST_FILE = "manifest.json"
WEIGHTS_FILE = "weights.safetensors"
FORMAT_VERSION = 1
# Output steps a worker can apply (`infless.models.loader.POSTPROCESS_STEPS` implements them).
POSTPROCESS_NAMES: frozenset[str] = frozenset({"softmax", "sigmoid"})
_ZOO_NAME = re.compile(r"^[a-z0-9][-a-z0-9_.]*$")


class TensorSignature(msgspec.Struct, frozen=True):
    name: str
    dtype: str
    shape: list[int]

    def to_spec(self) -> TensorSpec:
        return TensorSpec(self.name, self.dtype, tuple(self.shape))


class PackageManifest(msgspec.Struct, frozen=True):
    name: str
    architecture: str
    inputs: list[TensorSignature]
    outputs: list[TensorSignature]
    arch_kwargs: dict[str, object] = {}
    format_version: int = FORMAT_VERSION
    weights_file: str = WEIGHTS_FILE
    weights_sha256: str = ""
    weights_bytes: int = 0
    preprocess: str | None = None
    postprocess: str | None = None
    description: str = ""
    # Where the weights come from, e.g. "infless-zoo/weights-v1 seed=5000 fc.=5001"; a zoo
    # package whose provenance differs from the zoo's current one is rebuilt.
    provenance: str = ""

    @property
    def input_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(s.to_spec() for s in self.inputs)

    @property
    def output_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(s.to_spec() for s in self.outputs)


def encode_manifest(manifest: PackageManifest) -> bytes:
    return msgspec.json.format(msgspec.json.encode(manifest), indent=2)


def load_manifest(package_dir: Path) -> PackageManifest:
    path = package_dir / MANIFEST_FILE
    try:
        manifest = msgspec.json.decode(path.read_bytes(), type=PackageManifest)
    except FileNotFoundError as exc:
        raise UnknownModel(
            f"no function package at {package_dir}: {MANIFEST_FILE} is missing"
        ) from exc
    except msgspec.ValidationError as exc:
        raise UnknownModel(f"invalid {path}: {exc}") from exc
    if manifest.format_version != FORMAT_VERSION:
        raise UnknownModel(
            f"{path}: format_version {manifest.format_version} is not supported "
            f"(this infless reads {FORMAT_VERSION})"
        )
    for sig in (*manifest.inputs, *manifest.outputs):
        if sig.dtype not in SUPPORTED_DTYPES:
            raise UnknownModel(f"{path}: tensor {sig.name!r} has unsupported dtype {sig.dtype!r}")
    if not manifest.inputs:
        raise UnknownModel(f"{path}: a package needs at least one input")
    if manifest.postprocess is not None and manifest.postprocess not in POSTPROCESS_NAMES:
        raise UnknownModel(
            f"{path}: postprocess {manifest.postprocess!r} is unknown; "
            f"known steps: {', '.join(sorted(POSTPROCESS_NAMES))}"
        )
    return manifest


def is_zoo_name(image: str) -> bool:
    return "/" not in image and bool(_ZOO_NAME.match(image))


def package_dir_for(image: str, repository: Path) -> Path:
    """Where the package for `image` lives: a path as given, a zoo name inside the repository."""
    if is_zoo_name(image):
        return repository / image
    return Path(image).expanduser().resolve()
