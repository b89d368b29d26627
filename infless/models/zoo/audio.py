"""Audio architecture of the zoo: YAMNet (MobileNet-v1 over log-mel patches, 521 classes).

Worker side (imports torch). The model takes a log-mel spectrogram [1, frames, 64] (10 ms
hop), not a waveform, so it stays a plain traceable CNN (no STFT, no complex tensors); it
returns one logit per AudioSet class for the whole clip (apply `sigmoid` for scores).
Must not do I/O.
"""

from __future__ import annotations

import torch
from torch import nn

from infless.models.zoo.mobile import MobileNetV1


class YamNet(MobileNetV1):
    def forward(self, log_mel: torch.Tensor) -> torch.Tensor:
        return super().forward(log_mel)


def yamnet(num_classes: int = 521) -> nn.Module:
    """YAMNet's network: MobileNet-v1 with one input channel and a 521-way head."""
    return YamNet(num_classes, in_channels=1)
