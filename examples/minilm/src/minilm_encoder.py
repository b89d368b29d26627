"""all-MiniLM-L6-v2 as a plain torch.nn sentence encoder, and the map from its HF weight names.

Owns the architecture of the minilm package (`build`, named in its manifest as
`minilm_encoder:build`) and `state_dict_from_hf`, which renames sentence-transformers' BERT
tensors to this module's names. The encoder layers are the zoo's BERT layers
(`infless.models.zoo.bert.EncoderLayer`: same operators, LayerNorm eps 1e-12, exact GELU).
Forward: BERT embeddings (token type 0) → encoder → mean over the attention mask → L2
normalisation. No buffers: position ids come from slicing the position table, so the module
can be built on `meta` and its weights attached with `load_state_dict(assign=True)`. Must not
do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias
from torch import nn

from infless.models.zoo.bert import EncoderLayer

# HF sub-names of one encoder layer → this module's (`infless.models.zoo.bert.EncoderLayer`).
_LAYER_NAMES = {
    "attention.self.query": "attention.query",
    "attention.self.key": "attention.key",
    "attention.self.value": "attention.value",
    "attention.output.dense": "attention.output",
    "attention.output.LayerNorm": "attention.norm",
    "intermediate.dense": "intermediate",
    "output.dense": "output",
    "output.LayerNorm": "norm",
}
_EMBEDDING_NAMES = {
    "embeddings.word_embeddings": "word_embeddings",
    "embeddings.position_embeddings": "position_embeddings",
    "embeddings.token_type_embeddings": "token_type_embeddings",
    "embeddings.LayerNorm": "embedding_norm",
}
# HF tensors the sentence embedding does not use: BERT's pooler and the position-ids buffer.
_DROPPED_PREFIXES = ("pooler.", "embeddings.position_ids")


class MiniLmEncoder(nn.Module):
    """Token ids and attention mask [B, T] → unit-norm sentence embeddings [B, hidden]."""

    def __init__(
        self,
        vocab_size: int,
        hidden: int,
        layers: int,
        heads: int,
        intermediate: int,
        max_positions: int,
        type_vocab_size: int,
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.word_embeddings = nn.Embedding(vocab_size, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden)
        self.embedding_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(
            EncoderLayer(hidden, heads, intermediate) for _ in range(layers)
        )

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        x = self.word_embeddings(torch.clamp(input_ids, 0, self.vocab_size - 1))
        x = x + self.position_embeddings.weight[:seq_len] + self.token_type_embeddings.weight[0]
        x = self.embedding_norm(x)
        keep = attention_mask.to(x.dtype)
        # A large finite negative (not -inf): an all-zero mask gives no NaN.
        mask_bias = (1.0 - keep[:, None, None, :]) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        summed = torch.sum(x * keep[:, :, None], dim=1)
        counts = torch.clamp(torch.sum(keep, dim=1, keepdim=True), min=1e-9)
        embedding: torch.Tensor = F.normalize(summed / counts, p=2.0, dim=1)
        return embedding


def build(
    vocab_size: int = 30522,
    hidden: int = 384,
    layers: int = 6,
    heads: int = 12,
    intermediate: int = 1536,
    max_positions: int = 512,
    type_vocab_size: int = 2,
) -> nn.Module:
    """The encoder with the given sizes (defaults: all-MiniLM-L6-v2's config.json)."""
    return MiniLmEncoder(
        vocab_size, hidden, layers, heads, intermediate, max_positions, type_vocab_size
    )


def state_dict_from_hf(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """HF BertModel tensor names → this module's; drops the pooler and position-ids buffer.

    Raises KeyError naming a tensor it does not know, so a different checkpoint fails loudly.
    """
    mapped: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        if name.startswith(_DROPPED_PREFIXES):
            continue
        mapped[_rename(name)] = tensor
    return mapped


def _rename(name: str) -> str:
    stem, _, leaf = name.rpartition(".")
    if stem in _EMBEDDING_NAMES:
        return f"{_EMBEDDING_NAMES[stem]}.{leaf}"
    parts = stem.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["encoder", "layer"] and parts[3] in _LAYER_NAMES:
        return f"layers.{parts[2]}.{_LAYER_NAMES[parts[3]]}.{leaf}"
    raise KeyError(f"unexpected tensor {name!r} in a BERT checkpoint")
