"""Dynamic sparse reparameterization (Mostafa & Wang, ICML 2019), as Sohoni et al. train it,
with the sparse layers held packed (`techniques.packed`).

A fixed number of nonzeros lives in the sparse layers. Every rewiring period the active weights
whose magnitude is under a global adaptive threshold H are pruned, and exactly as many zero
positions are regrown, split across layers in proportion to each layer's surviving nonzeros;
regrown weights start at exactly 0. H halves when more than 1.1 Np weights fell under it and
doubles when fewer than 0.9 Np did (Np: the rewiring fraction of the sparse layers' size).

Each sparse layer keeps only its nonzero values (its `weight` parameter, so its gradient and
optimizer state hold the nonzeros only) and their positions in `sparsity.storage`'s layout; the
dense weight is built while the layer computes. A rewiring moves each layer's values, gradient
and optimizer state to their new slots (the count, and so every shape, stays): kept weights keep
their values and state, regrown ones start at 0 with zero state.

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

The paper's accounting counts a sparse weight as CSR over its 2-D view
(`packed.sparse_storage_bytes`), which is what a csr-packed layer holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from . import blockwise, packed, rewiring, rewiring_checks, sparsity_config
from .adam_state import QUANTIZED
from .base import EVERY, Technique
from .packed import dense_shape, layer_of, pack_layer
from .rewiring import (
    RunLength,
    planned_first_rewiring,
    rewires,
    rewires_after,
    rewiring_period,
)
from .sparsity_config import SparsityConfig

# Sohoni et al. A.3.1: Np = 20,000 of WRN-28-2's 1,451,520 sparse weights. The transformer uses
# the same fraction of its own sparse weights (the paper changes only its periods), and so does
# every other task unless `sparsity.fraction` says otherwise.
DEFAULT_FRACTION = 0.01377866
# The mask positions come from their own stream, apart from the one that initialised the weights.
MASK_SEED_OFFSET = 1_000_003


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


def choose(population: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """`count` distinct ranks drawn uniformly from range(population) (int64, on the CPU), in
    O(count) memory: from a small population a permutation's head; else independent uniform
    draws until `count` distinct ones, and a random `count` of those. The distinct values of
    independent uniform draws, given how many there are, are any set of that size alike, so the
    result is a uniform `count`-subset."""
    if population <= 4 * count:
        return torch.randperm(population, generator=generator)[:count]
    drawn = torch.empty(0, dtype=torch.int64)
    while drawn.numel() < count:
        more = torch.randint(population, (2 * (count - drawn.numel()),), generator=generator)
        drawn = torch.cat([drawn, more]).unique()
    return drawn[torch.randperm(drawn.numel(), generator=generator)[:count]]


def initial_positions(
    shapes: dict[str, torch.Size], density: float, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """Each layer's sorted flat positions: the same density in every layer, at uniformly random
    positions (the reference's rule)."""
    counts = planned_nonzeros(density, shapes)
    return {
        name: choose(math.prod(shape), counts[name], generator).sort().values
        for name, shape in shapes.items()
    }


def zero_positions(positions: torch.Tensor, ranks: torch.Tensor) -> torch.Tensor:
    """The flat positions of the zeros of rank `ranks` (0: the first position not in the sorted
    `positions`): zero r lies past the nonzeros whose position less their index is <= r."""
    gaps = positions - torch.arange(positions.numel(), device=positions.device)
    return torch.searchsorted(gaps, ranks, right=True).add_(ranks)


def _count_under(values: list[torch.Tensor], threshold: float) -> list[int]:
    """How many of each tensor's magnitudes are under `threshold`, read on the host with one sync
    for all of them; each comparison is freed before the next is made."""
    return torch.stack([(v.abs() < threshold).sum() for v in values]).tolist() if values else []


# ---- the technique --------------------------------------------------------------------------


class DynamicSparsity:
    """A model's sparse weights, packed, and the rewiring that moves them during training.

    Hooks, in training-step order: `attach(optimizer)` once the optimizer exists (rewiring moves
    its state), then `after_step(epoch, update)` after each `optimizer.step()`.

    The three methods under "the layers' storage" are all that know how a layer holds its
    weight; a subclass holding them another way (the masked dense reference of the exactness
    tests) shares the masks, the threshold and the rewiring's random draws.
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
        positions = initial_positions(shapes, sparsity.density, self.generator)
        self.sparse_numel = sum(math.prod(shape) for shape in shapes.values())
        self.target_nonzeros = sum(planned_nonzeros(sparsity.density, shapes).values())
        fraction = sparsity.fraction if sparsity.fraction is not None else DEFAULT_FRACTION
        self.target_pruned = max(
            1, round(fraction * sparsity.fraction_multiplier * self.sparse_numel)
        )
        self.threshold = sparsity.initial_threshold
        self.rewirings = 0
        self.last_pruned = 0
        self.period: int | None = rewiring_period(sparsity, run, 0, 0)
        self.optimizer: torch.optim.Optimizer | None = None
        self.store(positions)

    # ---- training-step hooks ------------------------------------------------------------------

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer whose state a rewiring moves with the weights."""
        self.optimizer = optimizer

    @torch.no_grad()
    def after_step(self, epoch: int, update: int) -> None:
        """Rewire when the schedule says so."""
        self.period = rewiring_period(self.sparsity, self.run, epoch, update)
        if self.rewires_after(epoch, update):
            self.rewire()

    def rewires_after(self, epoch: int, update: int) -> bool:
        return rewires_after(self.sparsity, self.run, epoch, update)

    # ---- rewiring -----------------------------------------------------------------------------

    @torch.no_grad()
    def rewire(self) -> int:
        """Prune active weights under H, regrow as many at zero positions, adapt H; returns the
        count. Regrown weights and their state are zero afterwards; the layers' gradients are
        dropped (`move`)."""
        values = [self.values(name).detach() for name in self.names]
        counts = _count_under(values, self.threshold)  # one host read for every layer
        sizes = [value.numel() for value in values]
        del values  # a layer's old values go as soon as it moves, not when every layer has
        # never empty a layer: if all its weights fall under H, its largest one survives
        spared = [0 < count == size for count, size in zip(counts, sizes)]
        pruned = [count - spare for count, spare in zip(counts, spared)]
        survivors = [size - count for size, count in zip(sizes, pruned)]
        numels = [math.prod(shape) for shape in self.dense_shapes()]
        fresh_room = [numel - size for numel, size in zip(numels, sizes)]
        total = sum(pruned)
        fresh = min(total, sum(fresh_room))
        grow_fresh = apportion(fresh, survivors, fresh_room)
        grow_back = apportion(total - fresh, survivors, pruned)
        for name, *layer in zip(self.names, numels, spared, grow_fresh, grow_back):
            self._regrow(name, *layer)
        self._adapt_threshold(total)
        self.rewirings += 1
        self.last_pruned = total
        return total

    def _adapt_threshold(self, pruned: int) -> None:
        if pruned > 1.1 * self.target_pruned:
            self.threshold /= 2
        elif pruned < 0.9 * self.target_pruned:
            self.threshold *= 2

    def _regrow(self, name: str, numel: int, spare: bool, fresh: int, back: int) -> None:
        """Prune one layer's weights under H (all but its largest when `spare`) and regrow
        `fresh` of its zero positions and `back` of the pruned ones, on positions alone: no
        dense tensor, and at most three index arrays of the nonzeros alive at once (old
        positions and kept ones; kept ones, their new slots and the new positions; the new
        positions, the slots moved from and to)."""
        magnitudes = self.values(name).detach().abs()
        small = magnitudes < self.threshold
        if spare:
            small[magnitudes.argmax()] = False
        del magnitudes
        old = self.positions(name)
        device = old.device

        def draw(population: int, count: int) -> torch.Tensor:
            return choose(population, count, self.generator).to(device)

        pruned = old[small]
        fresh_at = zero_positions(old, draw(numel - old.numel(), fresh))
        grown = torch.cat([fresh_at, pruned[draw(pruned.numel(), back)]]).sort().values
        # a regrown weight's slot: after the kept weights and the regrown ones before it
        slots = torch.searchsorted(old, grown).sub_(torch.searchsorted(pruned, grown))
        slots += torch.arange(grown.numel(), device=device)
        keep = small.logical_not()
        kept = old[keep]
        del old, pruned, fresh_at
        free = torch.ones(kept.numel() + grown.numel(), dtype=torch.bool, device=device)
        free[slots] = False
        target = free.nonzero()[:, 0]  # the kept weights' slots, in order
        del free
        new = kept.new_empty(kept.numel() + grown.numel())
        new[target], new[slots] = kept, grown
        del kept
        self.move(name, keep.nonzero()[:, 0], target, new)

    # ---- the layers' storage ------------------------------------------------------------------

    def store(self, positions: dict[str, torch.Tensor]) -> None:
        """Keep each sparse weight at its initial positions: packed."""
        for name, where in positions.items():
            pack_layer(self.layer(name), where, self.sparsity.storage)

    def values(self, name: str) -> torch.Tensor:
        """The active weights of one layer, in row-major position order."""
        return self.layer(name).weight

    def positions(self, name: str) -> torch.Tensor:
        """The sorted flat positions (int64) of one layer's active weights."""
        return self.layer(name).positions()

    def mask(self, name: str) -> torch.Tensor:
        """The dense bool mask of one layer's active positions (a transient tensor, to inspect)."""
        return self.layer(name).mask()

    def move(self, name: str, source: torch.Tensor, target: torch.Tensor, new: torch.Tensor):
        """Point one layer at the sorted positions `new`: the weights and optimizer state in
        slots `source` move to slots `target`, the others are 0. A layer's count changes when
        regrowth lands elsewhere than pruning did (the total stays): the parameter object stays
        (so the optimizer, its hooks and its state keys hold), its data and state are replaced
        by tensors of the new count. Its gradient is dropped, not moved: the step has used it
        and the next one starts from none (`Trainer.train_step` clears gradients first), so a
        moved copy would only hold a second gradient's bytes while the old one lives."""
        layer = self.layer(name)

        def moved(tensor: torch.Tensor) -> torch.Tensor:
            result = tensor.new_zeros(new.numel())
            result[target] = tensor[source]
            return result

        param = layer.weight
        param.grad = None
        state = self.optimizer.state.get(param, {}) if self.optimizer is not None else {}
        shaped = [k for k, v in state.items() if torch.is_tensor(v) and v.shape == param.shape]
        for key, code in QUANTIZED:  # 8-bit moments: moved as values, requantized in new blocks
            if key + blockwise.SCALES in state:
                values = moved(code.dequantize(state[key], state[key + blockwise.SCALES]))
                state[key] = torch.zeros_like(values, dtype=torch.uint8)
                state[key + blockwise.SCALES] = values.new_zeros(blockwise.blocks(new.numel()))
                code.quantize_(values, state[key], state[key + blockwise.SCALES])
                shaped.remove(key)
        for key in shaped:
            state[key] = moved(state[key])
        param.data = moved(param.data)
        layer.set_index(new)

    # ---- plumbing -----------------------------------------------------------------------------

    def layer(self, name: str) -> nn.Module:
        """The module holding weight `name`, looked up each time (casts and moves replace it)."""
        return layer_of(self.model, name)

    def dense_shapes(self) -> list[tuple[int, ...]]:
        return [dense_shape(self.model, name) for name in self.names]

    # ---- reporting and checkpoints ------------------------------------------------------------

    def layer_stats(self) -> list[LayerStats]:
        return [
            LayerStats(name, shape, math.prod(shape), self.values(name).numel())
            for name, shape in zip(self.names, self.dense_shapes())
        ]

    def nonzeros(self) -> int:
        return sum(self.values(name).numel() for name in self.names)

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
        """The rewiring's own state; the positions are the packed layers' buffers, in the
        model's state_dict."""
        return {
            "threshold": self.threshold,
            "rewirings": self.rewirings,
            "last_pruned": self.last_pruned,
            "rng": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.threshold = state["threshold"]
        self.rewirings = state["rewirings"]
        self.last_pruned = state["last_pruned"]
        self.generator.set_state(state["rng"])


class Sparsity(Technique):
    """The `sparsity` section: `DynamicSparsity` over the weights the task names
    (`Task.sparse_parameter_names`), with the task's rewiring-period scale."""

    NAME = "sparsity"
    SETTINGS = sparsity_config.SETTINGS
    EXACT: ClassVar = {"sparsity.storage": EVERY}  # a layout changes only the counted memory
    TASK_NEEDS: ClassVar = rewiring.TASK_NEEDS

    def __init__(self, config, task):
        super().__init__(config, task)
        self.engine: DynamicSparsity | None = None

    @classmethod
    def portable_state(cls, state):
        """Packed weights densified, their index buffers dropped (`packed.dense_state_dict`)."""
        return packed.dense_state_dict(state)

    @classmethod
    def enabled(cls, config) -> bool:
        return config.sparsity.enabled

    @classmethod
    def validate(cls, config, task) -> None:
        """Field checks are the section's own; which weights exist is known once a model does."""

    @classmethod
    def check_space(cls, probes, base, limit) -> None:
        """A space whose rewiring schedule never rewires (or rewires too often) is refused."""
        rewiring_checks.check_space(probes, base, limit)

    @classmethod
    def shape_settings(cls, config) -> dict[str, Any]:
        """Packed layers hold (and build transiently) tensors sized by the density and layout."""
        if not config.sparsity.enabled:
            return {}
        return {
            "sparsity.density": config.sparsity.density,
            "sparsity.storage": config.sparsity.storage,
        }

    @classmethod
    def off_metrics(cls, config) -> dict[str, float]:
        return {"sparsity_rewirings": 0.0}  # every trial says how often it rewired

    @classmethod
    def weight_bytes(cls, model: nn.Module, layout: str | None = None) -> dict[str, int]:
        """Its packed layers: values and index (`packed.weight_bytes`)."""
        return packed.weight_bytes(model, layout)

    @classmethod
    def occasional_work(cls, config) -> bool:
        """A rewiring: it builds the new positions and moves values and state beside the step's
        tensors."""
        return rewires(config)

    @classmethod
    def peak_updates(cls, config) -> list[int]:
        """For a run that rewires: its first update, a plain step (the step after the warm-up
        may itself rewire, and a rewiring drops the sparse layers' gradients), and its first
        rewiring update."""
        first = planned_first_rewiring(config)
        return [] if first is None else [0, first]

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

    def works_after(self, epoch: int, update: int) -> bool:
        """A rewiring follows this update."""
        return self.engine.rewires_after(epoch, update)

    def metrics(self) -> dict[str, float]:
        return self.engine.metrics()

    def run_occasional_work(self) -> None:
        self.engine.rewire()

    def state_dict(self) -> dict[str, Any]:
        return self.engine.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.engine.load_state_dict(state)
