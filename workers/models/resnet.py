"""ResNet-20 for 32×32 images (He et al., 2015, "Deep Residual Learning", §4.2).

Three stages of three basic blocks with 16, 32 and 64 channels; the first
block of stages two and three halves the resolution. Where a block changes
shape, its shortcut is a 1×1 convolution with batch norm (a projection), as in
the MLBench reference implementation: 272,474 parameters for 3 input channels
and 10 classes. The paper's zero-padding shortcut would have 269,722.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class BasicBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """A CIFAR-style ResNet of depth 6n+2 (n = ``blocks_per_stage``)."""

    def __init__(self, blocks_per_stage: int, in_channels: int = 3, classes: int = 10) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 16, 3, 1, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        stages = []
        channels = 16
        for stage, width in enumerate((16, 32, 64)):
            for block in range(blocks_per_stage):
                stride = 2 if stage > 0 and block == 0 else 1
                stages.append(BasicBlock(channels, width, stride))
                channels = width
        self.blocks = nn.Sequential(*stages)
        self.fc = nn.Linear(64, classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.conv(x)))
        x = self.blocks(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def resnet20(in_channels: int = 3, classes: int = 10) -> ResNet:
    return ResNet(blocks_per_stage=3, in_channels=in_channels, classes=classes)
