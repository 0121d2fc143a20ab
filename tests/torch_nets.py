"""PyTorch modules for the model=torch tests, built here (no downloaded weights)."""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block: conv-bn-relu-conv-bn, identity or 1x1 shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class SmallResNet(nn.Module):
    """A torchvision-style ResNet (stem, four stages of basic blocks, pool, fc), small."""

    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths = [width, 2 * width, 4 * width, 8 * width]
        layers, cin = [], width
        for i, w in enumerate(widths):
            layers.append(nn.Sequential(BasicBlock(cin, w, 1 if i == 0 else 2),
                                        BasicBlock(w, w)))
            cin = w
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def small_resnet(num_classes: int = 10, width: int = 16, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    net = SmallResNet(num_classes, width)
    for m in net.modules():  # non-trivial BatchNorm statistics, as a trained net has
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return net


class Gate(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.mean() > 0.5:  # data-dependent: a trace keeps one branch
            return x * 2
        return x


def gated() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), Gate())


class Opaque(nn.Module):
    """An op ONNX has no operator for (a symmetric eigensolver): neither exporter writes it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.flatten(2)
        return torch.linalg.eigvalsh(flat @ flat.transpose(1, 2))


def with_opaque_layer() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Sequential(nn.Conv2d(4, 4, 1),
                                                                    Opaque()))


def not_a_module() -> int:
    return 3
