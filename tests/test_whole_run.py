"""A whole run measured: the trial's schedule on its data with every evaluation and a checkpoint
saved and restored after each epoch, under torch's CPU allocator's reports, against the
searched run peak."""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.conftest import tiny_wrn_config
from tune_lowmem.cli import main
from tune_lowmem.memory.predict import run_peak_storage
from tune_lowmem.memory.whole_run import measure_run


@pytest.mark.parametrize(
    "flat",
    [{}, {"microbatch.size": 10, "checkpoint": "residual-1"}, {"sparsity.density": 0.3}],
    ids=["dense", "microbatched and checkpointed", "sparse, rewiring"],
)
def test_the_whole_run_s_peak_is_the_searched_run_peak(flat):
    config = tiny_wrn_config(**{"schedule.epochs": 2, "data.train_subset": 60, **flat})
    run = measure_run(config)
    assert (run.device, run.epochs, run.updates, run.checkpoints) == ("cpu", 2, 6, 2)
    assert run.events > 0
    assert run.peak_during in ("training", "evaluation", "checkpoint save and restore")
    assert run.peak_bytes == pytest.approx(run_peak_storage(config), rel=0.01)


def test_the_data_set_s_host_copy_is_not_the_run_s():
    """Twice the training images, the same steps: the same peak (the copy would add 0.3 MB)."""
    small = measure_run(tiny_wrn_config(**{"data.train_subset": 100}), checkpoints=False)
    large = measure_run(tiny_wrn_config(**{"data.train_subset": 200}), checkpoints=False)
    assert small.checkpoints == large.checkpoints == 0
    assert large.updates == 2 * small.updates
    assert large.peak_bytes == pytest.approx(small.peak_bytes, abs=20_000)


def test_profile_measures_a_whole_run_when_asked_and_only_with_measure():
    flat = ["model.depth=10", "model.width=1", "schedule.epochs=1", "schedule.batch_size=20"]
    flat += ["data.train_subset=40", "data.val_size=20", "data.test_subset=20", "device=cpu"]
    args = [f"--set={item}" for item in flat]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["profile", "--whole-run", *args]) == 2
    assert err.getvalue().strip() == (
        "tune-lowmem profile: error: --whole-run: is a measurement: --measure is required with it"
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["profile", "--measure", "--whole-run", *args]) == 0
    (line,) = [line for line in out.getvalue().splitlines() if line.startswith("the whole run")]
    assert "(1 epoch, 2 updates, an evaluation and a checkpoint saved and restored" in line
