"""Dynamic sparse reparameterization (Mostafa & Wang, ICML 2019), as Sohoni et al. train it.

A fixed number of nonzeros lives in the sparse layers. Every rewiring period the active weights
whose magnitude is under a global adaptive threshold H are pruned, and exactly as many zero
positions are regrown, split across layers in proportion to each layer's surviving nonzeros;
regrown weights start at exactly 0. H halves when more than 1.1 Np weights fell under it and
doubles when fewer than 0.9 Np did (Np: the rewiring fraction of the sparse layers' size).
Gradients and optimizer state (SGD momentum, Adam moments) share the weight's mask, so pruned
weights stay zero and carry no stale state.

Rules taken from the reference code (IntelAI/dynamic-reparameterization), stated because the
paper leaves them open:
- initial masks: the same density in every sparse layer (round(density * numel), at least one),
  at uniformly random positions;
- regrowth picks positions that were zero before this rewiring (the just-pruned ones are excluded,
  as the reference's `grow_random` does); only when there is no other room left (densities near 1)
  does it fall back to just-pruned positions;
- a layer is never emptied: if all its active weights fall under H, its largest one survives;
- rewiring happens after update u when u > 0 and u % period == 0; the period follows the
  schedule of `techniques.rewiring`, scaled to the run (`SparsityConfig.schedule_units`).

Masks are bool tensors kept here, not buffers of the model, so `model.state_dict()` keeps the
dense model's keys; they follow the parameters to whatever device they are moved to.

The memory profiler counts a sparse weight as it would be stored: CSR over the weight's 2-D view
(shape[0] rows by prod(shape[1:]) columns), with column indices in the smallest unsigned type
that holds a row's column count (uint16 up to 65,536 columns, which covers every sparse layer of
both tasks, else int32) and int32 row pointers (`sparse_storage_bytes`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..config import STORAGE_LAYOUTS, SparsityConfig
from .base import Technique
from .rewiring import RunLength, rewires_after, rewiring_period

# Sohoni et al. A.3.1: Np = 20,000 of WRN-28-2's 1,451,520 sparse weights. The transformer uses
# the same fraction of its own sparse weights (the paper changes only its periods), and so does
# every other task unless `sparsity.fraction` says otherwise.
DEFAULT_FRACTION = 0.01377866
# The mask positions come from their own stream, apart from the one that initialised the weights.
MASK_SEED_OFFSET = 1_000_003

# Index storage the profiler assumes for a sparse weight: CSR over its 2-D view (the paper's),
# or a bitmap (`sparse_storage_bytes` layouts).
UINT16_COLUMNS = 2**16  # the most columns whose indices 0 .. columns - 1 fit in a uint16
ROW_POINTER_BYTES = 4  # int32


def column_index_bytes(columns: int) -> int:
    """Bytes of one column index: the smallest unsigned type holding 0 .. columns - 1 (uint16 up
    to 65,536 columns, else int32, as index arrays rarely come in 3-byte types)."""
    return 2 if columns <= UINT16_COLUMNS else 4


def sparse_storage_bytes(
    numel_nonzero: int, shape: Sequence[int], value_bytes: int, layout: str = "csr"
) -> int:
    """Bytes of one sparse weight in `layout` (STORAGE_LAYOUTS). csr (the paper's): CSR over the
    weight viewed as shape[0] rows by prod(shape[1:]) columns; the nonzero values, one column
    index per nonzero (`column_index_bytes`: uint16 for up to 65,536 columns, else int32),
    shape[0] + 1 int32 row pointers. bitmap: the nonzero values and one bit per position. best:
    the smaller of the two (bitmap wins above about 1/8 / index bytes of density, e.g. 6% with
    uint16 indices). Its gradient and optimizer state share the pattern, so they need values
    only (numel_nonzero * value_bytes each)."""
    if layout not in STORAGE_LAYOUTS:
        raise ValueError(
            f"layout: {layout!r} is not allowed; allowed: {', '.join(STORAGE_LAYOUTS)}"
        )
    rows = shape[0] if len(shape) else 1
    column_bytes = column_index_bytes(math.prod(shape[1:]))
    csr = numel_nonzero * (value_bytes + column_bytes) + (rows + 1) * ROW_POINTER_BYTES
    bitmap = numel_nonzero * value_bytes + math.ceil(math.prod(shape) / 8)
    return {"csr": csr, "bitmap": bitmap, "best": min(csr, bitmap)}[layout]


@dataclass(frozen=True)
class LayerStats:
    """One sparse weight, as the memory profiler counts it."""

    name: str
    shape: tuple[int, ...]
    numel: int
    nonzeros: int  # active positions of the mask (regrown weights count even while still 0)


# ---- pure pieces: the split of regrowth --------------------------------------------------------


def apportion(total: int, weights: Sequence[int], capacity: Sequence[int]) -> list[int]:
    """Split `total` in proportion to `weights` by largest remainders (ties: lower index), none
    over its `capacity`; what a full entry cannot take is split again among the others."""
    if total > sum(capacity):
        raise ValueError(f"cannot place {total} among capacities summing to {sum(capacity)}")
    shares = [0] * len(weights)
    remaining = total
    while remaining > 0:
        room = [c - s for c, s in zip(capacity, shares)]
        open_weights = [w if r > 0 else 0 for w, r in zip(weights, room)]
        if sum(open_weights) == 0:  # only entries without weight have room left
            open_weights = room
        weight_sum = sum(open_weights)
        quotas = [divmod(remaining * w, weight_sum) for w in open_weights]
        round_shares = [q for q, _ in quotas]
        by_remainder = sorted(range(len(quotas)), key=lambda i: (-quotas[i][1], i))
        for i in by_remainder[: remaining - sum(round_shares)]:
            round_shares[i] += 1
        for i, share in enumerate(round_shares):
            taken = min(share, room[i])
            shares[i] += taken
            remaining -= taken
    return shares


def planned_nonzeros(density: float, shapes: dict[str, torch.Size]) -> dict[str, int]:
    """Nonzeros per sparse weight at `density`, the same in every layer, at least one."""
    return {name: max(1, round(density * math.prod(shape))) for name, shape in shapes.items()}


def initial_masks(
    shapes: dict[str, torch.Size], density: float, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """The same density in every layer, at uniformly random positions (the reference's rule)."""
    masks, counts = {}, planned_nonzeros(density, shapes)
    for name, shape in shapes.items():
        numel = math.prod(shape)
        mask = torch.zeros(numel, dtype=torch.bool)
        mask[torch.randperm(numel, generator=generator)[: counts[name]]] = True
        masks[name] = mask.view(shape)
    return masks


def _read_sums(masks: list[torch.Tensor]) -> list[int]:
    """Each mask's count of True, read on the host with one sync for all of them."""
    return torch.stack([mask.sum() for mask in masks]).tolist() if masks else []


# ---- the technique --------------------------------------------------------------------------


class DynamicSparsity:
    """Masks for a model's sparse weights and the rewiring that moves them during training.

    Hooks, in training-step order: `attach(optimizer)` once the optimizer exists (from then on
    each gradient is masked as it accumulates in backward), then `after_step(epoch, update)`
    after each `optimizer.step()`.
    """

    def __init__(
        self,
        model: nn.Module,
        names: Sequence[str],
        sparsity: SparsityConfig,
        run: RunLength,
        *,
        seed: int = 0,
    ):
        if not names:
            raise ValueError(f"sparsity: {type(model).__name__} has no weights to make sparse")
        self.model = model
        self.names = list(names)
        self.sparsity = sparsity
        self.run = run
        self.generator = torch.Generator().manual_seed(seed + MASK_SEED_OFFSET)
        shapes = {name: model.get_parameter(name).shape for name in self.names}
        self.masks = initial_masks(shapes, sparsity.density, self.generator)
        self.sparse_numel = sum(mask.numel() for mask in self.masks.values())
        self.target_nonzeros = sum(int(mask.sum()) for mask in self.masks.values())
        fraction = sparsity.fraction if sparsity.fraction is not None else DEFAULT_FRACTION
        self.target_pruned = max(
            1, round(fraction * sparsity.fraction_multiplier * self.sparse_numel)
        )
        self.threshold = sparsity.initial_threshold
        self.rewirings = 0
        self.last_pruned = 0
        self.period: int | None = rewiring_period(sparsity, run, 0, 0)
        self.optimizer: torch.optim.Optimizer | None = None
        self.apply_masks()

    # ---- training-step hooks ------------------------------------------------------------------

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Mask this optimizer's state (every state tensor shaped like its weight) from now on,
        and each gradient as it accumulates (a post-accumulate-grad hook), so that an update
        applied inside the backward pass (`techniques.fused_step`) sees it masked too."""
        self.optimizer = optimizer
        for name, param in self._layers():
            param.register_post_accumulate_grad_hook(functools.partial(self._mask_gradient, name))

    @torch.no_grad()
    def _mask_gradient(self, name: str, param: nn.Parameter) -> None:
        param.grad.mul_(self._mask(name, param))

    @torch.no_grad()
    def after_step(self, epoch: int, update: int) -> None:
        """Rewire when the schedule says so. Between rewirings nothing needs re-masking: with
        masked gradients an update leaves zero weights and zero optimizer state at zero (SGD
        with momentum and weight decay, Adam, AdamW, fairseq's Adam, stochastic bf16 rounding),
        and a rewiring zeroes what it prunes."""
        self.period = rewiring_period(self.sparsity, self.run, epoch, update)
        if rewires_after(self.sparsity, self.run, epoch, update):
            self.rewire()

    @torch.no_grad()
    def apply_masks(self) -> None:
        for name, param in self._layers():
            self._zero_outside(param, self._mask(name, param))

    # ---- rewiring -----------------------------------------------------------------------------

    @torch.no_grad()
    def rewire(self) -> int:
        """Prune active weights under H, regrow as many at zero positions, adapt H; returns the
        count. Everything outside the new masks is zero afterwards (weights, gradients, state)."""
        layers = self._layers()
        masks = [self._mask(name, param) for name, param in layers]
        smalls = [mask & (p.detach().abs() < self.threshold) for mask, (_, p) in zip(masks, layers)]
        counts = _read_sums([*masks, *smalls])  # one host read for every layer
        pruned_masks, pruned, survivors, fresh_room = [], [], [], []
        for index, (_, param) in enumerate(layers):
            mask, small = masks[index], smalls[index]
            active, count = counts[index], counts[len(layers) + index]
            if count and count == active:  # never empty a layer: its largest weight survives
                small.view(-1)[torch.where(mask, param.detach().abs(), -1).argmax()] = False
                count -= 1
            self._zero_outside(param, mask & ~small)
            pruned_masks.append(small)
            pruned.append(count)
            survivors.append(active - count)
            fresh_room.append(mask.numel() - active)
        total = sum(pruned)
        fresh = min(total, sum(fresh_room))
        grow_fresh = apportion(fresh, survivors, fresh_room)
        grow_back = apportion(total - fresh, survivors, pruned)
        for (name, _), small, n_fresh, n_back in zip(layers, pruned_masks, grow_fresh, grow_back):
            mask = self.masks[name]
            grown = mask & ~small
            grown.view(-1)[self._sample(~mask, n_fresh)] = True
            grown.view(-1)[self._sample(small, n_back)] = True
            self.masks[name] = grown
        self._adapt_threshold(total)
        self.rewirings += 1
        self.last_pruned = total
        return total

    def _adapt_threshold(self, pruned: int) -> None:
        if pruned > 1.1 * self.target_pruned:
            self.threshold /= 2
        elif pruned < 0.9 * self.target_pruned:
            self.threshold *= 2

    def _sample(self, candidates: torch.Tensor, count: int) -> torch.Tensor:
        """`count` uniformly random flat positions among the True ones of `candidates`."""
        positions = candidates.reshape(-1).nonzero().squeeze(1)
        if count == 0:
            return positions[:0]
        chosen = torch.randperm(positions.numel(), generator=self.generator)[:count]
        return positions[chosen.to(positions.device)]

    # ---- plumbing -----------------------------------------------------------------------------

    def _layers(self) -> list[tuple[str, nn.Parameter]]:
        """Looked up by name each time, so casting or moving the model cannot leave stale handles."""
        return [(name, self.model.get_parameter(name)) for name in self.names]

    def _mask(self, name: str, param: torch.Tensor) -> torch.Tensor:
        mask = self.masks[name]
        if mask.device != param.device:
            mask = self.masks[name] = mask.to(param.device)
        return mask

    def _zero_outside(self, param: nn.Parameter, mask: torch.Tensor) -> None:
        """Zero the weight, its gradient and its optimizer state where `mask` is False."""
        state = self.optimizer.state.get(param, {}) if self.optimizer is not None else {}
        for tensor in (param, param.grad, *state.values()):
            if torch.is_tensor(tensor) and tensor.shape == param.shape:
                tensor.mul_(mask)

    # ---- reporting and checkpoints ------------------------------------------------------------

    def layer_stats(self) -> list[LayerStats]:
        counts = _read_sums(list(self.masks.values()))
        return [
            LayerStats(name, tuple(mask.shape), mask.numel(), count)
            for (name, mask), count in zip(self.masks.items(), counts)
        ]

    def nonzeros(self) -> int:
        return sum(_read_sums(list(self.masks.values())))

    def metrics(self) -> dict[str, float]:
        nonzeros = self.nonzeros()
        return {
            "sparsity_density": nonzeros / self.sparse_numel,
            "sparsity_nonzeros": float(nonzeros),
            "sparsity_threshold": self.threshold,
            "sparsity_last_pruned": float(self.last_pruned),
            "sparsity_rewirings": float(self.rewirings),
            "sparsity_period": float(self.period) if self.period is not None else math.nan,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "masks": {name: mask.cpu().clone() for name, mask in self.masks.items()},
            "threshold": self.threshold,
            "rewirings": self.rewirings,
            "last_pruned": self.last_pruned,
            "rng": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        masks = state["masks"]
        if set(masks) != set(self.masks) or any(
            masks[n].shape != m.shape for n, m in self.masks.items()
        ):
            raise ValueError(
                "sparsity: the checkpoint's masks do not match this model's sparse weights"
            )
        self.masks = {
            name: masks[name].to(self.masks[name].device, torch.bool) for name in self.names
        }
        self.threshold = state["threshold"]
        self.rewirings = state["rewirings"]
        self.last_pruned = state["last_pruned"]
        self.generator.set_state(state["rng"])
        self.apply_masks()


class Sparsity(Technique):
    """The `sparsity` section: `DynamicSparsity` over the weights the task names
    (`Task.sparse_parameter_names`), with the task's rewiring-period scale."""

    NAME = "sparsity"

    def __init__(self, config, task):
        super().__init__(config, task)
        self.engine: DynamicSparsity | None = None

    @classmethod
    def enabled(cls, config) -> bool:
        return config.sparsity.enabled

    @classmethod
    def validate(cls, config, task) -> None:
        """Field checks are the section's own; which weights exist is known once a model does."""

    @classmethod
    def shape_settings(cls, config) -> dict[str, Any]:
        return {}  # masked weights are computed densely: the step's tensors do not change

    @classmethod
    def off_metrics(cls, config) -> dict[str, float]:
        return {"sparsity_rewirings": 0.0}  # every trial says how often it rewired

    @classmethod
    def accounted_nonzeros(cls, config, task, model: nn.Module) -> dict[str, int]:
        if not config.sparsity.enabled:
            return {}
        names = task.sparse_parameter_names(model)
        shapes = {name: model.get_parameter(name).shape for name in names}
        return planned_nonzeros(config.sparsity.density, shapes)

    def apply(self, model: nn.Module) -> nn.Module:
        self.engine = DynamicSparsity(
            model,
            self.task.sparse_parameter_names(model),
            self.config.sparsity,
            RunLength.of(self.config, self.task),
            seed=self.config.seed,
        )
        return model

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        self.engine.attach(optimizer)

    def after_step(self, epoch: int, update: int) -> None:
        self.engine.after_step(epoch, update)

    def metrics(self) -> dict[str, float]:
        return self.engine.metrics()

    def held_tensors(self) -> list[torch.Tensor]:
        return list(self.engine.masks.values())

    def stored_nonzeros(self) -> dict[str, int]:
        return {stats.name: stats.nonzeros for stats in self.engine.layer_stats()}

    def state_dict(self) -> dict[str, Any]:
        return self.engine.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.engine.load_state_dict(state)
