"""An independent reference of all-MiniLM-L6-v2's sentence embedding, for the minilm tests.

Owns nothing but the check: BERT's forward written out with torch functional ops directly on
the HF-named tensors (no nn.Module, nothing shared with `minilm_encoder`), for one unpadded
sentence; then mean pooling over its tokens and L2 normalisation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias

EPS = 1e-12


def _norm(x: torch.Tensor, tensors: Mapping[str, torch.Tensor], prefix: str) -> torch.Tensor:
    weight, bias = tensors[f"{prefix}.weight"], tensors[f"{prefix}.bias"]
    return F.layer_norm(x, weight.shape, weight, bias, eps=EPS)


def _dense(x: torch.Tensor, tensors: Mapping[str, torch.Tensor], prefix: str) -> torch.Tensor:
    return F.linear(x, tensors[f"{prefix}.weight"], tensors[f"{prefix}.bias"])


def _attention(
    x: torch.Tensor, tensors: Mapping[str, torch.Tensor], prefix: str, heads: int
) -> torch.Tensor:
    tokens, hidden = x.shape
    head_dim = hidden // heads

    def split(name: str) -> torch.Tensor:  # [T, hidden] -> [heads, T, head_dim]
        return (
            _dense(x, tensors, f"{prefix}.self.{name}")
            .view(tokens, heads, head_dim)
            .transpose(0, 1)
        )

    q, k, v = split("query"), split("key"), split("value")
    probs = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(head_dim), dim=-1)
    context = (probs @ v).transpose(0, 1).reshape(tokens, hidden)
    return _norm(
        x + _dense(context, tensors, f"{prefix}.output.dense"),
        tensors,
        f"{prefix}.output.LayerNorm",
    )


def sentence_embedding(
    tensors: Mapping[str, torch.Tensor], token_ids: list[int], *, layers: int, heads: int
) -> torch.Tensor:
    """The unit-norm embedding [hidden] of one sentence's token ids (no padding)."""
    ids = torch.tensor(token_ids, dtype=torch.int64)
    x = (
        tensors["embeddings.word_embeddings.weight"][ids]
        + tensors["embeddings.position_embeddings.weight"][: len(token_ids)]
        + tensors["embeddings.token_type_embeddings.weight"][0]
    )
    x = _norm(x, tensors, "embeddings.LayerNorm")
    for i in range(layers):
        prefix = f"encoder.layer.{i}"
        x = _attention(x, tensors, f"{prefix}.attention", heads)
        inner = F.gelu(_dense(x, tensors, f"{prefix}.intermediate.dense"))
        x = _norm(
            x + _dense(inner, tensors, f"{prefix}.output.dense"),
            tensors,
            f"{prefix}.output.LayerNorm",
        )
    return F.normalize(x.mean(dim=0), p=2.0, dim=0)
