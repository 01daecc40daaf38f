"""How a sweep's params reach its sampler (no Ray): an ordered choice as its rank, no dimension
for the choices exactness decides, decided when the study is created and kept in it, so a
journal an earlier version wrote (every choice a category) still resumes."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.storages import JournalStorage
from optuna.trial import FixedTrial, TrialState

from tune_lowmem.config import ConfigError
from tune_lowmem.search import journal, place, sweep_folder
from tune_lowmem.search.representation import REPRESENTATION, Representation
from tune_lowmem.search.searcher import ScreenedSearcher, objective_names
from tune_lowmem.space import SearchSpace

from .test_search import OBJECTIVES, TINY_BASE

PARAMS = {
    "sparsity.density": {"type": "choice", "values": [1.0, 0.3, 0.5]},  # numbers: by value
    "precision": {"type": "choice", "values": ["fp32", "bf16"]},  # unordered
    "microbatch.size": {"type": "choice", "values": [None, 10, 4], "ordered": True},
    "checkpoint": {"type": "choice", "values": ["none", "residual-1"]},  # every value exact
    "fused_step": {"type": "choice", "values": ["none", "exact", "heavy-ball"]},  # two exact
}


def space_of(sampler: str = "random", **fields) -> SearchSpace:
    return SearchSpace.from_dict(
        {
            "name": "unit",
            "base": TINY_BASE,
            "objectives": OBJECTIVES,
            "sampler": sampler,
            "num_samples": 6,
            "params": PARAMS,
            "baseline": False,  # the sampler's points alone
            **fields,
        }
    )


def test_an_ordered_choice_is_numbers_or_declared():
    space = space_of()
    orders = {p.name: p.order() for p in space.params}
    assert orders["sparsity.density"] == (0.3, 0.5, 1.0)
    assert orders["microbatch.size"] == (None, 10, 4)
    assert orders["precision"] is None and orders["checkpoint"] is None
    raw = {"type": "choice", "values": [1.0, 0.3], "ordered": False}
    assert space_of(params={**PARAMS, "sparsity.density": raw}).params[0].order() is None
    assert SearchSpace.from_dict(space.to_dict()) == space
    with pytest.raises(ConfigError, match=r"^params.precision.ordered: 'yes' is not allowed; "):
        space_of(params={**PARAMS, "precision": {**PARAMS["precision"], "ordered": "yes"}})


@pytest.mark.parametrize("sampler", ["random", "tpe", "nsga2", "gp"])
def test_optunas_samplers_are_asked_ordered_choices_as_ranks(sampler):
    represented = Representation.of(space_of(sampler))
    assert represented == Representation(
        ordered=("sparsity.density", "microbatch.size"),
        hidden=("checkpoint",),
        merged=("fused_step",),
    )
    assert Representation.of(space_of(sampler, exactness=False)) == Representation(
        ordered=("sparsity.density", "microbatch.size")
    )


@pytest.mark.parametrize("sampler", ["known-memory", "grid"])
def test_samplers_that_read_the_space_or_list_it_are_asked_categories(sampler):
    fields = {"num_samples": None} if sampler == "grid" else {}
    assert Representation.of(space_of(sampler, **fields)) == Representation()


def test_a_choice_a_condition_reads_stays_asked():
    """A condition on fused_step: its value decides what is sampled, so it is asked whole."""
    params = {**PARAMS, "sparsity.period_multiplier": {"type": "loguniform", "low": 1, "high": 4}}
    space = space_of(params=params, conditions={"sparsity.period_multiplier": "fused_step != none"})
    assert "fused_step" not in Representation.of(space).merged


def searcher_of(space: SearchSpace, root) -> ScreenedSearcher:
    sweep_folder(place.bind("unit", root), "unit").mkdir(parents=True, exist_ok=True)
    return ScreenedSearcher(space, "unit")


def test_a_sweep_asks_ranks_and_trains_values(tmp_path):
    """The journal holds what the sampler was asked (ranks, no exact choice, one exact
    fused step for both); the searcher hands out values, at the least-memory variant; the
    representation is kept in the study and a restarted searcher reads the same points."""
    space = space_of("tpe")
    searcher = searcher_of(space, tmp_path)
    handed = [searcher.suggest(f"t{i}")["params"] for i in range(4)]
    trials = searcher.study.get_trials()
    assert searcher.study.user_attrs[REPRESENTATION]["ordered"] == [
        "sparsity.density",
        "microbatch.size",
    ]
    for trial in trials:
        assert isinstance(trial.distributions["sparsity.density"], IntDistribution)
        assert isinstance(trial.distributions["microbatch.size"], IntDistribution)
        assert trial.distributions["fused_step"] == CategoricalDistribution(["none", "heavy-ball"])
        assert "checkpoint" not in trial.params
    for point in handed:
        assert point["sparsity.density"] in (1.0, 0.3, 0.5)
        assert point["microbatch.size"] in (None, 10, 4)
        assert point["checkpoint"] == "residual-1"  # exactness: the least memory
    restarted = searcher_of(space, tmp_path)
    assert [restarted.trained(t) for t in trials] == [searcher.trained(t) for t in trials]


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_journal_an_earlier_version_wrote_resumes_with_categories(tmp_path):
    """An earlier version created the study with every choice a category and no representation
    recorded: the sweep resumes asking so (Optuna refuses a distribution changed within a
    study, as asking a rank of that study shows)."""
    space = space_of("tpe")
    sweep_folder(place.bind("unit", tmp_path), "unit").mkdir(parents=True)
    path = sweep_folder(tmp_path, "unit") / journal.JOURNAL
    old = optuna.create_study(
        study_name="unit",
        storage=JournalStorage(journal.open_journal(path)),
        directions=list(OBJECTIVES.values()),
    )
    old.set_metric_names(objective_names(space))
    for value in (0.3, 0.5):
        trial = old.ask()
        space.sample(trial)  # the earlier ask: every choice a category
        old.tell(trial, [value, 5.0])
    with pytest.raises(ValueError, match="different distribution kind"):
        space.sample(Representation.of(space).asking(old.ask(), space))
    searcher = ScreenedSearcher(space, "unit")
    assert searcher.representation == Representation()
    assert REPRESENTATION not in searcher.study.user_attrs
    point = searcher.suggest("t0")["params"]
    asked = [t for t in searcher.study.get_trials() if t.state == TrialState.RUNNING][-1]
    assert isinstance(asked.distributions["sparsity.density"], CategoricalDistribution)
    assert asked.params["checkpoint"] in ("none", "residual-1")
    assert point["sparsity.density"] == asked.params["sparsity.density"]


def test_a_journals_ranks_read_back_as_values():
    space = space_of()
    asking = Representation.of(space).asking
    journal_params = {"sparsity.density": 0, "precision": "bf16", "microbatch.size": 2}
    point = space.sample(asking(FixedTrial({**journal_params, "fused_step": "heavy-ball"}), space))
    assert point == {
        "sparsity.density": 0.3,
        "precision": "bf16",
        "microbatch.size": 4,
        "checkpoint": "none",
        "fused_step": "heavy-ball",
    }
