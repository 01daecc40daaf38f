"""A trial's GPU share: the one headroom rule, the allocator fraction it sets, the peaks stored."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import torch

from tune_lowmem import store
from tune_lowmem.memory.cuda import calibration
from tune_lowmem.memory.share import (
    cuda_index,
    gpu_share,
    hold_to_share,
    memory_fraction,
    peak_memory_mb,
    trial_share,
)
from tune_lowmem.outcome import CUDA_PEAKS, result_from_row

CONTEXT_MB = calibration()["context_mb"]


@pytest.mark.parametrize("reserved", [1.0, 250.0, 3_000.0, 20_000.0])
@pytest.mark.parametrize("card", [16_000.0, 24_000.0, 80_000.0])
def test_the_fraction_of_a_share_leaves_the_allocator_what_it_reserves(reserved, card):
    share = gpu_share(reserved, CONTEXT_MB, card)
    fraction = memory_fraction(share, card)
    if share == 1.0:  # a whole card: nothing to hold the trial to
        assert fraction is None
        assert reserved + CONTEXT_MB > 0.99 * card
    else:
        assert fraction * card >= reserved - 1e-6
        assert fraction * card + CONTEXT_MB <= share * card + 1e-6  # within its share
        assert share * 100 == pytest.approx(round(share * 100))  # whole percents of a card


def test_shares_of_one_card_that_fit_together_keep_their_allocators_apart():
    card = 24_000.0
    shares = [gpu_share(r, CONTEXT_MB, card) for r in (500.0, 2_000.0, 4_000.0, 8_000.0)]
    assert sum(shares) <= 1.0
    held = sum(memory_fraction(s, card) * card + CONTEXT_MB for s in shares)
    assert held <= card


def test_no_fraction_without_a_gpu_share_or_with_whole_cards():
    assert memory_fraction(0.0, 24_000.0) is None
    assert memory_fraction(1.0, 24_000.0) is None
    assert memory_fraction(2.0, 24_000.0) is None
    assert memory_fraction(0.01, 24_000.0) == 0.0  # a share smaller than the context: nothing


def test_a_cpu_trial_sets_nothing_and_has_no_gpu_peaks():
    assert hold_to_share(0.5, torch.device("cpu")) is None
    assert peak_memory_mb(torch.device("cpu")) == dict.fromkeys(CUDA_PEAKS)


@pytest.fixture
def cuda_calls(monkeypatch):
    """torch.cuda's device functions on a machine without one: card 3 current, 80 GB each; every
    call's device argument recorded. torch refuses a CUDA device without an index where it needs
    a definite card (`set_per_process_memory_fraction`), so each must be handed an index."""
    calls = []

    def recorded(name, result):
        def call(*args):
            calls.append((name, args))
            return result

        monkeypatch.setattr(torch.cuda, name, call)

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    recorded("get_device_properties", SimpleNamespace(total_memory=80_000 * 10**6))
    recorded("set_per_process_memory_fraction", None)
    recorded("max_memory_allocated", 2 * 10**6)
    recorded("max_memory_reserved", 4 * 10**6)
    return calls


@pytest.mark.parametrize(("device", "index"), [("cuda", 3), ("cuda:1", 1)])
def test_the_share_is_set_on_a_definite_card(cuda_calls, device, index):
    device = torch.device(device)
    assert cuda_index(device) == index
    fraction = hold_to_share(0.25, device)
    assert fraction == pytest.approx(0.25 - CONTEXT_MB / 80_000)
    assert ("set_per_process_memory_fraction", (fraction, index)) in cuda_calls
    assert peak_memory_mb(device) == dict(zip(CUDA_PEAKS, (2.0, 4.0), strict=True))
    devices = [args[-1] for _, args in cuda_calls]
    assert devices and all(type(d) is int and d == index for d in devices), cuda_calls


def test_gpu_peaks_are_stored_beside_the_prediction_and_old_rows_read_without_them(tmp_path):
    def record(trial_id, memory):
        return store.TrialRecord(
            sweep="s",
            trial_id=trial_id,
            status="completed",
            config={"task": "wrn-cifar10"},
            metrics={"val_accuracy": 0.5},
            memory=memory,
            started_at=datetime.now(UTC),
            finished_at=datetime.now(UTC),
        )

    store.write_trial(tmp_path, record("old", {"predicted_total_mb": 10.0}))
    (old_file,) = tmp_path.rglob("*.parquet")  # as an earlier version wrote it: no peak columns
    table = pq.read_table(old_file)
    pq.write_table(table.drop(list(CUDA_PEAKS)), old_file)
    peaks = {
        "predicted_total_mb": 10.0,
        "cuda_max_allocated_mb": 11.5,
        "cuda_max_reserved_mb": 14.0,
    }
    store.write_trial(tmp_path, record("gpu", peaks))
    rows = store.read_trials(tmp_path, "s").set_index("trial_id")
    assert rows.loc["gpu", "memory.cuda_max_allocated_mb"] == 11.5
    assert rows.loc["gpu", "memory.cuda_max_reserved_mb"] == 14.0
    assert rows.loc["gpu", "memory.predicted_total_mb"] == 10.0
    assert math.isnan(rows.loc["old", "memory.cuda_max_reserved_mb"])


def test_a_restarted_trial_reports_its_stored_gpu_peaks(tmp_path):
    from tests.test_trainable import tiny_space  # imports Ray: here, so the module runs without

    space = tiny_space()
    peaks = {
        "predicted_total_mb": 12.5,
        "cuda_max_allocated_mb": 20.0,
        "cuda_max_reserved_mb": 24.0,
    }
    record = store.TrialRecord(
        sweep=space.name,
        trial_id="t1",
        status="completed",
        config=space.trial_config({"seed": 0}).to_flat(),
        metrics={"val_accuracy": 0.25},
        memory=peaks,
    )
    store.write_trial(tmp_path, record, epochs=[])
    reported = result_from_row(
        store.read_trials(tmp_path, space.name).iloc[0].to_dict(), space.objectives
    )
    assert reported["memory.cuda_max_allocated_mb"] == 20.0
    assert reported["memory.cuda_max_reserved_mb"] == 24.0


def test_an_auto_share_holds_the_cuda_prediction_s_reserved_bytes_and_context():
    """The share is sized from the driver's CUDA prediction (the resources' architecture, torch's
    rules): a card with a larger cuBLAS workspace asks for more, and the trial, making the same
    prediction, is held to the same share."""
    from tests.conftest import tiny_wrn_config
    from tune_lowmem.memory.share import driver_prediction, trial_share
    from tune_lowmem.space import Resources

    config = tiny_wrn_config(device="auto")
    hopper = Resources(cpu=1, gpu="auto", gpu_memory_mb=1_000.0, gpu_capability="9.0")
    ampere = Resources(cpu=1, gpu="auto", gpu_memory_mb=1_000.0, gpu_capability="8.0")
    predicted = driver_prediction(hopper, config)
    assert predicted.reserved_bytes >= predicted.run_peak_bytes > predicted.blas_bytes > 0
    share = trial_share(hopper, config)
    expected = (predicted.reserved_bytes + predicted.context_bytes) / 1e6 / 1_000.0
    assert share == pytest.approx(math.ceil(100 * expected) / 100)
    assert trial_share(ampere, config) < share  # 8 MiB cuBLAS workspaces, not 32 MiB
    assert trial_share(hopper, config) == share


def test_a_fixed_share_is_asked_for_and_held_as_given():
    from tune_lowmem.space import Resources

    assert trial_share(Resources(cpu=1, gpu=0.25), None) == 0.25
    assert trial_share(Resources(cpu=1, gpu=0), None) == 0.0
