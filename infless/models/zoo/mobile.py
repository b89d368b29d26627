"""MobileNet-v1 and SSD-MobileNet-v1 (object detection) architectures of the zoo.

Worker side (imports torch). Plain `torch.nn`, traceable with `torch.fx`. SSD decodes its
boxes and keeps a fixed number of top-scoring detections inside the model, so its outputs
have static shapes (no NMS: that is data-dependent). Its anchors are a persistent buffer, so
a meta-device build gets them back from the state dict. Must not do I/O.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# (output channels, stride) of the 13 depthwise-separable layers of MobileNet-v1.
_MOBILENET_V1_LAYOUT: tuple[tuple[int, int], ...] = (
    (64, 1),
    (128, 2),
    (128, 1),
    (256, 2),
    (256, 1),
    (512, 2),
    (512, 1),
    (512, 1),
    (512, 1),
    (512, 1),
    (512, 1),
    (1024, 2),
    (1024, 1),
)


def _conv_bn_relu(c_in: int, c_out: int, kernel: int, stride: int, groups: int = 1) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel, stride, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class DepthwiseSeparable(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.depthwise = _conv_bn_relu(c_in, c_in, 3, stride, groups=c_in)
        self.pointwise = _conv_bn_relu(c_in, c_out, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.pointwise(self.depthwise(x))
        return out


def mobilenet_v1_features(in_channels: int = 3) -> nn.Sequential:
    """The 14 feature layers (stem + 13 separable layers); index 11 ends at stride 16."""
    layers: list[nn.Module] = [_conv_bn_relu(in_channels, 32, 3, 2)]
    channels = 32
    for c_out, stride in _MOBILENET_V1_LAYOUT:
        layers.append(DepthwiseSeparable(channels, c_out, stride))
        channels = c_out
    return nn.Sequential(*layers)


class MobileNetV1(nn.Module):
    def __init__(self, num_classes: int, in_channels: int) -> None:
        super().__init__()
        self.features = mobilenet_v1_features(in_channels)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(1024, num_classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.classifier(torch.flatten(self.pool(self.features(image)), 1))
        return logits


def mobilenet_v1(num_classes: int = 1000, in_channels: int = 3) -> nn.Module:
    """MobileNet-v1 (width 1.0); any input size ≥ 32 works (global average pool)."""
    return MobileNetV1(num_classes, in_channels)


# ---------------------------------------------------------------------------------------------
# SSD-MobileNet-v1: features at strides 16 and 32, four extra stride-2 layers, 1×1 predictors.

_SSD_EXTRAS: tuple[tuple[int, int], ...] = ((256, 512), (128, 256), (128, 256), (64, 128))


def _ssd_anchors(grid_sizes: list[int], per_cell: list[int]) -> torch.Tensor:
    """(cy, cx, h, w) anchors in [0, 1] coordinates, in the order the predictors emit them."""
    levels = len(grid_sizes)
    scales = [0.2 + (0.95 - 0.2) * k / (levels - 1) for k in range(levels)] + [1.0]
    rows: list[tuple[float, float, float, float]] = []
    for level, (grid, count) in enumerate(zip(grid_sizes, per_cell, strict=True)):
        scale = scales[level] if level > 0 else 0.1
        shapes = [(scale, 1.0), (scale, 2.0), (scale, 0.5)]
        if count == 6:
            shapes += [(scale, 3.0), (scale, 1.0 / 3.0)]
            shapes.append((math.sqrt(scales[level] * scales[level + 1]), 1.0))
        for y in range(grid):
            for x in range(grid):
                cy, cx = (y + 0.5) / grid, (x + 0.5) / grid
                for size, ratio in shapes:
                    rows.append((cy, cx, size / math.sqrt(ratio), size * math.sqrt(ratio)))
    return torch.tensor(rows, dtype=torch.float32)


class SsdMobileNetV1(nn.Module):
    def __init__(self, num_classes: int, image_size: int, detections: int) -> None:
        super().__init__()
        features = list(mobilenet_v1_features(3))
        self.stage1 = nn.Sequential(*features[:12])  # stride 16, 512 channels
        self.stage2 = nn.Sequential(*features[12:])  # stride 32, 1024 channels
        extras: list[nn.Module] = []
        channels = 1024
        for mid, c_out in _SSD_EXTRAS:
            extras.append(
                nn.Sequential(_conv_bn_relu(channels, mid, 1, 1), _conv_bn_relu(mid, c_out, 3, 2))
            )
            channels = c_out
        self.extras = nn.ModuleList(extras)
        source_channels = [512, 1024] + [c_out for _, c_out in _SSD_EXTRAS]
        per_cell = [3] + [6] * (len(source_channels) - 1)
        self.num_classes = num_classes
        self.detections = detections
        self.box_heads = nn.ModuleList(
            nn.Conv2d(c, n * 4, 1) for c, n in zip(source_channels, per_cell, strict=True)
        )
        self.class_heads = nn.ModuleList(
            nn.Conv2d(c, n * num_classes, 1) for c, n in zip(source_channels, per_cell, strict=True)
        )
        grid = image_size
        for _ in range(3):  # stem and two stride-2 separable layers; the loop adds the rest
            grid = (grid - 1) // 2 + 1
        grids = []
        for _ in source_channels:
            grid = (grid - 1) // 2 + 1
            grids.append(grid)
        self.register_buffer("anchors", _ssd_anchors(grids, per_cell))

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch = image.shape[0]
        x = self.stage1(image)
        sources = [x]
        x = self.stage2(x)
        sources.append(x)
        for extra in self.extras:
            x = extra(x)
            sources.append(x)
        deltas_parts, logits_parts = [], []
        for source, box_head, class_head in zip(
            sources, self.box_heads, self.class_heads, strict=True
        ):
            deltas_parts.append(box_head(source).permute(0, 2, 3, 1).reshape(batch, -1, 4))
            logits = class_head(source).permute(0, 2, 3, 1)
            logits_parts.append(logits.reshape(batch, -1, self.num_classes))
        deltas = torch.cat(deltas_parts, 1)
        class_logits = torch.cat(logits_parts, 1)
        return self._detect(deltas, class_logits)

    def _detect(
        self, deltas: torch.Tensor, class_logits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        anchors = self.get_buffer("anchors")
        cy = anchors[:, 0] + deltas[..., 0] * 0.1 * anchors[:, 2]
        cx = anchors[:, 1] + deltas[..., 1] * 0.1 * anchors[:, 3]
        h = anchors[:, 2] * torch.exp(torch.clamp(deltas[..., 2] * 0.2, max=4.0))
        w = anchors[:, 3] * torch.exp(torch.clamp(deltas[..., 3] * 0.2, max=4.0))
        boxes = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1)
        probabilities = torch.softmax(class_logits, dim=-1)[..., 1:]  # drop background
        best_scores, best_labels = probabilities.max(dim=-1)
        scores, index = torch.topk(best_scores, self.detections, dim=1)
        labels = torch.gather(best_labels, 1, index) + 1
        picked = torch.gather(boxes, 1, index.unsqueeze(-1).expand(-1, -1, 4))
        return torch.clamp(picked, 0.0, 1.0), scores, labels


def ssd_mobilenet_v1(
    num_classes: int = 91, image_size: int = 300, detections: int = 100
) -> nn.Module:
    """SSD on MobileNet-v1 → (boxes [K, 4] xyxy in [0, 1], scores [K], labels [K] int64)."""
    return SsdMobileNetV1(num_classes, image_size, detections)
