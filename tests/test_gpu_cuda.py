"""What only a CUDA device can show (pytest -m gpu; deselected by default, run by
benchmarks/gpu_check.py): the share's limit, the step's syncs, every precision path, the
CUDA prediction against the whole run's max_memory_allocated, the workspaces against torch's rules."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch

from tests.conftest import tiny_wrn_config
from tests.packed_reference import differences
from tests.test_packed_exact import REWIRING, compared
from tests.test_sparsity import CHURN
from tune_lowmem.memory.cuda import trial_target
from tune_lowmem.memory.cuda_libraries import BlasRule, probe_blas, release
from tune_lowmem.memory.predict import predict
from tune_lowmem.memory.synthetic import synthetic_task
from tune_lowmem.memory.whole_run import measure_run
from tune_lowmem.techniques.precision import PRECISIONS
from tune_lowmem.torch_private import multiply_
from tune_lowmem.train import Trainer

pytestmark = pytest.mark.gpu

HELD_TO_SHARE = """
import torch
from tune_lowmem.memory.share import hold_to_share
from tune_lowmem.search.trainable import out_of_memory
device = torch.device("cuda")
fraction = hold_to_share(0.05, device)
limit = fraction * torch.cuda.get_device_properties(device).total_memory
kept = torch.empty(int(limit * 0.5), dtype=torch.uint8, device=device)  # within the share
try:
    torch.empty(int(limit * 0.6), dtype=torch.uint8, device=device)  # past it
except Exception as error:
    print("refused", out_of_memory(error))
"""


def test_a_trial_is_held_to_its_share():
    done = subprocess.run(
        [sys.executable, "-c", HELD_TO_SHARE], capture_output=True, check=False, text=True
    )
    assert done.stdout.strip() == "refused True", done.stderr


@pytest.mark.parametrize(
    "setting", [{}, {"precision": "fp16", "microbatch.size": 5}, CHURN], ids=str
)
def test_a_step_syncs_the_host_once(setting):
    config = tiny_wrn_config(device="cuda", **setting)
    trainer = Trainer(config, task=synthetic_task(config, torch.device("cuda")))
    batch = next(iter(trainer.task.train_batches(0)))
    trainer.train_step(batch)  # update 0; no rewiring follows the next one either
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.train_step(batch)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    assert len(syncs) <= 1, [str(w.message) for w in syncs]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_precision_trains_on_cuda(precision):
    trainer = Trainer(
        tiny_wrn_config(device="cuda", precision=precision, **{"microbatch.size": 10})
    )
    losses = [trainer.train_step(b)["loss"] for b in trainer.task.train_batches(0)]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0] * 1.5
    norms = [m for m in trainer.model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert all(m.weight.dtype == torch.float32 for m in norms)


def test_checkpointing_on_cuda_gives_the_step_without_it():
    plain = Trainer(tiny_wrn_config(device="cuda"))
    checkpointed = Trainer(tiny_wrn_config(device="cuda", checkpoint="residual-2"))
    batch = next(iter(plain.task.train_batches(0)))
    assert plain.train_step(batch)["loss"] == pytest.approx(
        checkpointed.train_step(batch)["loss"], rel=1e-5
    )


def test_packed_sparse_training_equals_masked_dense_on_cuda(monkeypatch):
    """Bit for bit, so with cuDNN's deterministic algorithms: by default its convolutions'
    backward may pick ones that add with atomics, which differ from run to run."""
    config = tiny_wrn_config(device="cuda", **REWIRING)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True):
        packed, reference = compared(config, monkeypatch)
    assert differences(packed, reference, exact=True) == []


def test_the_multi_tensor_unscale_equals_one_multiply_per_gradient_on_cuda():
    grads = [torch.randn(s, device="cuda").half() * 1000 for s in ((300, 7), (5,), (64, 3, 3, 3))]
    expected = [g * (1.0 / 1024.0) for g in grads]
    multiply_(grads, 1.0 / 1024.0)
    assert all(torch.equal(g, e) for g, e in zip(grads, expected))


def test_the_blas_workspaces_counted_are_what_torch_allocates():
    """torch's rule for this release and card (read in its source) against what it allocates."""
    rule = BlasRule.of(torch.cuda.get_device_capability(), release())
    probe = probe_blas(torch.device("cuda"))
    kept = rule.cublas_bytes if rule.cublas_kept else 0
    per_call = 0 if rule.cublas_kept else rule.cublas_bytes
    assert (probe.cublas_kept, probe.cublas_per_call, probe.lt_kept) == (
        kept,
        per_call,
        rule.lt_bytes,
    )


LIMITED_CONVOLUTION = """
import torch
from tune_lowmem.memory.cuda_libraries import cuda_call, probe_cudnn
from tune_lowmem.memory.tracker import StorageTracker
conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
image = torch.zeros(128, 64, 32, 32, device="cuda", requires_grad=True)
with StorageTracker([], notes=cuda_call) as tracker:
    conv(image).sum().backward()
calls = {call for _, call in tracker.calls if call[0] == "cudnn"}
print(max(probe_cudnn(calls, torch.device("cuda")).values()))
"""


@pytest.mark.parametrize("limit_mb", [0, 1])
def test_a_convolution_s_cudnn_workspace_keeps_to_the_trial_s_limit(limit_mb):
    """CUDNN_CONV_WSCAP_DBG, set before CUDA starts as a trial sets it, caps each convolution's
    workspace (forward and backward) that the probe measures."""
    env = {**os.environ, "CUDNN_CONV_WSCAP_DBG": str(limit_mb)}
    done = subprocess.run(
        [sys.executable, "-c", LIMITED_CONVOLUTION],
        capture_output=True,
        check=False,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) <= limit_mb * 2**20


@pytest.mark.parametrize("flat", [{}, {"precision": "fp16"}, {"sparsity.density": 0.3}], ids=str)
def test_the_cuda_prediction_is_the_whole_run_s_max_memory_allocated(flat):
    """The searched run peak, predicted in the trial's process on its card (workspaces probed),
    against max_memory_allocated over the whole run: every step, evaluation, checkpoint."""
    config = tiny_wrn_config(device="cuda", **{"model.depth": 16, "model.width": 2, **flat})
    predicted = predict(config, target=trial_target(config)).run_peak_bytes
    measured = measure_run(config)
    assert predicted == pytest.approx(measured.peak_bytes, rel=0.05)
