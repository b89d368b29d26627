"""Image-classification architectures of the zoo: MNIST CNN, VGGs, ResNets, CIFAR ResNets.

Worker side (imports torch). Plain `torch.nn`, traceable with `torch.fx` (no data-dependent
control flow, no non-persistent buffers). Builders only define structure: seeded weights are
set by `infless.models.zoo.seeding`, loading by `infless.models.loader`. Must not do I/O.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias
from torch import nn

# ---------------------------------------------------------------------------------------------
# MNIST: a two-conv LeNet-style network, ~18 k parameters (Table 1: 72 k bytes).


class MnistCnn(nn.Module):
    def __init__(self, num_classes: int = 10, hidden: int = 56) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=5),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, kernel_size=5),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(16 * 4 * 4, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.classifier(self.features(image))
        return logits


def mnist_cnn(num_classes: int = 10, hidden: int = 56) -> nn.Module:
    """28×28 grey digits → class logits."""
    return MnistCnn(num_classes, hidden)


# ---------------------------------------------------------------------------------------------
# VGG-11/13/16/19 (configurations A, B, D, E; no batch norm) with a compact classifier head.

VGG_LAYOUTS: dict[int, tuple[int, ...]] = {  # 0 = 2×2 max pool
    11: (64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0),
    13: (64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0),
    16: (64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0),
    19: (64, 64, 0, 128, 128, 0, *(256,) * 4, 0, *(512,) * 4, 0, *(512,) * 4, 0),
}


class Vgg(nn.Module):
    def __init__(self, num_classes: int, hidden: int, depth: int = 16) -> None:
        super().__init__()
        if depth not in VGG_LAYOUTS:
            raise ValueError(f"depth={depth}: VGG comes in depths {sorted(VGG_LAYOUTS)}")
        layers: list[nn.Module] = []
        channels = 3
        for width in VGG_LAYOUTS[depth]:
            if width == 0:
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(inplace=True)]
                channels = width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.classifier(self.pool(self.features(image)))
        return logits


def vgg16(num_classes: int = 1000, hidden: int = 2048) -> nn.Module:
    """VGG-16 convolutional features (13 conv layers) → global pool → 2-layer classifier."""
    return Vgg(num_classes, hidden, 16)


def vgg(depth: int = 16, num_classes: int = 1000, hidden: int = 2048) -> nn.Module:
    """VGG-`depth` convolutional features → global pool → 2-layer classifier."""
    return Vgg(num_classes, hidden, depth)


# ---------------------------------------------------------------------------------------------
# ResNet-18/34/50/101/152 (v1.5: stride on the 3×3 conv), torchvision's parameter naming.


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    conv = nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=False)
    return [conv, nn.BatchNorm2d(c_out)]


def _shortcut(c_in: int, c_out: int, stride: int) -> nn.Module:
    if stride != 1 or c_in != c_out:
        return nn.Sequential(*_conv_bn(c_in, c_out, 1, stride))
    return nn.Identity()


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, c_in: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(c_in, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        result: torch.Tensor = self.relu(out + self.downsample(x))
        return result


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, c_in: int, planes: int, stride: int) -> None:
        super().__init__()
        c_out = planes * self.expansion
        self.conv1 = nn.Conv2d(c_in, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(c_in, c_out, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        result: torch.Tensor = self.relu(out + self.downsample(x))
        return result


# depth -> (block, blocks per stage)
RESNET_LAYOUTS: dict[int, tuple[type[BasicBlock] | type[Bottleneck], tuple[int, ...]]] = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
    152: (Bottleneck, (3, 8, 36, 3)),
}


class ResNet(nn.Module):
    def __init__(self, num_classes: int, depth: int = 50) -> None:
        super().__init__()
        if depth not in RESNET_LAYOUTS:
            raise ValueError(f"depth={depth}: ResNet comes in depths {sorted(RESNET_LAYOUTS)}")
        block, counts = RESNET_LAYOUTS[depth]
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        c_in = 64
        stages: list[nn.Sequential] = []
        for planes, blocks, stride in zip((64, 128, 256, 512), counts, (1, 2, 2, 2), strict=True):
            layer: list[nn.Module] = []
            for index in range(blocks):
                layer.append(block(c_in, planes, stride if index == 0 else 1))
                c_in = planes * block.expansion
            stages.append(nn.Sequential(*layer))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(image))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        logits: torch.Tensor = self.fc(torch.flatten(self.avgpool(x), 1))
        return logits


def resnet50(num_classes: int = 1000) -> nn.Module:
    """ResNet-50 for 224×224 RGB; the classifier head is `fc` (the transfer-learning head)."""
    return ResNet(num_classes, 50)


def resnet(depth: int = 50, num_classes: int = 1000) -> nn.Module:
    """ResNet-`depth` (18, 34: basic blocks; 50, 101, 152: bottlenecks) for 224×224 RGB."""
    return ResNet(num_classes, depth)


# ---------------------------------------------------------------------------------------------
# ResNet-20 for CIFAR (He et al. 2016, §4.2), option A shortcuts, optional width multiplier.


class CifarBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.stride = stride
        self.pad_front = (c_out - c_in) // 2
        self.pad_back = c_out - c_in - self.pad_front

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        """Option A: subsample spatially and zero-pad the channels (no parameters)."""
        if self.stride != 1:
            x = x[:, :, :: self.stride, :: self.stride]
        if self.pad_front or self.pad_back:
            x = F.pad(x, (0, 0, 0, 0, self.pad_front, self.pad_back))
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        result: torch.Tensor = self.relu(out + self.shortcut(x))
        return result


class CifarResNet(nn.Module):
    def __init__(self, depth: int, width: int, num_classes: int) -> None:
        super().__init__()
        if (depth - 2) % 6 != 0:
            raise ValueError(f"depth={depth}: a CIFAR ResNet needs depth = 6n + 2 (20, 32, 44)")
        blocks = (depth - 2) // 6
        widths = (16 * width, 32 * width, 64 * width)
        self.conv1 = nn.Conv2d(3, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        c_in = widths[0]
        stages: list[nn.Sequential] = []
        for stage, c_out in enumerate(widths):
            layer: list[nn.Module] = []
            for index in range(blocks):
                stride = 2 if stage > 0 and index == 0 else 1
                layer.append(CifarBlock(c_in, c_out, stride))
                c_in = c_out
            stages.append(nn.Sequential(*layer))
        self.layer1, self.layer2, self.layer3 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(image)))
        x = self.layer3(self.layer2(self.layer1(x)))
        logits: torch.Tensor = self.fc(torch.flatten(self.avgpool(x), 1))
        return logits


def resnet_cifar(depth: int = 20, width: int = 1, num_classes: int = 10) -> nn.Module:
    """CIFAR ResNet on 32×32 RGB; width multiplies the 16/32/64 channel widths."""
    return CifarResNet(depth, width, num_classes)
