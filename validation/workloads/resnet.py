"""``resnet18``: ResNet-18 (11.2M parameters) on scikit-learn's handwritten digits upscaled to
3 x 32 x 32 (real images that ship with the package; no download, no pretrained weights).

Owns the images' preparation (:func:`upscale`), the model (:class:`ResNet18`) and the workload.
The model is torchvision's ``resnet18(num_classes=10, zero_init_residual=True, norm_layer=
GroupNorm(32, .))`` written out here, module for module: the same names, shapes, random draws
and initialisation (the same weights for the same seed as torchvision 0.28's), so the same
11,181,642 parameters. It is written out because the torchvision wheels this project can
install are CUDA builds that do not load against the CPU-only torch pinned for development.

**GroupNorm instead of BatchNorm.** BatchNorm normalises with the statistics of the batch it is
given, so a rank's gradient would depend on how the global batch was cut across ranks and the
weighted combination ``sum_i (b_i/B) g_i`` would no longer be the gradient of the union; and on
32 x 32 inputs layer4 works on 1 x 1 feature maps, where BatchNorm fails outright for a local
batch of one sample. GroupNorm normalises each sample on its own, with the same affine
parameters. **Zero-initialised residuals** (each block's last norm starts with zero scale, so
every block starts as the identity) let it train at the runs' default SGD (lr 0.05, momentum
0.9, global batch 128); without them the loss diverges in the first epoch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from validation.workloads.base import Dataset, Workload
from validation.workloads.digits import N_CLASSES, N_DIGITS, N_TEST, digits_split

SIZE = 32  # images are upscaled from 8 x 8 to SIZE x SIZE
GROUPS = 32  # GroupNorm groups (divides 64, 128, 256 and 512 channels)
WIDTHS = (64, 128, 256, 512)
BLOCKS = (2, 2, 2, 2)


def norm(channels: int) -> nn.GroupNorm:
    """The normalisation layer: per-sample GroupNorm (see the module docstring)."""
    return nn.GroupNorm(GROUPS, channels)


def upscale(images: np.ndarray) -> torch.Tensor:
    """8 x 8 images N x 8 x 8 in [0, 1] as N x 3 x 32 x 32 (bilinear, grey repeated on 3 channels)."""
    x = torch.from_numpy(images).unsqueeze(1)
    return F.interpolate(x, size=(SIZE, SIZE), mode="bilinear", align_corners=False).repeat(1, 3, 1, 1)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual; a 1x1 strided projection when the shape changes."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        # built first but registered last, as torchvision does: the same random draws, in the same order
        downsample = None
        if stride != 1 or inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False), norm(planes))
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = norm(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = norm(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision's ResNet-18 layout: a 7x7 stride-2 stem and max-pool, four stages of two
    basic blocks (64, 128, 256, 512 channels), global average pooling and a linear head.
    ``zero_init_residual``: each block's last norm starts with zero scale, as torchvision's option."""

    def __init__(self, num_classes: int = N_CLASSES, zero_init_residual: bool = True) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, WIDTHS[0], 7, stride=2, padding=3, bias=False)
        self.bn1 = norm(WIDTHS[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        inplanes, stages = WIDTHS[0], []
        for i, (planes, blocks) in enumerate(zip(WIDTHS, BLOCKS)):
            stride = 1 if i == 0 else 2
            layers = [BasicBlock(inplanes, planes, stride)] + [BasicBlock(planes, planes) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*layers))
            inplanes = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(WIDTHS[-1], num_classes)
        for module in self.modules():  # torchvision's initialisation
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.GroupNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        if zero_init_residual:
            for module in self.modules():
                if isinstance(module, BasicBlock):
                    nn.init.zeros_(module.bn2.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        logits: torch.Tensor = self.fc(torch.flatten(self.avgpool(x), 1))
        return logits


class DigitsResNet18(Workload):
    name = "resnet18"

    classes = True  # its labels are classes: has_accuracy needs no data

    def train_size(self) -> int:
        return N_DIGITS - N_TEST  # the split of digits-cnn

    def load(self, seed: int, device: torch.device) -> Dataset:
        """The digits split of ``digits-cnn``, upscaled, normalised with the training images'
        mean and standard deviation."""
        train_images, train_y, test_images, test_y = digits_split(seed)
        train_x, test_x = upscale(train_images), upscale(test_images)
        mean, std = train_x.mean(), train_x.std()
        return Dataset(
            ((train_x - mean) / std).to(device),
            torch.from_numpy(train_y).to(device),
            ((test_x - mean) / std).to(device),
            torch.from_numpy(test_y).to(device),
        )

    def build_model(self) -> nn.Module:
        return ResNet18()

    def loss(self, output: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output, labels)


WORKLOAD = DigitsResNet18()
