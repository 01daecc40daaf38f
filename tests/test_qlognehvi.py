"""The qlognehvi sampler (BoTorch's qLogNEHVI, the memory a deterministic model): it asks as the
known-memory sampler does (exactness, no repeats, the same ask after a restart), finds a front
faster than random, integrates running points, and says so in one line without BoTorch."""

from __future__ import annotations

import numpy as np
import pytest

from tune_lowmem.config import ConfigError
from tune_lowmem.search.samplers import build_sampler

from .test_known_memory import memory, run_study, table_space, trials_to_front

qlognehvi = pytest.importorskip("tune_lowmem.search.samplers.qlognehvi")
pytest.importorskip("botorch")


def built(**fields) -> qlognehvi.QLogNEHVISampler:
    space, _ = table_space(sampler="qlognehvi", **fields)
    sampler = build_sampler(space)
    sampler.memory = memory
    return sampler


def test_without_botorch_a_space_naming_it_gets_a_one_line_error(monkeypatch):
    monkeypatch.setattr(qlognehvi, "qLogNoisyExpectedHypervolumeImprovement", None)
    with pytest.raises(ConfigError, match=r"^sampler: qlognehvi needs BoTorch.*\[botorch\]"):
        build_sampler(table_space(sampler="qlognehvi")[0])


def test_a_sampler_rebuilt_on_the_study_asks_the_same_point():
    """The fit's and the Monte Carlo samples' draws come from the sampler's seed: two samplers
    of one seed on one study choose the same point, one not asked before."""
    space, _ = table_space(sampler="qlognehvi", sampler_seed=3)
    study = run_study(space, built(sampler_seed=3), 7)
    trials = study.get_trials()
    chosen = [built(sampler_seed=3).choose(trials, len(trials)) for _ in range(2)]
    assert chosen[0] == chosen[1]
    assert chosen[0] not in [t.params for t in trials]


def test_it_finds_the_front_on_a_recorded_grid_faster_than_random():
    ours = np.median([trials_to_front("qlognehvi", s) for s in range(5)])
    random = np.median([trials_to_front("random", s) for s in range(5)])
    assert ours < random


def test_a_running_point_lowers_the_gain_of_asking_it_again():
    """Running points are pending in the acquisition (integrated over): the candidate that would
    add the most were nothing running adds less than half of that beside a running copy of
    itself (a candidate that adds next to nothing alone, e**-7, cannot show it)."""
    sampler = built(sampler_seed=0)
    study = run_study(sampler.space, sampler, 6)
    told = study.get_trials()
    options = [
        [{"precision": precision, "sparsity.density": density, "schedule.lr_multiplier": lr}]
        for precision in ("fp32", "bf16")
        for density in (0.1, 0.3, 1.0)
        for lr in (0.5, 1.0, 2.0)
    ]
    for (option,) in options:
        if option["precision"] == "bf16":
            option["precision_update"] = "nearest"
    log_memory = np.log10([memory(o[0]) for o in options])
    which = np.arange(len(options))
    alone = sampler.improvement(options, told, told, [])(which, log_memory)
    top = int(np.argmax(alone))
    beside = sampler.improvement(options, told, told, [options[top][0]])(which, log_memory)
    assert alone[top] > -4  # a real improvement to lose (after 8 points none is left)
    assert beside[top] < alone[top] - np.log(2)  # log improvements: under half


def test_a_fit_that_fails_every_start_still_asks(monkeypatch):
    """BoTorch raises when every start of the fit stops short (seen on the ViT table): the
    sampler asks with the GP's initial hyperparameters instead of failing the sweep."""
    from botorch.exceptions.errors import ModelFittingError

    def failing(mll, **options):
        raise ModelFittingError("All attempts to fit the model have failed.")

    sampler = built(sampler_seed=0)
    study = run_study(sampler.space, sampler, 6)
    monkeypatch.setattr(qlognehvi, "fit_gpytorch_mll", failing)
    trials = study.get_trials()
    chosen = sampler.choose(trials, len(trials))
    assert chosen is not None and chosen not in [t.params for t in trials]
