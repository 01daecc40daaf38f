"""The storage tracker records what torch does without it. Under any Python dispatch mode,
autograd's engine sums two gradients of one tensor out of place, where without one it sums into
the buffered gradient when it holds its last reference; the tracker records the latter. Checked
against torch's own allocator reports of the same code run without the tracker
(`memory.allocations`), and on a WideResNet step against the independent measurement."""

import gc

import pytest
import torch
from torch.profiler import profile, record_function

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory.allocations import DEVICE_TYPES, STEP, _replay, _trace, measure_allocations
from tune_lowmem.memory.predict import heap_object_bytes, predict
from tune_lowmem.memory.tracker import StorageTracker

N = 100_000  # floats per tensor: large enough that every allocation stands out


class TwiceInPython(torch.autograd.Function):
    """x * 2, whose backward sums in Python code: torch makes that sum out of place."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return (grad * 1.5 + grad) * 0.8


def residual(x: torch.Tensor, w: torch.Tensor) -> None:
    """3h + h, made in place: h's two gradients meet, and the engine holds the buffered one's
    only reference when the second arrives."""
    h = x * 2
    out = h * 3
    out += h
    del h
    loss = (out * w).sum()
    del out
    loss.backward()


def in_python(x: torch.Tensor, w: torch.Tensor) -> None:
    (TwiceInPython.apply(x) * w).sum().backward()


def allocator_peak(step, x: torch.Tensor, w: torch.Tensor) -> int:
    """The most bytes torch's CPU allocator held at once during `step`, beyond what was alive
    before it and the gradient it leaves (from the profiler's memory reports)."""
    gc.collect()
    with profile(profile_memory=True) as profiler, record_function(STEP):
        step(x, w)
    events, _, ranges = _trace(profiler, DEVICE_TYPES["cpu"])
    return _replay(events, *ranges[STEP], held={x.grad.untyped_storage().data_ptr()})["activation"]


def tracked_peak(step, x: torch.Tensor, w: torch.Tensor) -> int:
    with StorageTracker([x, w]) as tracker:
        step(x, w)
    return tracker.peak(exclude=[x.grad])


@pytest.mark.parametrize("step", [residual, in_python])
def test_the_tracker_sums_gradients_where_torch_does(step):
    w = torch.rand(N)
    measured = []
    for peak in (allocator_peak, tracked_peak):
        x = torch.rand(N, requires_grad=True)
        measured.append(peak(step, x, w))
    allocator, tracked = measured
    # N-float tensors beside x's gradient (and a few scalars: the loss and its gradient). The
    # residual's sum is made in place: two at most (the buffered gradient and the other term; in
    # the forward pass h and out), three if the sum were a new tensor. The sum in Python is a new
    # tensor: the incoming gradient, the first term and the sum, two if the first term's storage
    # were taken for it.
    assert allocator == pytest.approx((2 if step is residual else 3) * 4 * N, abs=64)
    assert tracked == pytest.approx(allocator, abs=64)


def test_a_residual_network_step_against_the_allocator():
    # WRN-10-1 in bf16 with every second residual block checkpointed: the step's peak is in the
    # backward pass where a block input's two gradients meet (out of place, +4% over the allocator)
    config = TrialConfig.from_dict(
        {
            "device": "cpu",
            "model.depth": 10,
            "model.width": 1,
            "schedule.batch_size": 8,
            "precision": "bf16",
            "checkpoint": "residual-2",
        }
    )
    predicted = predict(config).total_bytes - heap_object_bytes(config)
    assert predicted == pytest.approx(measure_allocations(config).total_bytes, rel=0.015)


def test_a_sum_torch_makes_in_place_is_no_allocation_of_its_own():
    """What the time prediction plays on the host's allocator (`StorageTracker.allocated`): the
    residual's gradient sum is made in the buffered gradient's storage, which lives on as the
    sum; the sum made in Python code is an allocation of its own."""
    w = torch.rand(N)
    counts = {}
    for step in (residual, in_python):
        x = torch.rand(N, requires_grad=True)
        with StorageTracker([x, w]) as tracker:
            step(x, w)
        big = [alive for alive in tracker.allocated() if alive[2] == 4 * N]
        counts[step] = (
            len(tracker.taken_over),
            len(big),
            len([li for li in tracker.lives if li.nbytes == 4 * N]),
        )
    taken, allocated, lives = counts[residual]
    assert taken == 1 and allocated == lives - 1
    taken, allocated, lives = counts[in_python]
    assert taken == 0 and allocated == lives
