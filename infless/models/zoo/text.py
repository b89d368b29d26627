"""Text architectures of the zoo: TextCNN, an LSTM classifier and a two-tower DSSM.

Worker side (imports torch). Plain `torch.nn`, traceable with `torch.fx`. Inputs are int64
token ids of a fixed length; ids outside [0, vocab) are clamped into range so one bad request
cannot fail a whole batch. Must not do I/O.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias
from torch import nn


def _clamp_ids(token_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    return torch.clamp(token_ids, 0, vocab_size - 1)


class TextCnn(nn.Module):
    """Kim (2014): embeddings → parallel 1-D convolutions → max over time → classifier."""

    def __init__(
        self, vocab_size: int, embed_dim: int, kernel_sizes: list[int], filters: int, classes: int
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.convs = nn.ModuleList(nn.Conv1d(embed_dim, filters, k) for k in kernel_sizes)
        self.relu = nn.ReLU()
        self.classifier = nn.Linear(filters * len(kernel_sizes), classes)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        x = self.embedding(_clamp_ids(token_ids, self.vocab_size)).transpose(1, 2).contiguous()
        pooled = [torch.amax(self.relu(conv(x)), dim=2) for conv in self.convs]
        logits: torch.Tensor = self.classifier(torch.cat(pooled, dim=1))
        return logits


def textcnn(
    vocab_size: int = 12000,
    embed_dim: int = 128,
    kernel_sizes: list[int] | None = None,
    filters: int = 768,
    classes: int = 20,
) -> nn.Module:
    return TextCnn(vocab_size, embed_dim, kernel_sizes or [3, 4, 5], filters, classes)


class LstmClassifier(nn.Module):
    """Embeddings → stacked LSTM → last time step of the top layer → classifier."""

    def __init__(
        self, vocab_size: int, embed_dim: int, hidden: int, layers: int, classes: int
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden, num_layers=layers, batch_first=True)
        self.classifier = nn.Linear(hidden, classes)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        x = self.embedding(_clamp_ids(token_ids, self.vocab_size))
        sequence = self.lstm(x)[0]
        logits: torch.Tensor = self.classifier(sequence[:, -1])
        return logits


def lstm_classifier(
    vocab_size: int = 20000,
    embed_dim: int = 256,
    hidden: int = 512,
    layers: int = 2,
    classes: int = 2365,
) -> nn.Module:
    return LstmClassifier(vocab_size, embed_dim, hidden, layers, classes)


class DssmTower(nn.Module):
    """CLSM-style tower: embeddings → 1-D conv → max over time → two dense layers (tanh)."""

    def __init__(self, vocab_size: int, embed_dim: int, conv_dim: int, out_dim: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.conv = nn.Conv1d(embed_dim, conv_dim, 3, padding=1)
        self.dense = nn.Linear(conv_dim, conv_dim // 2)
        self.project = nn.Linear(conv_dim // 2, out_dim)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        x = self.embedding(_clamp_ids(token_ids, self.vocab_size)).transpose(1, 2).contiguous()
        x = torch.amax(torch.tanh(self.conv(x)), dim=2)
        semantic: torch.Tensor = torch.tanh(self.project(torch.tanh(self.dense(x))))
        return semantic


class Dssm(nn.Module):
    """Two towers (query, document) → cosine similarity of their semantic vectors."""

    def __init__(self, vocab_size: int, embed_dim: int, conv_dim: int, out_dim: int) -> None:
        super().__init__()
        self.query = DssmTower(vocab_size, embed_dim, conv_dim, out_dim)
        self.doc = DssmTower(vocab_size, embed_dim, conv_dim, out_dim)

    def forward(self, query_ids: torch.Tensor, doc_ids: torch.Tensor) -> torch.Tensor:
        similarity = F.cosine_similarity(self.query(query_ids), self.doc(doc_ids), dim=1)
        return similarity.unsqueeze(1)


def dssm(
    vocab_size: int = 10000, embed_dim: int = 256, conv_dim: int = 512, out_dim: int = 128
) -> nn.Module:
    return Dssm(vocab_size, embed_dim, conv_dim, out_dim)
