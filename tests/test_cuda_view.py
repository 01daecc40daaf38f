"""The CUDA allocator's view of a step, from known sizes (no GPU needed)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.conftest import tiny_wrn_config
from tests.test_packed_exact import tiny_dct
from tune_lowmem.memory import MB, accounting, stepping
from tune_lowmem.memory.allocations import measure_allocations
from tune_lowmem.memory.cuda import (
    BLAS_THREADS,
    CUDA_CONTEXT_MB,
    allocated_size,
    blas_workspace_bytes,
    blas_workspaces,
    cublas_workspace_bytes,
    cublaslt_workspace_bytes,
    cuda_prediction,
    foreach_temporary_copies,
    lt_workspace_unified,
    predict_cuda,
    reserved_lower_bound,
    segment_size,
)
from tune_lowmem.memory.predict import predict

MiB = 1 << 20


@pytest.mark.parametrize(
    ("request_bytes", "allocated", "segment"),
    [
        (1, 512, 2 * MiB),
        (512, 512, 2 * MiB),
        (513, 1024, 2 * MiB),
        (MiB, MiB, 2 * MiB),
        (MiB + 1, MiB + 512, 20 * MiB),
        (10 * MiB - 512, 10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB, 10 * MiB),
        (11 * MiB + 3, 11 * MiB + 512, 12 * MiB),
    ],
)
def test_block_rounding_and_segments_follow_the_caching_allocator(
    request_bytes, allocated, segment
):
    assert allocated_size(request_bytes) == allocated
    assert segment_size(request_bytes) == segment


def test_held_blocks_pack_into_the_fewest_segments():
    assert reserved_lower_bound([]) == 0
    assert reserved_lower_bound([100] * 4096) == 2 * MiB  # 4096 blocks of 512 B: one segment
    assert reserved_lower_bound([100] * 4097) == 4 * MiB
    assert reserved_lower_bound([3 * MiB] * 7) == 40 * MiB  # 21 MiB of medium blocks
    assert reserved_lower_bound([11 * MiB, 100]) == 12 * MiB + 2 * MiB


@pytest.fixture
def blas_defaults(monkeypatch):
    """The BLAS workspace settings torch reads, unset, as on a user's machine."""
    for name in ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", raising=False)
    return monkeypatch


def test_cublas_workspace_is_torch_s_default_per_architecture(blas_defaults):
    assert cublas_workspace_bytes((9, 0)) == 32 * MiB
    assert cublas_workspace_bytes((8, 0)) == 8 * MiB + 128 * 1024


def test_cublas_workspace_follows_the_setting_torch_reads(blas_defaults):
    blas_defaults.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # the deterministic setting
    assert cublas_workspace_bytes((8, 0)) == 32 * MiB
    blas_defaults.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    assert cublas_workspace_bytes((9, 0)) == 128 * 1024


def test_cublaslt_shares_the_workspaces_from_torch_2_12_or_when_told(blas_defaults):
    assert not lt_workspace_unified("2.11.0+cu130")
    assert lt_workspace_unified("2.12.0") and lt_workspace_unified("2.14.1+cu130")
    blas_defaults.setenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "0")
    assert not lt_workspace_unified("2.14.1")
    assert cublaslt_workspace_bytes() == MiB  # its own, of its default size
    blas_defaults.setenv("CUBLASLT_WORKSPACE_SIZE", "4096")
    assert cublaslt_workspace_bytes() == 4 * MiB
    blas_defaults.setenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "1")
    assert lt_workspace_unified("2.10.0") and cublaslt_workspace_bytes() == 0


def test_a_step_holds_one_blas_workspace_per_thread_that_multiplies(blas_defaults):
    blas_defaults.setenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "1")
    assert BLAS_THREADS == 2  # the forward's thread and autograd's device thread
    assert blas_workspaces((9, 0)) == [32 * MiB, 32 * MiB]
    blas_defaults.setenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "0")
    assert sorted(blas_workspaces((9, 0))) == [MiB, 32 * MiB, 32 * MiB]  # Lt: the forward's
    assert blas_workspace_bytes((9, 0)) == 65 * MiB


def test_optimizer_temporaries_follow_torch_optim_s_foreach_step():
    params = [nn.Parameter(torch.zeros(3))]
    assert foreach_temporary_copies(torch.optim.SGD(params, lr=0.1, momentum=0.9)) == 0
    assert foreach_temporary_copies(torch.optim.SGD(params, lr=0.1, weight_decay=5e-4)) == 1
    assert foreach_temporary_copies(torch.optim.AdamW(params)) == 1
    assert foreach_temporary_copies(torch.optim.Adam(params, weight_decay=1e-4)) == 2


def test_a_known_model_s_parts(blas_defaults):
    model = nn.Sequential(nn.Linear(1000, 1000), nn.BatchNorm1d(1000))  # 1,001,000 + 2,000 params
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    model(torch.randn(4, 1000)).sum().backward()
    optimizer.step()  # the held tensors a step leaves: gradients and momentum exist
    view = cuda_prediction(model, optimizer, 5 * MiB, (9, 0))
    weight, bias, norm = allocated_size(4_000_000), 4096, 4096  # 4,000 B -> 4,096 B
    parameters = weight + bias + 2 * norm
    buffers = 2 * 4096 + 512  # running mean and variance, num_batches_tracked
    assert view.held_bytes == parameters * 3 + buffers  # weights, gradients, momentum
    assert view.temporary_bytes == parameters  # weight decay's gradient copy
    assert view.workspace_bytes == blas_workspace_bytes((9, 0))
    assert view.allocated_bytes == view.held_bytes + 5 * MiB + view.workspace_bytes
    assert view.context_bytes == CUDA_CONTEXT_MB * MB
    assert view.reserved_bytes >= view.allocated_bytes  # segments hold at least their blocks


def test_a_config_s_view_holds_packed_sparse_layers_and_adds_the_workspace():
    config = tiny_wrn_config(**{"sparsity.density": 0.3})
    paper, view = predict(config), predict_cuda(config)
    dense = predict_cuda(tiny_wrn_config())
    # the allocator holds tensor storage only, not the CPU heap's objects the CPU figure counts:
    # torch's CPU allocator, measured in a real step, agrees
    real = measure_allocations(config).activation_bytes
    assert view.activation_bytes == pytest.approx(real, rel=0.01)
    # packed layers: values, gradients and momentum of the nonzeros and their index buffers,
    # each storage rounded up to the allocator's blocks; far less than the dense model's
    assert paper.model_bytes + paper.optimizer_bytes <= view.held_bytes < dense.held_bytes / 2
    assert view.allocated_bytes > paper.total_bytes


@pytest.mark.parametrize(
    "flat",
    [{"precision": "fp16"}, {"adam_state": "int8"}, {"fused_step": "exact"}],
    ids=["fp16 weights, fp32 moments", "8-bit moments", "fused Adam step"],
)
def test_the_view_holds_what_a_real_adam_step_leaves(flat):
    """The held part against a real trainer after a real step (on the CPU): fp16 weights keep
    fp32 moments, 8-bit moments are bytes with their scales, a fused step keeps no gradients.
    Every storage it holds, rounded to the allocator's blocks."""
    config = tiny_dct(
        **{"model.embed_dim": 64, "model.ffn_dim": 128, "sparsity.density": 1.0, **flat}
    )
    trainer, batches = stepping.synthetic_trainer(config, None)
    stepping.warm_up(trainer, batches)
    trainer.train_step(next(batches))
    model = trainer.model
    held = [*model.parameters(), *model.buffers(), *accounting.state_tensors(trainer.optimizer)]
    held += [p.grad for p in model.parameters() if p.grad is not None]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in held}
    assert predict_cuda(config).held_bytes == sum(map(allocated_size, storages.values()))
