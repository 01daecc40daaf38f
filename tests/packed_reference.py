"""The reference that packed sparse training is checked against: masked dense training, a dense
weight with a bool mask per sparse layer and gradients masked as they accumulate, as the project
trained before its sparse layers were packed. It shares the rewiring's decisions (masks,
threshold, random draws) with `DynamicSparsity` and differs only in how a layer holds its weight.
"""

from __future__ import annotations

import functools
import itertools

import torch

from tune_lowmem.memory.synthetic import synthetic_task
from tune_lowmem.techniques import sparsity as sparsity_module
from tune_lowmem.techniques.packed import PackedLayer, scatter
from tune_lowmem.train import Trainer


class MaskedDense(sparsity_module.DynamicSparsity):
    """Dense weights zero outside their masks; gradients and optimizer state masked likewise."""

    def store(self, positions):
        self.masks = {name: self._mask(name, where) for name, where in positions.items()}
        with torch.no_grad():
            for name, mask in self.masks.items():
                self.model.get_parameter(name).mul_(mask)

    def _mask(self, name, positions):
        """The dense bool mask of `name` that is True at `positions`."""
        shape = self.model.get_parameter(name).shape
        mask = torch.zeros(shape.numel(), dtype=torch.bool, device=positions.device)
        return mask.index_fill_(0, positions, True).view(shape)

    def attach(self, optimizer):
        super().attach(optimizer)
        for name in self.names:
            param = self.model.get_parameter(name)
            param.register_post_accumulate_grad_hook(functools.partial(self._mask_gradient, name))

    @torch.no_grad()
    def _mask_gradient(self, name, param):
        param.grad.mul_(self.masks[name].to(param.device))

    def values(self, name):
        param = self.model.get_parameter(name)
        return param.detach().reshape(-1)[self.mask(name).reshape(-1)]

    def positions(self, name):
        return self.masks[name].reshape(-1).nonzero()[:, 0]

    def mask(self, name):
        return self.masks[name]

    @torch.no_grad()
    def move(self, name, source, target, new):
        kept = self._mask(name, self.positions(name)[source])
        param = self.model.get_parameter(name)
        state = self.optimizer.state.get(param, {})
        param.grad = None  # as the packed layer drops it
        for tensor in (param, *state.values()):
            if torch.is_tensor(tensor) and tensor.shape == param.shape:
                tensor.mul_(kept)
        self.masks[name] = self._mask(name, new)


def trainer(config, reference: bool, monkeypatch) -> Trainer:
    """A trainer of `config` on its synthetic task (random minibatches of the real shapes),
    packed, or with the masked dense reference in place of packing."""
    with monkeypatch.context() as patch:
        if reference:
            patch.setattr(sparsity_module, "DynamicSparsity", MaskedDense)
        return Trainer(config, task=synthetic_task(config, torch.device("cpu")))


def minibatches(config, count: int) -> list:
    task = synthetic_task(config, torch.device("cpu"))
    epochs = map(task.train_batches, itertools.count())
    return list(itertools.islice(itertools.chain.from_iterable(epochs), count))


def dense_views(trainer: Trainer) -> dict[str, torch.Tensor]:
    """Every parameter, gradient, optimizer-state tensor and buffer of a trainer, by name, with
    packed ones scattered to their dense shape."""
    views = {}
    model, state = trainer.model, trainer.optimizer.state
    for name, param in model.named_parameters():
        layer = model.get_submodule(name.rpartition(".")[0])
        packed = isinstance(layer, PackedLayer) and name.endswith("weight")

        def dense(tensor, layer=layer, packed=packed):
            if not packed or tensor.shape != layer.weight.shape:
                return tensor
            return scatter(tensor, layer.positions(), layer.dense_shape)

        views[name] = dense(param.detach())
        if packed:
            views[f"{name}:mask"] = layer.mask()
        if param.grad is not None:
            views[f"{name}:grad"] = dense(param.grad)
        for key, value in state.get(param, {}).items():
            if torch.is_tensor(value):
                views[f"{name}:{key}"] = dense(value)
    for name, buffer in model.named_buffers():
        if not name.rpartition(".")[2].startswith("weight_"):  # packed index buffers
            views[name] = buffer
    return views


def reference_views(trainer: Trainer) -> dict[str, torch.Tensor]:
    views = dense_views(trainer)
    engine = trainer.technique(sparsity_module.Sparsity).engine
    for name, mask in engine.masks.items():
        views[f"{name}:mask"] = mask
    return views


# Within rounding: the arithmetic differs only in where an elementwise kernel rounds (its vector
# body or its scalar tail, fused multiply-add or not), so a result moves by a rounding at its own
# magnitude, at most the tensor's largest, and a few updates carry a few such roundings. Measured
# on an AMD EPYC (no AVX-512): at most 1.5 ulps at a tensor's scale, on 2 of 160,302 elements
# (fp16) and 1 of 156,180 (bf16); so at most ULPS_AT_SCALE ulps of the dtype at the tensor's
# largest magnitude, on every element.
ULPS_AT_SCALE = 4


def ulp_at_scale(tensor: torch.Tensor, computed_in: torch.dtype | None = None) -> float:
    """One ulp at `tensor`'s largest magnitude (the gap to the next float up) of its dtype, or
    of `computed_in` where that is coarser: the precision its values were computed in."""
    largest = tensor.detach().abs().max().reshape(1)
    if computed_in is not None and torch.finfo(computed_in).eps > torch.finfo(largest.dtype).eps:
        largest = largest.clamp(max=torch.finfo(computed_in).max).to(computed_in)
    return float(torch.nextafter(largest, torch.full_like(largest, float("inf"))) - largest)


def differences(
    packed: dict, reference: dict, exact: bool, computed_in: torch.dtype | None = None
) -> list[str]:
    """Names whose tensors differ (bitwise, or when not `exact`, floats on an element by more
    than `ULPS_AT_SCALE` ulps at the tensor's scale, counted in `computed_in`'s ulps where the
    values came from that coarser precision), each with its largest difference."""
    assert packed.keys() == reference.keys(), set(packed) ^ set(reference)
    wrong = []
    for name, ours in packed.items():
        theirs = reference[name]
        if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
            wrong.append(
                f"{name}: {ours.dtype}{list(ours.shape)} != {theirs.dtype}{list(theirs.shape)}"
            )
        elif exact or not ours.is_floating_point() or ours.numel() == 0:
            if not torch.equal(ours, theirs):
                wrong.append(name)
        else:
            largest = (ours.double() - theirs.double()).abs().max().item()
            scale = torch.stack([ours.abs().max(), theirs.abs().max()])
            ulps = largest / ulp_at_scale(scale, computed_in)
            if ulps > ULPS_AT_SCALE:
                wrong.append(f"{name}: {ulps:.1f} ulps at its scale")
    return wrong
