"""A model that takes as long as its request asks, for the fault-injection tests: copied,
never imported by tests.

`tests.support.faults.slow_package` copies this file as `slow_model.py` into the gateway's
working directory (on its workers' import path) and writes a package whose architecture is
`slow_model:build`. Input `x` is `[delay_ms, tag]`: the forward sleeps the batch's largest
`delay_ms`, then answers `y = x`, so every answer names its request (the tag) and a test
holds requests in flight as long as it needs. Warm-up sends zeros: no wait.
"""

from __future__ import annotations

import time

import torch
from torch import nn


class Slow(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        delay_ms = float(x[:, 0].max())
        if delay_ms > 0:
            time.sleep(delay_ms / 1000.0)
        out: torch.Tensor = x * self.scale
        return out


def build() -> nn.Module:
    return Slow()
