"""A user-defined architecture for the `package.module:callable` tests (not a test module)."""

from __future__ import annotations

import torch
from torch import nn


class TwoInTwoOut(nn.Module):
    """Two inputs (features, token ids) and two outputs (scores, argmax class as int64)."""

    def __init__(self, features: int = 6, vocab: int = 11, classes: int = 3) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, features)
        self.linear = nn.Linear(features, classes)
        self.norm = nn.BatchNorm1d(features)

    def forward(
        self, features: torch.Tensor, token_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        mixed = self.norm(features + self.embedding(token_ids).mean(dim=1))
        scores: torch.Tensor = self.linear(mixed)
        return scores, scores.argmax(dim=1)


def two_in_two_out(features: int = 6, vocab: int = 11, classes: int = 3) -> nn.Module:
    return TwoInTwoOut(features, vocab, classes)


class WithScratchBuffer(nn.Module):
    """Has a non-persistent buffer: cannot be restored on a meta-built module."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)
        self.register_buffer("scratch", torch.ones(4), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x * self.get_buffer("scratch"))
        return out


NOT_CALLABLE = 42
