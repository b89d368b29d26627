"""BERT encoders of any size with a sequence-classification or a question-answering head.

Worker side (imports torch). Plain `torch.nn` with attention written out as matmul + softmax
(so `torch.fx` sees every operator), BERT's parameter layout, and no buffers at all: position
ids come from slicing the position table. Padding is masked with a large finite negative, so
an all-zero mask gives uniform attention instead of NaN. Must not do I/O.
"""

from __future__ import annotations

import math

import torch
from torch import nn

HEADS = ("classification", "qa")


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        if hidden % heads != 0:
            raise ValueError(f"hidden={hidden} is not a multiple of heads={heads}")
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask_bias
        context = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2)
        context = context.reshape(x.shape[0], x.shape[1], self.heads * self.head_dim)
        out: torch.Tensor = self.norm(x + self.output(context))
        return out


class EncoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.act = nn.GELU()
        self.output = nn.Linear(intermediate, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        x = self.attention(x, mask_bias)
        out: torch.Tensor = self.norm(x + self.output(self.act(self.intermediate(x))))
        return out


class BertClassifier(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        hidden: int,
        layers: int,
        heads: int,
        intermediate: int,
        max_positions: int,
        type_vocab_size: int,
        classes: int,
        head: str = "classification",
    ) -> None:
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"head={head!r}: a BERT head is one of {', '.join(HEADS)}")
        self.vocab_size = vocab_size
        self.word_embeddings = nn.Embedding(vocab_size, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden)
        self.embedding_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(
            EncoderLayer(hidden, heads, intermediate) for _ in range(layers)
        )
        self.head = head
        if head == "classification":
            self.pooler = nn.Linear(hidden, hidden)
            self.classifier = nn.Linear(hidden, classes)
        else:
            self.qa_outputs = nn.Linear(hidden, 2)  # a span's start and end logit per token

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        ids = torch.clamp(input_ids, 0, self.vocab_size - 1)
        x = self.word_embeddings(ids)
        x = x + self.position_embeddings.weight[:seq_len] + self.token_type_embeddings.weight[0]
        x = self.embedding_norm(x)
        keep = attention_mask[:, None, None, :].to(x.dtype)
        mask_bias = (1.0 - keep) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        if self.head == "qa":
            spans: torch.Tensor = self.qa_outputs(x)
            return spans
        pooled = torch.tanh(self.pooler(x[:, 0]))
        logits: torch.Tensor = self.classifier(pooled)
        return logits


def bert(
    vocab_size: int = 21128,
    hidden: int = 768,
    layers: int = 12,
    heads: int = 12,
    intermediate: int = 3072,
    max_positions: int = 512,
    type_vocab_size: int = 2,
    classes: int = 2,
    head: str = "classification",
) -> nn.Module:
    """A BERT encoder (default: BERT-base, Chinese vocabulary size 21128) → `head`:
    "classification" (pooled [CLS] → class logits) or "qa" (per token: span start and end
    logits)."""
    return BertClassifier(
        vocab_size=vocab_size,
        hidden=hidden,
        layers=layers,
        heads=heads,
        intermediate=intermediate,
        max_positions=max_positions,
        type_vocab_size=type_vocab_size,
        classes=classes,
        head=head,
    )
