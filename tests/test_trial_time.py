"""Time measured in every trial, on its device: seconds per update at steady state, per
evaluation and per epoch, as the `Trainer` reports them with each epoch."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from tune_lowmem.config import TrialConfig
from tune_lowmem.outcome import (
    MEASURED_EPOCH_S,
    MEASURED_EVALUATION_S,
    MEASURED_TIMES,
    MEASURED_UPDATE_S,
)
from tune_lowmem.stopwatch import CudaClock, HostClock, clock
from tune_lowmem.techniques.rewiring import rewires_after
from tune_lowmem.techniques.sparsity import Sparsity
from tune_lowmem.train import Trainer, measured_times

TINY = {"task": "tests.tiny_task:TinyBlobs", "device": "cpu"}  # 12 updates an epoch, 2 epochs
REWIRING = {  # a rewiring after every fourth update
    "sparsity.density": 0.3,
    "sparsity.period_schedule": "constant",
    "sparsity.constant_period": 4,
}


def test_every_epoch_reports_its_seconds_and_the_trial_their_medians():
    history = Trainer(TrialConfig.from_dict(TINY)).run()
    assert len(history) == 2
    for row in history:
        update, evaluation, epoch = (row[n] for n in MEASURED_TIMES)
        assert 0 < update < epoch and 0 < evaluation < epoch
        assert epoch >= row["epoch_seconds"] + evaluation  # the updates, then the evaluation
    times = measured_times(history)
    for name in (MEASURED_UPDATE_S, MEASURED_EVALUATION_S, MEASURED_EPOCH_S):
        assert times[name] == pytest.approx(np.median([row[name] for row in history]))


def test_a_steady_state_update_is_neither_an_epochs_first_nor_one_before_a_rewiring():
    trainer = Trainer(TrialConfig.from_dict({**TINY, **REWIRING}))
    engine = trainer.technique(Sparsity).engine
    spans = []
    trainer.train_epoch(spans)
    kept = [steady for _, _, steady in spans]
    rewired = [rewires_after(engine.sparsity, engine.run, 0, u) for u in range(len(spans))]
    assert kept == [i > 0 and not r for i, r in enumerate(rewired)]
    assert any(rewired) and engine.rewirings == sum(rewired)  # the left-out ones did rewire


def test_an_epochs_figures_from_its_marks():
    """The update figure is the median of the steady-state updates alone; an epoch without
    one has none (a single-update epoch), and the trial's figure skips it."""
    trainer = Trainer(TrialConfig.from_dict(TINY))
    assert isinstance(trainer.clock, HostClock)
    spans = [(0.0, 9.0, False), (9.0, 9.5, True), (9.5, 9.75, True), (9.75, 10.05, True)]
    times = trainer.epoch_times(spans, began=0.0, evaluating=10.5, ended=12.0)
    assert times[MEASURED_UPDATE_S] == pytest.approx(0.3)
    assert times[MEASURED_EVALUATION_S] == pytest.approx(1.5)
    assert times[MEASURED_EPOCH_S] == pytest.approx(12.0)
    lone = trainer.epoch_times([(0.0, 1.0, False)], began=0.0, evaluating=1.0, ended=2.0)
    assert lone[MEASURED_UPDATE_S] is None
    assert measured_times([times, lone])[MEASURED_UPDATE_S] == pytest.approx(0.3)
    assert measured_times([]) == dict.fromkeys(MEASURED_TIMES)


def test_the_host_clock_covers_work_done_between_its_marks():
    watch = clock(torch.device("cpu"))
    start = watch.mark()
    time.sleep(0.05)
    assert 0.05 <= watch.seconds(start, watch.mark()) < 1.0


@pytest.mark.gpu
def test_the_cuda_clock_covers_the_devices_work_not_its_queueing():
    """Kernels queued between two marks: the host is back at once, the marks time the device."""
    device = torch.device("cuda")
    watch = clock(device)
    assert isinstance(watch, CudaClock)
    x = torch.randn(4096, 4096, device=device)
    torch.cuda.synchronize(device)
    start = watch.mark()
    host = time.perf_counter()
    for _ in range(50):
        x = x @ x
        x = x / x.norm()
    end = watch.mark()
    queued = time.perf_counter() - host
    torch.cuda.synchronize(device)
    done = time.perf_counter() - host
    seconds = watch.seconds(start, end)
    assert queued < seconds <= done * 1.05
