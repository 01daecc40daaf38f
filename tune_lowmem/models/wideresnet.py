"""WideResNet-d-k (Zagoruyko & Komodakis 2016), pre-activation blocks, for 32x32 images.

The residual block is the unit of gradient checkpointing: `set_grad_checkpointing`
picks a strategy that `forward` reads, so parameter names never change with it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..validation import choice, positive_int, require
from .chain import StageCost, point, run_plan
from .fused_norm import DEFAULT_CHUNKS, batch_statistics, bn_relu_conv, chunkwise, fused_block
from .segments import run_checkpointed
from .strategies import CHAIN_POINTS, CHAIN_STRATEGIES, chain_point, check

NESTED = "-nested"
FUSED_NORM_MODES = ("none", "unit", "block")


@dataclass(frozen=True)
class WideResNetConfig:
    """WideResNet-d-k (Zagoruyko & Komodakis 2016); the paper uses 28-2."""

    depth: int = 28  # 6n+4: n residual blocks in each of the three groups
    width: int = 2  # widening factor k; group widths are 16k, 32k, 64k
    num_classes: int = 10
    # not the paper's: blocks trained through models.fused_norm (exact; see set_fused_norm)
    fused_norm: str = "none"

    def validate(self, prefix: str) -> None:
        choice(self.fused_norm, FUSED_NORM_MODES, f"{prefix}.fused_norm")
        positive_int(self.depth, f"{prefix}.depth")
        require(
            self.depth >= 10 and (self.depth - 4) % 6 == 0,
            f"{prefix}.depth",
            f"{self.depth!r} is not allowed; a depth 6n+4 with n >= 1 (10, 16, 22, 28, ...) is required",
        )
        positive_int(self.width, f"{prefix}.width")
        positive_int(self.num_classes, f"{prefix}.num_classes")


class BasicBlock(nn.Module):
    """BN-ReLU-conv3x3-BN-ReLU-conv3x3 with an identity or 1x1-conv shortcut."""

    def __init__(self, in_planes: int, out_planes: int, stride: int):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)
        self.conv2 = nn.Conv2d(out_planes, out_planes, 3, stride=1, padding=1, bias=False)
        self.shortcut = (
            nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)
            if stride != 1 or in_planes != out_planes
            else None
        )
        self.fused_norm = "none"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused_norm != "none" and self.training and torch.is_grad_enabled():
            return self.fused_forward(x)
        if self.fused_norm != "none" and not self.training and not torch.is_grad_enabled():
            return self.chunked_evaluation(x)
        return self.plain_forward(x)

    def plain_forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.bn1(x))
        residual = x if self.shortcut is None else self.shortcut(pre)
        out = self.conv1(pre)
        out = self.conv2(F.relu(self.bn2(out)))
        return out + residual

    def chunked_evaluation(self, x: torch.Tensor) -> torch.Tensor:
        """The plain block over batch chunks, as the fused units train: in eval mode batch norm
        uses its running statistics, so each image's output is its own and the chunks compute
        the same function (within a convolution's reassociation at another batch), each
        convolution at the batch the training step runs it, one chunk's temporaries alive at a
        time. So an evaluation at the training microbatch holds no more than the step."""
        return chunkwise(self.plain_forward, x)

    def fused_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The same function through `fused_norm`: the whole block as one unit storing its input
        ("block"), or each BN-ReLU-conv as one storing the BN input ("unit")."""
        if type(self.bn1) is not nn.BatchNorm2d or type(self.bn2) is not nn.BatchNorm2d:
            raise ValueError("fused_norm: needs plain BatchNorm2d (not a group batch norm)")
        if self.fused_norm == "block":
            return fused_block(x, self.bn1, self.conv1, self.bn2, self.conv2, self.shortcut)
        stats = batch_statistics(x, self.bn1)
        out = bn_relu_conv(x, self.bn1, self.conv1, stats)
        residual = x if self.shortcut is None else bn_relu_conv(x, self.bn1, self.shortcut, stats)
        out = bn_relu_conv(out, self.bn2, self.conv2, batch_statistics(out, self.bn2))
        return out.add_(residual)  # nobody saved the conv output it lands on


class WideResNet(nn.Module):
    """Stem conv, three groups of n blocks (widths 16k, 32k, 64k), BN-ReLU, global pool, linear."""

    CHECKPOINT_STRATEGIES = (
        "none",
        "residual-1",
        "residual-2",
        "residual-2*",
        # not the paper's: its segments with every block checkpointed again inside
        "residual-2-nested",
        "residual-2*-nested",
        # not the paper's: nested checkpoints over stem, blocks and head placed by `chain`,
        # chain-min (chain-0) and chain-0 .. chain-8 along its frontier (`strategies`)
        *CHAIN_STRATEGIES,
    )

    def __init__(self, depth: int = 28, width: int = 2, num_classes: int = 10):
        super().__init__()
        WideResNetConfig(depth=depth, width=width, num_classes=num_classes).validate("model")
        n = (depth - 4) // 6
        widths = [16, 16 * width, 32 * width, 64 * width]
        self.stem = nn.Conv2d(3, widths[0], 3, padding=1, bias=False)
        blocks = []
        for group in range(3):
            for i in range(n):
                in_planes = widths[group] if i == 0 else widths[group + 1]
                stride = 2 if group > 0 and i == 0 else 1
                blocks.append(BasicBlock(in_planes, widths[group + 1], stride))
        self.blocks = nn.ModuleList(blocks)
        self.bn = nn.BatchNorm2d(widths[3])
        self.fc = nn.Linear(widths[3], num_classes)
        self.grad_checkpointing = "none"
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    @classmethod
    def from_config(cls, config: WideResNetConfig) -> WideResNet:
        model = cls(config.depth, config.width, config.num_classes)
        model.set_fused_norm(config.fused_norm)
        return model

    def set_grad_checkpointing(self, strategy: str = "residual-1") -> None:
        """none | residual-1 | residual-2 | residual-2* (see `segments` for what each stores),
        their -nested forms, or chain-k (chain-min is chain-0): the chain stem, blocks, head under
        the nested checkpoints of `chain.point` k for the input's shape (k = 0: least estimated
        peak, then least recomputation; each step of k recomputes at most 1/8 less of what
        chain-0 recomputes, at the least estimated peak for it; see `strategies`)."""
        self.grad_checkpointing = check(strategy, self.CHECKPOINT_STRATEGIES)

    def set_fused_norm(self, mode: str = "block") -> None:
        """none | unit | block: train the residual blocks through `fused_norm` (exact). "unit"
        stores half a block's activations at no extra convolution; "block" stores only the
        block input, at 3 extra convolutions per block in the backward pass. Evaluation and
        no-grad passes run the plain modules."""
        if mode not in FUSED_NORM_MODES:
            allowed = ", ".join(FUSED_NORM_MODES)
            raise ValueError(f"fused_norm: {mode!r} is not allowed; allowed: {allowed}")
        for block in self.blocks:
            block.fused_norm = mode

    def segments(self) -> list[list[nn.Module]]:
        """The forward pass as a list of segments; a segment of a checkpointing strategy stores
        only its input and recomputes its inside during the backward pass.

        - none: each module is its own stored segment (nothing is recomputed);
        - residual-1: each residual block is a checkpointed segment;
        - residual-2: each pair of consecutive blocks is a checkpointed segment;
        - residual-2*: residual-2, and the stem conv and the head (BN-ReLU-pool-linear) are
          checkpointed too, so that nothing outside a segment boundary stays stored: the stem
          joins the first pair and the head joins the last pair;
        - <strategy>-nested (not the paper's): the same segments, and inside each checkpointed
          one every module is checkpointed again, so a segment's recomputation stores only its
          modules' inputs and recomputes one module at a time (each forward runs three times).
        """
        blocks = list(self.blocks)
        stem, head = [self.stem], [_Head(self.bn, self.fc)]
        strategy = self.grad_checkpointing.removesuffix(NESTED)
        if strategy in ("none", "residual-1") or chain_point(strategy) is not None:  # chain stages
            return [stem] + [[b] for b in blocks] + [head]
        pairs = [blocks[i : i + 2] for i in range(0, len(blocks), 2)]
        if strategy == "residual-2":
            return [stem] + pairs + [head]
        pairs[0] = stem + pairs[0]
        pairs[-1] = pairs[-1] + head
        return pairs

    def checkpointed(self, index: int, segments: list[list[nn.Module]]) -> bool:
        strategy = self.grad_checkpointing.removesuffix(NESTED)
        if strategy == "none":
            return False
        if strategy == "residual-2*":
            return True
        return all(isinstance(m, BasicBlock) for m in segments[index])

    def chain_costs(self, shape: tuple[int, ...]) -> tuple[tuple[StageCost, ...], int]:
        """Estimated costs of the stages stem, blocks, head for input images of `shape` (see
        `chain.StageCost`), and the bytes of the logits: placement estimates, not predictions."""
        itemsize = self.stem.weight.dtype.itemsize
        wide = max(itemsize, 4)  # the fused units accumulate weight gradients in fp32
        batch, channels, height, width = shape

        def convolve(conv: nn.Conv2d, size: tuple[int, int]) -> tuple[tuple[int, int], int]:
            out = tuple(
                (n + 2 * conv.padding[i] - conv.dilation[i] * (conv.kernel_size[i] - 1) - 1)
                // conv.stride[i]
                + 1
                for i, n in enumerate(size)
            )
            return out, 2 * batch * out[0] * out[1] * weight_numel(conv)

        size, flops = convolve(self.stem, (height, width))
        costs = [StageCost(batch * channels * height * width * itemsize, 0, 0, flops)]
        for block in self.blocks:
            convs = [block.conv1, block.conv2] + ([block.shortcut] if block.shortcut else [])
            in_bytes = batch * block.conv1.in_channels * size[0] * size[1] * itemsize
            out_size, flops = convolve(block.conv1, size)
            flops += sum(convolve(c, out_size if c is block.conv2 else size)[1] for c in convs[1:])
            out_bytes = batch * block.conv2.out_channels * out_size[0] * out_size[1] * itemsize
            weights = 2 * wide * max(weight_numel(c) for c in convs)
            # the fused units' fp32 temporaries: about 4 batch chunks of the wider activation
            chunk = -(-batch // DEFAULT_CHUNKS) * max(in_bytes, out_bytes) // batch
            chunked = 4 * chunk * wide // itemsize
            saved, working = {  # beyond the block's input; see fused_norm
                "block": (0, out_bytes + (in_bytes if block.shortcut else 0) + chunked),
                "unit": (out_bytes, in_bytes + out_bytes + chunked),
                "none": (in_bytes + 2 * out_bytes, in_bytes + 2 * out_bytes),
            }[block.fused_norm]
            costs.append(StageCost(in_bytes, saved, working + weights, flops))
            size = out_size
        head_bytes = batch * self.bn.num_features * size[0] * size[1] * itemsize
        costs.append(StageCost(head_bytes, head_bytes, 2 * head_bytes, 0))
        return tuple(costs), batch * self.fc.out_features * self.fc.weight.dtype.itemsize

    def chain_plan(self, shape: tuple[int, ...], k: int) -> tuple:
        """chain-k's plan (`chain.point`) over stem, blocks and head for input images of
        `shape`: what `forward` runs in training, in a trial and in the profiler's dry run."""
        return point(*self.chain_costs(shape), k, CHAIN_POINTS).plan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.stem.weight.dtype)  # images enter a half model in half
        training = self.training and torch.is_grad_enabled()
        k = chain_point(self.grad_checkpointing)
        if k is not None and training:
            stages = [self.stem, *self.blocks, _Head(self.bn, self.fc)]
            return run_plan(self.chain_plan(tuple(x.shape), k), stages, x)
        segments = self.segments()
        nested = self.grad_checkpointing.endswith(NESTED)
        for index, segment in enumerate(segments):
            if training and self.checkpointed(index, segments):
                run = _run_nested if nested else _run_segment
                x = run_checkpointed(functools.partial(run, segment), segment, x)
            else:
                x = _run_segment(segment, x)
        return x


def weight_numel(conv: nn.Conv2d) -> int:
    """The elements of the conv's dense weight (from its geometry: a packed sparse weight holds
    fewer, and builds the dense one while it computes)."""
    return conv.out_channels * conv.in_channels // conv.groups * math.prod(conv.kernel_size)


class _Head(nn.Module):
    """BN-ReLU, global average pool, classifier: a view over the model's own bn and fc, built
    per forward pass and never attached to the model, so its names do not enter the model's."""

    def __init__(self, bn: nn.BatchNorm2d, fc: nn.Linear):
        super().__init__()
        self.bn, self.fc = bn, fc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn(x))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out.to(self.fc.weight.dtype))


def _run_segment(segment: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    for module in segment:
        x = module(x)
    return x


def _run_nested(segment: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    for module in segment:
        x = run_checkpointed(module, [module], x)
    return x
