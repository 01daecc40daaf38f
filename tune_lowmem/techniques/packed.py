"""Sparse layers held packed: the nonzero values and their indices, the dense weight only while the
layer computes.

`pack_layer` turns a `nn.Linear`, `nn.Conv1d` or `nn.Conv2d` into its packed form in place (its
class becomes `PackedLinear` / `PackedConv1d` / `PackedConv2d`, subclasses of the originals, so
geometry attributes, module and parameter names stay): `weight` becomes an `nn.Parameter` of the
nonzero values in row-major position order, so its gradient and every optimizer-state buffer the
optimizer keeps for it (momentum, Adam moments, Kahan compensation, 8-bit blocks) hold the
nonzeros only. The positions are buffers of the module in one of `sparsity_config.STORAGE_LAYOUTS`:

- csr: `weight_columns` (uint16 when a row has at most 65,536 columns, else int32) and
  `weight_rows` (int32 row pointers) over the weight viewed as shape[0] rows;
- bitmap: `weight_bitmap`, one bit per position (uint8, little-endian bit order);
- best: whichever of the two is smaller for the layer (`sparse_storage_bytes`);

plus `weight_shape` (int64), so a checkpoint densifies without the model (`dense_state_dict`).

The layer's forward is `PackedOp`, an autograd Function: forward scatters the values into a dense
weight, runs the convolution or linear map, and saves only the input and the packed values;
backward rebuilds the dense weight, computes the input gradient and the weight gradient with
the kernels torch's own autograd calls (`models.conv_grad`) and gathers the weight gradient at the
nonzeros. The dense weight and its gradient exist one layer at a time (the fused BN-ReLU-conv
units call `unpacked` and `packed`: a fused block holds its convolutions' dense weights together in
its forward, one at a time in its backward). Gradient checkpointing recomputes through the same
Function.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..models.conv_grad import conv_gradients
from .sparsity_config import STORAGE_LAYOUTS

BITS = 8
SHAPE = "weight_shape"
LAYOUT_BUFFERS = {"csr": ("weight_columns", "weight_rows"), "bitmap": ("weight_bitmap",)}


UINT16_COLUMNS = 2**16  # the most columns whose indices 0 .. columns - 1 fit in a uint16
ROW_POINTER_BYTES = 4  # int32


def column_index_bytes(columns: int) -> int:
    """Bytes of one column index: the smallest unsigned type holding 0 .. columns - 1 (uint16 up
    to 65,536 columns, else int32, as index arrays rarely come in 3-byte types)."""
    return 2 if columns <= UINT16_COLUMNS else 4


def sparse_storage_bytes(
    numel_nonzero: int, shape: Sequence[int], value_bytes: int, layout: str = "csr"
) -> int:
    """Bytes of one sparse weight in `layout` (STORAGE_LAYOUTS), as a packed layer holds it.
    csr (the paper's): CSR over the weight viewed as shape[0] rows by prod(shape[1:]) columns;
    the nonzero values, one column index per nonzero (`column_index_bytes`), shape[0] + 1 int32
    row pointers. bitmap: the nonzero values and one bit per position. best: the smaller of the
    two (bitmap wins above about 1/8 / index bytes of density, e.g. 6% with uint16 indices). Its
    gradient and optimizer state share the pattern, so they need values only (numel_nonzero *
    value_bytes each)."""
    if layout not in STORAGE_LAYOUTS:
        raise ValueError(
            f"layout: {layout!r} is not allowed; allowed: {', '.join(STORAGE_LAYOUTS)}"
        )
    rows = shape[0] if len(shape) else 1
    column_bytes = column_index_bytes(math.prod(shape[1:]))
    csr = numel_nonzero * (value_bytes + column_bytes) + (rows + 1) * ROW_POINTER_BYTES
    bitmap = numel_nonzero * value_bytes + math.ceil(math.prod(shape) / 8)
    return {"csr": csr, "bitmap": bitmap, "best": min(csr, bitmap)}[layout]


def layer_layout(layout: str, nonzeros: int, shape: tuple[int, ...]) -> str:
    """The layout a layer is packed in: `layout`, or for best the smaller (csr on a tie)."""
    if layout != "best":
        return layout
    csr, bitmap = (sparse_storage_bytes(nonzeros, shape, 0, kind) for kind in ("csr", "bitmap"))
    return "csr" if csr <= bitmap else "bitmap"


def encode(positions: torch.Tensor, shape: tuple[int, ...], layout: str) -> dict[str, torch.Tensor]:
    """The index buffers in `layout` (csr or bitmap) of the sorted flat `positions` of a weight
    of `shape`, built from the positions alone (no dense mask)."""
    numel = math.prod(shape)
    if layout == "csr":
        columns = numel // shape[0]
        starts = torch.arange(shape[0] + 1, device=positions.device).mul_(columns)
        wide = column_index_bytes(columns) > 2
        return {
            "weight_columns": positions.remainder(columns).to(
                torch.int32 if wide else torch.uint16
            ),
            "weight_rows": torch.searchsorted(positions, starts, out_int32=True),
        }
    bits = (2 ** torch.arange(BITS, device=positions.device, dtype=torch.uint8))[positions % BITS]
    bitmap = torch.zeros(math.ceil(numel / BITS), dtype=torch.uint8, device=positions.device)
    return {"weight_bitmap": bitmap.index_add_(0, positions // BITS, bits)}


def positions(index: Mapping[str, torch.Tensor], shape: tuple[int, ...], nonzeros: int):
    """The flat positions (int64, ascending) that the index buffers of one layer hold. Shapes
    depend on `nonzeros` alone, so this runs on fake tensors too."""
    numel = math.prod(shape)
    if "weight_columns" in index:
        pointers = index["weight_rows"]
        rows = torch.arange(shape[0], device=pointers.device)
        row_of = torch.repeat_interleave(rows, pointers[1:] - pointers[:-1], output_size=nonzeros)
        # in place, columns widened to int32 only (uint16 does not promote): one int64 array of
        # the nonzeros alive, not four, in what is the step's peak at the layer's backward
        return row_of.mul_(numel // shape[0]).add_(index["weight_columns"].to(torch.int32))
    return torch.nonzero_static(bitmap_mask(index["weight_bitmap"], numel), size=nonzeros)[:, 0]


def bitmap_mask(bitmap: torch.Tensor, numel: int) -> torch.Tensor:
    """The flat bool mask of a bitmap."""
    shifts = torch.arange(BITS, device=bitmap.device, dtype=torch.uint8)
    return (bitmap[:, None] >> shifts).bitwise_and_(1).bool().reshape(-1)[:numel]


def scatter(values: torch.Tensor, where: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """The dense tensor of `shape` holding `values` at the flat positions `where`, zero elsewhere."""
    dense = values.new_zeros(math.prod(shape))
    return dense.index_copy_(0, where, values).view(shape)


class PackedLayer:
    """What the packed classes add to their torch layer; see the module docstring."""

    STANDS_FOR: type[nn.Module]  # the torch layer it is the packed form of (`models.layers`)

    dense_shape: tuple[int, ...]
    layout: str  # csr or bitmap (best resolved per layer)

    def index(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in LAYOUT_BUFFERS[self.layout]}

    def positions(self) -> torch.Tensor:
        return positions(self.index(), self.dense_shape, self.weight.numel())

    def mask(self) -> torch.Tensor:
        """The dense bool mask of the nonzeros (a transient tensor)."""
        flat = torch.zeros(math.prod(self.dense_shape), dtype=torch.bool, device=self.weight.device)
        return flat.index_fill_(0, self.positions(), True).view(self.dense_shape)

    def unpacked(self, values: torch.Tensor) -> torch.Tensor:
        """The dense weight of `values` (this layer's nonzeros)."""
        return scatter(values, self.positions(), self.dense_shape)

    def packed(self, dense: torch.Tensor) -> torch.Tensor:
        """A dense weight-shaped tensor (a gradient) at this layer's nonzeros."""
        return torch.take(dense, self.positions())

    def set_index(self, positions: torch.Tensor) -> None:
        """Point the layer at the sorted flat `positions` (as many as it has values)."""
        for name, tensor in encode(positions, self.dense_shape, self.layout).items():
            self.register_buffer(name, tensor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return PackedOp.apply(x, self.weight, self.bias, self)


class PackedLinear(PackedLayer, nn.Linear):
    STANDS_FOR = nn.Linear

    def compute(self, x, weight, bias):
        return F.linear(x, weight, bias)

    def gradients(self, x, weight, grad, needs):
        """(input, dense weight, bias) gradients as autograd's mm backward forms them."""
        flat_x, flat_grad = x.reshape(-1, x.shape[-1]), grad.reshape(-1, grad.shape[-1])
        grad_x = grad.matmul(weight) if needs[0] else None
        grad_w = flat_grad.t().mm(flat_x) if needs[1] else None
        grad_b = flat_grad.sum(0) if needs[2] else None
        return grad_x, grad_w, grad_b


class PackedConv(PackedLayer):
    DIMENSIONS: int

    def geometry(self):
        if self.padding_mode != "zeros" or isinstance(self.padding, str):
            raise ValueError("sparsity: packs zero-padded convolutions with numeric padding only")
        return self.stride, self.padding, self.dilation, self.groups

    def compute(self, x, weight, bias):
        op = F.conv1d if self.DIMENSIONS == 1 else F.conv2d
        return op(x, weight, bias, *self.geometry())

    def gradients(self, x, weight, grad, needs):
        shape = self.geometry()  # one gradient a call, the other not made
        grad_x = conv_gradients(x, weight, grad, shape, (True, False))[0] if needs[0] else None
        grad_w = conv_gradients(x, weight, grad, shape, (False, True))[1] if needs[1] else None
        dims = (0, *range(2, grad.dim()))
        grad_b = grad.sum(dims) if needs[2] else None
        return grad_x, grad_w, grad_b


class PackedConv1d(PackedConv, nn.Conv1d):
    STANDS_FOR = nn.Conv1d
    DIMENSIONS = 1


class PackedConv2d(PackedConv, nn.Conv2d):
    STANDS_FOR = nn.Conv2d
    DIMENSIONS = 2


# each layer type a sparse weight may live in (`models.layers.WEIGHT_LAYERS`) -> its packed form
PACKED = {packed.STANDS_FOR: packed for packed in (PackedLinear, PackedConv1d, PackedConv2d)}


class PackedOp(torch.autograd.Function):
    """A packed layer's map: the dense weight is built in forward and again in backward, never
    saved (see the module docstring)."""

    @staticmethod
    def forward(ctx, x, values, bias, layer):
        ctx.save_for_backward(x, values)
        out = layer.compute(x, layer.unpacked(values), bias)
        # under autocast the map ran in out's dtype: backward casts to it as autocast's casts do
        ctx.layer, ctx.dtype = layer, out.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        return out

    @staticmethod
    def backward(ctx, grad):
        x, values = ctx.saved_tensors
        layer, dtype = ctx.layer, ctx.dtype
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2])
        grad_x, grad_w, grad_b = layer.gradients(
            x.to(dtype), layer.unpacked(values).to(dtype), grad.to(dtype), needs
        )
        return (
            None if grad_x is None else grad_x.to(x.dtype),
            None if grad_w is None else layer.packed(grad_w).to(values.dtype),
            None if grad_b is None else grad_b.to(ctx.bias_dtype),
            None,
        )


def pack_layer(module: nn.Module, positions: torch.Tensor, layout: str) -> nn.Module:
    """Turn `module` (a Linear, Conv1d or Conv2d) into its packed form in place, keeping its
    weight at the sorted flat `positions`; returns it."""
    if type(module) not in PACKED:
        allowed = ", ".join(kind.__name__ for kind in PACKED)
        raise ValueError(f"sparsity: cannot pack a {type(module).__name__}; allowed: {allowed}")
    dense = module.weight.detach()
    where = positions.to(dense.device)
    values = dense.reshape(-1)[where]
    requires_grad = module.weight.requires_grad
    del module.weight
    module.__class__ = PACKED[type(module)]
    module.dense_shape = tuple(dense.shape)
    module.layout = layer_layout(layout, values.numel(), module.dense_shape)
    module.weight = nn.Parameter(values, requires_grad)
    module.register_buffer(SHAPE, torch.tensor(module.dense_shape, dtype=torch.int64))
    module.set_index(where)
    module.register_load_state_dict_pre_hook(_fit_to_checkpoint)
    return module


def _fit_to_checkpoint(module: PackedLayer, state: Mapping, prefix: str, *_) -> None:
    """Before loading: give the values and index buffers the checkpoint's sizes (a rewiring
    moves nonzeros between layers, so a layer's count is the checkpoint's, not the initial)."""
    values = state.get(prefix + "weight")
    if values is not None and values.shape != module.weight.shape:
        module.weight.data = module.weight.data.new_empty(values.shape)
    for name in LAYOUT_BUFFERS[module.layout]:
        loaded, own = state.get(prefix + name), getattr(module, name)
        if loaded is not None and loaded.shape != own.shape:
            module.register_buffer(name, own.new_empty(loaded.shape))


def layer_of(model: nn.Module, name: str) -> nn.Module:
    """The module holding parameter `name`."""
    return model.get_submodule(name.rpartition(".")[0])


def dense_shape(model: nn.Module, name: str) -> tuple[int, ...]:
    """The shape of parameter `name` as a dense weight (a packed layer's weight is its values)."""
    layer = layer_of(model, name)
    if isinstance(layer, PackedLayer) and name.rpartition(".")[2] == "weight":
        return layer.dense_shape
    return tuple(model.get_parameter(name).shape)


def weight_bytes(model: nn.Module, layout: str | None = None) -> dict[str, int]:
    """Each packed weight of `model` by parameter name, with its bytes: its values and index
    buffers as held (None), or counted in `layout` (`sparse_storage_bytes`; csr: the paper's)."""
    counted = {}
    for name, module in model.named_modules():
        if isinstance(module, PackedLayer):
            values = module.weight
            if layout is None:
                index = sum(t.numel() * t.element_size() for t in module.index().values())
                held = values.numel() * values.element_size() + index
            else:
                held = sparse_storage_bytes(
                    values.numel(), module.dense_shape, values.element_size(), layout
                )
            counted[f"{name}.weight" if name else "weight"] = held
    return counted


def dense_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A model state_dict with every packed weight densified and its index buffers dropped (what
    tools that know no packed layers read, e.g. a fairseq export)."""
    dense = dict(state)
    for key in [k for k in state if k.endswith(SHAPE)]:
        prefix = key[: -len(SHAPE)]
        shape = tuple(dense.pop(key).tolist())
        index = {
            name: dense.pop(prefix + name)
            for names in LAYOUT_BUFFERS.values()
            for name in names
            if prefix + name in dense
        }
        values = dense[prefix + "weight"]
        dense[prefix + "weight"] = scatter(values, positions(index, shape, values.numel()), shape)
    return dense
