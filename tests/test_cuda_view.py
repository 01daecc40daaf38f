"""A CUDA trial's run peak as its caching allocator will count it, predicted without a GPU: the
allocator's blocks, torch's workspace rules by release and architecture, the calls that take a
workspace as the dry run notes them, the settings that change them."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from tests.conftest import tiny_wrn_config
from tests.test_packed_exact import tiny_dct
from tune_lowmem.memory import accounting, stepping
from tune_lowmem.memory.calls import TensorSpec
from tune_lowmem.memory.cuda import (
    DEFAULT_CAPABILITY,
    CudaTarget,
    allocated_size,
    reserved_lower_bound,
    segment_size,
    trial_target,
)
from tune_lowmem.memory.cuda_libraries import (
    BACKWARD,
    CUBLAS,
    CUBLASLT,
    CUDNN,
    FORWARD,
    BlasRule,
    cublas_workspace_bytes,
    cuda_call,
)
from tune_lowmem.memory.predict import dry_run, predict, shape_key
from tune_lowmem.memory.tracker import StorageTracker

MiB = 1 << 20
DEFAULT = 8 * MiB + 128 * 1024  # :4096:2:16:8


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


def test_cublas_workspace_is_torch_s_default_per_architecture_and_release():
    assert cublas_workspace_bytes((9, 0), (2, 11)) == 32 * MiB  # Hopper, every release
    assert cublas_workspace_bytes((8, 0), (2, 14)) == DEFAULT
    assert cublas_workspace_bytes((10, 0), (2, 11)) == DEFAULT  # Blackwell before 2.12
    assert cublas_workspace_bytes((10, 0), (2, 12)) == 32 * MiB
    assert cublas_workspace_bytes((11, 0), (2, 14)) == DEFAULT
    assert cublas_workspace_bytes((11, 0), (2, 15)) == 32 * MiB


def test_cublas_workspace_follows_the_setting_torch_reads():
    assert cublas_workspace_bytes((8, 0), (2, 14), ":4096:8") == 32 * MiB
    assert cublas_workspace_bytes((9, 0), (2, 14), ":16:8") == 128 * 1024
    assert cublas_workspace_bytes((9, 0), (2, 14), ":4096:2:16:8") == DEFAULT
    assert cublas_workspace_bytes((9, 0), (2, 14), ":0:0") == 0


@pytest.mark.parametrize(
    ("version", "environ", "kept", "lt"),
    [
        ((2, 11), {}, True, MiB),  # cuBLASLt's own 1 MiB per handle and stream
        ((2, 14), {}, True, 0),  # unified by default: Lt shares cuBLAS's
        ((2, 14), {"TORCH_CUBLASLT_UNIFIED_WORKSPACE": "0"}, True, MiB),
        ((2, 11), {"TORCH_CUBLASLT_UNIFIED_WORKSPACE": "1"}, True, 0),
        ((2, 11), {"CUBLASLT_WORKSPACE_SIZE": "4096"}, True, 4 * MiB),
        ((2, 15), {}, False, MiB),  # one cuBLAS workspace per call; Lt's own, kept
        ((2, 15), {"TORCH_CUBLAS_WORKSPACE_CACHE": "1"}, True, 0),
    ],
)
def test_each_release_keeps_the_blas_workspaces_as_its_source_reads(version, environ, kept, lt):
    rule = BlasRule.of((9, 0), version, None, environ)
    assert (rule.cublas_bytes, rule.cublas_kept, rule.lt_bytes) == (32 * MiB, kept, lt)


def test_the_workspaces_held_follow_the_roles_whose_products_ran():
    roles = {(CUBLASLT, FORWARD), (CUBLAS, BACKWARD)}  # a linear layer: Lt forward, mm backward
    torch_2_11 = BlasRule.of((9, 0), (2, 11), None, {})
    assert sorted(torch_2_11.held(roles)) == [MiB, 32 * MiB, 32 * MiB]  # Lt sets cuBLAS up too
    assert BlasRule.of((9, 0), (2, 14), None, {}).held(roles) == [32 * MiB, 32 * MiB]
    assert BlasRule.of((9, 0), (2, 14), None, {}).held({(CUBLAS, BACKWARD)}) == [32 * MiB]
    per_call = BlasRule.of((9, 0), (2, 15), None, {})
    assert per_call.held(roles) == [MiB]
    assert per_call.per_call((CUBLAS, BACKWARD)) == 32 * MiB
    assert per_call.per_call((CUBLASLT, FORWARD)) == 0
    assert BlasRule.of((9, 0), (2, 14), ":0:0", {}).held(roles) == [0, 0]


def test_the_dry_run_notes_each_call_that_takes_a_workspace_with_its_thread():
    layer, conv = nn.Linear(8, 8), nn.Conv2d(3, 4, 3)
    x, image = torch.randn(4, 8, requires_grad=True), torch.randn(2, 3, 8, 8)
    with StorageTracker([*layer.parameters(), *conv.parameters()], notes=cuda_call) as tracker:
        layer(x).sum().backward()
        conv(image).sum().backward()
    notes = [call for _, call in tracker.calls]
    assert notes[0] == (CUBLASLT, FORWARD)  # a product with a vector bias
    assert (CUBLAS, BACKWARD) in notes  # its gradients' products, on autograd's thread
    convolutions = [n for n in notes if n[0] == CUDNN]
    assert [n[1] for n in convolutions] == [FORWARD, BACKWARD]
    assert convolutions[0][3][0] == TensorSpec((2, 3, 8, 8), (192, 64, 8, 1), torch.float32, "cpu")


def test_a_cuda_trial_is_predicted_here_for_its_device_with_its_settings(monkeypatch):
    for name in ("CUBLAS_WORKSPACE_CONFIG", "CUDNN_CONV_WSCAP_DBG"):
        monkeypatch.setenv(name, "")  # so that what the test sets is undone after it
        monkeypatch.delenv(name)
    assert trial_target(tiny_wrn_config(device="cpu")) is None
    assert trial_target(tiny_wrn_config(device="auto")) is None  # no GPU here
    assert trial_target(tiny_wrn_config(device="auto"), gpu=True).capability == DEFAULT_CAPABILITY
    config = tiny_wrn_config(
        device="cuda", **{"cuda_workspace.cublas": ":16:8", "cuda_workspace.cudnn_limit_mb": 4}
    )
    target = trial_target(config, capability=(8, 0))
    assert (target.capability, target.cublas, target.cudnn_limit_mb) == ((8, 0), ":16:8", 4)
    assert not target.on_card
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # the trial inherits it
    assert trial_target(tiny_wrn_config(device="cuda")).cublas == ":4096:8"


def test_a_cuda_run_peak_adds_blocks_and_workspaces_to_the_same_tensors():
    config = tiny_wrn_config(device="cuda")
    target = CudaTarget(capability=(9, 0), version=(2, 14))
    cuda = predict(config, target=target).cuda
    cpu_run = dry_run(shape_key(config, cuda=False), workspace=False)
    cuda_run = dry_run(shape_key(config, cuda=True))
    # the same tensors: held weights and state exactly; blocks only round them up
    assert cuda_run.cuda.held[1] == cpu_run.held_bytes
    assert cuda_run.cuda.held[0] >= cuda_run.cuda.held[1]
    assert cuda.blas_bytes == 2 * 32 * MiB  # the forward's handle and autograd's
    assert cuda.cudnn_bytes is None  # no GPU here, no limit: unknown, left out
    tensors = cuda.run_peak_bytes - cuda.blas_bytes - cuda.rounding_bytes
    step, _ = cpu_run.step_peak
    assert tensors >= cpu_run.held_bytes + step  # the CPU's step, foreach's copy and all
    assert cuda.reserved_bytes >= cuda.run_peak_bytes
    ampere = predict(config, target=dataclasses.replace(target, capability=(8, 0))).cuda
    assert cuda.run_peak_bytes - ampere.run_peak_bytes == 2 * (32 * MiB - DEFAULT)


def test_the_settings_change_the_workspaces_counted():
    base = tiny_wrn_config(device="cuda")
    target = CudaTarget(capability=(9, 0), version=(2, 14))
    default = predict(base, target=target).cuda
    none = predict(base, target=dataclasses.replace(target, cublas=":0:0")).cuda
    assert default.run_peak_bytes - none.run_peak_bytes == 2 * 32 * MiB
    limited = predict(base, target=dataclasses.replace(target, cudnn_limit_mb=64)).cuda
    assert limited.cudnn_bytes == 64 * MiB  # a convolution at the peak, at its cap
    assert limited.run_peak_bytes <= default.run_peak_bytes + 64 * MiB
    assert limited.run_peak_bytes > default.run_peak_bytes


@pytest.mark.parametrize(
    "flat",
    [{"precision": "fp16"}, {"adam_state": "int8"}, {"fused_step": "exact"}],
    ids=["fp16 weights, fp32 moments", "8-bit moments", "fused Adam step"],
)
def test_the_cuda_view_holds_what_a_real_adam_step_leaves(flat):
    """The held part against a real trainer after a real step (on the CPU): fp16 weights keep
    fp32 moments, 8-bit moments are bytes with their scales, a fused step keeps no gradients.
    Weights, buffers and state, each storage rounded to the allocator's blocks."""
    config = tiny_dct(
        **{"model.embed_dim": 64, "model.ffn_dim": 128, "sparsity.density": 1.0, **flat}
    )
    trainer, batches = stepping.synthetic_trainer(config, None)
    stepping.warm_up(trainer, batches)
    trainer.train_step(next(batches))
    model = trainer.model
    held = [*model.parameters(), *model.buffers(), *accounting.state_tensors(trainer.optimizer)]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in held}
    cuda = config.replace(device="cuda")
    run = dry_run(shape_key(cuda, cuda=True))
    assert run.cuda.held[0] == sum(map(allocated_size, storages.values()))
