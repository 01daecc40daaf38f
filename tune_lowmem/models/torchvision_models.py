"""torchvision's classification networks, built by name for 32x32 inputs.

- resnet18: torchvision's ResNet-18 with the usual CIFAR stem (3x3 stride-1 first convolution,
  no max pool), so 32x32 images keep 32x32 feature maps in the first stage;
- mobilenet_v3_small: unchanged (its stride-2 stem and stages take 32x32 down to 1x1);
- vit_tiny: a VisionTransformer of 4x4 patches (64 tokens), 6 layers, width 192, 3 heads.

Parameter names are torchvision's own, so its tools and checkpoints apply.
"""

from __future__ import annotations

from collections.abc import Callable

import torchvision
from torch import nn


def _resnet18(num_classes: int) -> nn.Module:
    model = torchvision.models.resnet18(num_classes=num_classes)
    model.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


def _mobilenet_v3_small(num_classes: int) -> nn.Module:
    return torchvision.models.mobilenet_v3_small(num_classes=num_classes)


def _vit_tiny(num_classes: int) -> nn.Module:
    return torchvision.models.VisionTransformer(
        image_size=32,
        patch_size=4,
        num_layers=6,
        num_heads=3,
        hidden_dim=192,
        mlp_dim=768,
        num_classes=num_classes,
    )


ARCHITECTURES: dict[str, Callable[[int], nn.Module]] = {
    "resnet18": _resnet18,
    "mobilenet_v3_small": _mobilenet_v3_small,
    "vit_tiny": _vit_tiny,
}


def build(arch: str, num_classes: int) -> nn.Module:
    if arch not in ARCHITECTURES:
        raise ValueError(
            f"model.arch: {arch!r} is not allowed; allowed: {', '.join(ARCHITECTURES)}"
        )
    return ARCHITECTURES[arch](num_classes)
