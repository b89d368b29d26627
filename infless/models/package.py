"""The function package format, gateway side: read and validate manifests, resolve images.

A package is a directory:

    <dir>/manifest.json        PackageManifest as JSON
    <dir>/weights.safetensors  the state dict, fp32 (or the model's own dtypes)
    <dir>/src/                 optional: the model's own source, on sys.path in the worker
    <dir>/...                  anything else the handler reads (a tokenizer, labels)

The manifest's fields:

- `architecture` names a builder in the zoo (`infless.models.zoo`) or a `module:callable`
  import path (found in `src/` or installed); `arch_kwargs` are its keyword arguments.
- `inputs`/`outputs` are the signature without the batch dimension (-1: any length).
- `format` "torchscript" or "export": the package carries a TorchScript file or a
  `torch.export` program (`program_file`) instead of an architecture and weights.
- `transform` names what the worker does to a "module" package's model after attaching its
  weights: a model variant (`infless.workers.transforms`: "bf16", "int8", "channels-last",
  "torchscript", "compile"; "" or "fp32": nothing).
- `handler` optionally names a `module:Class` (see `infless.handlers`) run in the worker
  around the batched forward; `preprocess`/`postprocess` optionally name built-in output
  steps ("softmax", ...).
- `requirements` lists the third-party distributions the package's source imports (checked
  at deploy); `digest` is the package's content digest (`packaging.digest`).

Torch-free: the gateway imports this module.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import msgspec

from infless.errors import UnknownModel
from infless.types import SUPPORTED_DTYPES, TensorSpec

MANIFEST_FILE = "manifest.json"
WEIGHTS_FILE = "weights.safetensors"
SOURCE_DIR = "src"  # the package's own source, put on sys.path by the worker
FORMAT_VERSION = 1
# Output steps a worker can apply (`infless.models.loader.POSTPROCESS_STEPS` implements them).
POSTPROCESS_NAMES: frozenset[str] = frozenset({"softmax", "sigmoid"})
# A model variant's transform (`infless.workers.transforms`); "" and "fp32" leave the model as
# it is. The same names as `infless.modelless.profiles.TRANSFORMS`.
NO_TRANSFORM: frozenset[str] = frozenset({"", "fp32"})
TRANSFORM_NAMES: frozenset[str] = NO_TRANSFORM | {
    "bf16",
    "int8",
    "channels-last",
    "torchscript",
    "compile",
}
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
    format: Literal["module", "torchscript", "export"] = "module"
    program_file: str = ""  # "torchscript" / "export": the saved program in the package
    handler: str | None = None  # "module:Class" around the batched forward (infless.handlers)
    requirements: list[str] = []  # third-party distributions the source imports ("x==1.2")
    digest: str = ""  # sha256 of the package's content (infless.packaging.digest)
    transform: str = ""  # the variant's transform in the worker ("" / "fp32": none)

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
    if manifest.format != "module" and not manifest.program_file:
        raise UnknownModel(f"{path}: a {manifest.format!r} package needs its program_file")
    if manifest.transform not in TRANSFORM_NAMES:
        raise UnknownModel(
            f"{path}: transform {manifest.transform!r} is unknown; known transforms: "
            f"{', '.join(sorted(TRANSFORM_NAMES - {''}))} (or none)"
        )
    if manifest.handler is not None and ":" not in manifest.handler:
        raise UnknownModel(f"{path}: handler {manifest.handler!r}: expected 'module:Class'")
    return manifest


def is_zoo_name(image: str) -> bool:
    return "/" not in image and bool(_ZOO_NAME.match(image))


def package_dir_for(image: str, repository: Path) -> Path:
    """Where the package for `image` lives: a path as given, a zoo name inside the repository."""
    if is_zoo_name(image):
        return repository / image
    return Path(image).expanduser().resolve()
