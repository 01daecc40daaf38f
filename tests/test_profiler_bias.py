"""The profiler against real steps on points it was not calibrated on: the new techniques at
small microbatches, for both tasks, with the CPU measurement free of the tracker's own records
and the optimizer step's temporaries in the prediction."""

import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory import accounting
from tune_lowmem.memory.measure import allocator_probe, measure
from tune_lowmem.memory.predict import heap_object_bytes, update
from tune_lowmem.memory.tracker import StorageTracker
from tune_lowmem.techniques.precision import Precision
from tune_lowmem.torch_private import FakeTensorMode

WRN = {"model.depth": 10, "model.width": 1, "device": "cpu"}
DCT = {
    "task": "dct-iwslt14",
    "model": {
        "embed_dim": 32,
        "ffn_dim": 64,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "encoder_kernels": [3],
        "decoder_kernels": [3],
    },
    "schedule.max_tokens": 300,
    "device": "cpu",
}
# none of them is predict.HEAP_BYTES_PER_STORAGE's calibration point (bf16, fused units,
# microbatch 8 of 32)
POINTS = {
    "fused block, heavy-ball fused step, microbatch 4 of 16, 30% nonzeros": {
        **WRN,
        "schedule.batch_size": 16,
        "precision": "bf16",
        "model.fused_norm": "block",
        "fused_step": "heavy-ball",
        "microbatch.size": 4,
        "sparsity.density": 0.3,
    },
    "fused unit, exact fused step, bf16 momentum, microbatch 4 of 16": {
        **WRN,
        "schedule.batch_size": 16,
        "model.fused_norm": "unit",
        "fused_step": "exact",
        "momentum_dtype": "bf16",
        "microbatch.size": 4,
    },
    "kahan rounding, microbatch 2 of 8": {
        **WRN,
        "schedule.batch_size": 8,
        "precision": "bf16",
        "precision_update": "kahan",
        "microbatch.size": 2,
    },
    "DC-Transformer, bf16, 100-token microbatches": {
        **DCT,
        "precision": "bf16",
        "microbatch.size": 100,
    },
}


@pytest.mark.parametrize("flat", POINTS.values(), ids=POINTS.keys())
def test_prediction_within_3_percent_of_a_real_step(flat):
    from tune_lowmem.memory.predict import predict

    config = TrialConfig.from_dict(flat)
    lengths = (30, 30) if config.task == "dct-iwslt14" else None
    predicted, measured = predict(config, lengths), measure(config, lengths)
    assert predicted.total_bytes == pytest.approx(measured.total_bytes, rel=0.03)
    assert predicted.activation_bytes == pytest.approx(measured.activation_bytes, rel=0.05)


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's mallinfo2")
def test_heap_samples_leave_out_the_trackers_own_records():
    x = torch.zeros(16)
    with StorageTracker():  # a process's first dispatch through a Python mode allocates ~25 MB
        x.add_(1)
    with StorageTracker([x], allocator_probe(torch.device("cpu")), True) as tracker:
        for _ in range(20_000):  # no new storage: the heap's tensors do not grow
            x.add_(1)
    assert len(tracker.samples) == 20_001
    # the samples list alone grows by 8 bytes an operator: 160 kB
    assert tracker.samples[-1] - tracker.samples[0] < 16_000


def test_a_probe_off_the_heap_is_sampled_as_it_reads():
    """A GPU allocator's count does not hold the tracker's records: nothing is taken off it."""
    x = torch.zeros(16)
    with StorageTracker([x], lambda: 10_000_000) as tracker:
        for _ in range(1_000):
            x.add_(1)
    assert tracker.samples == [10_000_000] * 1_001


def _stepped(foreach: bool, fake: FakeTensorMode | None) -> int:
    """The peak of `update`'s temporaries for SGD (Nesterov, weight decay) over 3 weights."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 8))
    convert = fake.from_tensor if fake else (lambda t: t)
    for module in model:
        module.weight = nn.Parameter(convert(module.weight.detach()))
        module.bias = nn.Parameter(convert(module.bias.detach()))
    with fake or torch.no_grad():
        optimizer = torch.optim.SGD(
            model.parameters(),
            lr=0.1,
            momentum=0.9,
            nesterov=True,
            weight_decay=5e-4,
            foreach=foreach,
        )
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        optimizer.step()  # the state exists, as after a warm-up step
        task = SimpleNamespace(device=torch.device("cpu"))
        precision = Precision(TrialConfig.from_dict({"device": "cpu"}), task)
        existing = [*model.parameters(), *accounting.state_tensors(optimizer)]
        existing += [p.grad for p in model.parameters()]
        with StorageTracker(existing) as tracker:
            update(model, optimizer, precision)
    return tracker.peak(exclude=existing)


@pytest.mark.parametrize("foreach", [True, False])
def test_the_dry_runs_update_holds_the_optimizers_temporaries(foreach):
    real, fake = _stepped(foreach, None), _stepped(foreach, FakeTensorMode())
    assert real == fake
    weights = [64 * 64 + 64, 64 * 64 + 64, 64 * 8 + 8]
    if foreach:  # _foreach_add(grads, params): a gradient-sized copy of every weight at once
        assert real >= 4 * sum(weights)
    else:  # one weight's temporaries at a time
        assert 4 * max(weights) <= real < 4 * sum(weights)


@pytest.mark.skipif(torch.cuda.is_available(), reason="device auto must resolve to the CPU")
def test_device_auto_on_a_cpu_counts_the_heap_objects_as_the_cpu_does():
    """The heap's objects follow the device the trial runs on, not the config's spelling."""
    cpu = TrialConfig.from_dict({**WRN, "schedule.batch_size": 16})
    auto = TrialConfig.from_dict({**WRN, "schedule.batch_size": 16, "device": "auto"})
    assert heap_object_bytes(auto) == heap_object_bytes(cpu) > 0
