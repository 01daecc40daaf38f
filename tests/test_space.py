"""Search spaces: every shipped YAML validates; every bad one is refused in one line, creating nothing."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from tune_lowmem import cli
from tune_lowmem.config import ConfigError
from tune_lowmem.memory.share import driver_prediction
from tune_lowmem.search import trial_resources
from tune_lowmem.search.samplers import build_sampler
from tune_lowmem.space import SearchSpace

SPACES = Path(__file__).resolve().parents[1] / "search_spaces"

GOOD = {
    "name": "ok",
    "base": {"device": "cpu", "model": {"depth": 10, "width": 1}, "schedule.batch_size": 20},
    "params": {
        "precision": {"type": "choice", "values": ["fp32", "bf16"]},
        "sparsity.density": {"type": "choice", "values": [0.3, 1.0]},
        "sparsity.period_multiplier": {"type": "loguniform", "low": 0.125, "high": 4},
        "schedule.lr_multiplier": {"type": "uniform", "low": 0.5, "high": 2.0},
    },
    "conditions": {"sparsity.period_multiplier": "sparsity.density < 1"},
    "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
    "num_samples": 4,
}


def with_changes(**changes) -> dict:
    """GOOD with top-level keys replaced (None: removed) and params changed by dotted name."""
    space = {**GOOD, "params": dict(GOOD["params"])}
    for key, value in changes.items():
        if key.startswith("param__"):
            name = key.removeprefix("param__").replace("__", ".")
            space["params"][name] = value
        elif value is None:
            space.pop(key)
        else:
            space[key] = value
    return space


# (space, the field the one-line error must name)
BAD = {
    "unknown top-level key": (with_changes(sampler_seeds=1), "sampler_seeds"),
    "objectives missing": (with_changes(objectives=None), "objectives"),
    "empty uniform range": (
        with_changes(param__schedule__lr_multiplier={"type": "uniform", "low": 2, "high": 2}),
        "params.schedule.lr_multiplier.high",
    ),
    "loguniform from zero": (
        with_changes(param__schedule__lr_multiplier={"type": "loguniform", "low": 0, "high": 2}),
        "params.schedule.lr_multiplier.low",
    ),
    "not a TrialConfig field": (
        with_changes(param__sparsity__densty={"type": "choice", "values": [0.5]}),
        "params.sparsity.densty",
    ),
    "microbatch that divides no batch": (
        with_changes(param__microbatch__size={"type": "choice", "values": [10, 7]}),
        "params.microbatch.size",
    ),
    "depth that is no WideResNet": (
        with_changes(param__model__depth={"type": "choice", "values": [10, 11]}),
        "params.model.depth",
    ),
    "uniform over an integer field": (
        with_changes(param__model__width={"type": "uniform", "low": 1, "high": 4}),
        "params.model.width",
    ),
    "unknown objective metric": (
        with_changes(objectives={"val_bleu": "maximize"}),
        "objectives.val_bleu",
    ),
    "unknown direction": (
        with_changes(objectives={"val_accuracy": "max"}),
        "objectives.val_accuracy",
    ),
    "grid over a range": (
        with_changes(sampler="grid", conditions=None, num_samples=None),
        "params.sparsity.period_multiplier",
    ),
    "grid larger than asked": (
        with_changes(
            sampler="grid",
            conditions=None,
            num_samples=5,
            params={"precision": {"type": "choice", "values": ["fp32", "bf16"]}},
        ),
        "num_samples",
    ),
    "unknown sampler": (with_changes(sampler="cmaes"), "sampler"),
    "unknown param type": (
        with_changes(param__schedule__lr_multiplier={"type": "normal", "low": 0, "high": 1}),
        "params.schedule.lr_multiplier.type",
    ),
    "empty choice": (
        with_changes(param__precision={"type": "choice", "values": []}),
        "params.precision.values",
    ),
    "key of another type": (
        with_changes(param__precision={"type": "uniform", "low": 0, "high": 1, "values": [1]}),
        "params.precision.values",
    ),
    "step that does not divide": (
        with_changes(param__model__width={"type": "int", "low": 1, "high": 4, "step": 2}),
        "params.model.width.step",
    ),
    "condition on a later param": (
        with_changes(conditions={"precision": "sparsity.density < 1"}),
        "conditions.precision",
    ),
    "condition never true": (
        with_changes(conditions={"sparsity.period_multiplier": "sparsity.density < 0.1"}),
        "conditions.sparsity.period_multiplier",
    ),
    "condition that is no comparison": (
        with_changes(conditions={"sparsity.period_multiplier": "density"}),
        "conditions.sparsity.period_multiplier",
    ),
    "unknown base field": (with_changes(base={"model": {"dept": 10}}), "base.model.dept"),
    "invalid base value": (with_changes(base={"precision": "fp8"}), "base.precision"),
    "seed searched": (
        with_changes(param__seed={"type": "int", "low": 0, "high": 3}),
        "params.seed",
    ),
    "num_samples missing": (with_changes(num_samples=None), "num_samples"),
    "negative budget": (with_changes(memory_budget_mb=-5), "memory_budget_mb"),
    "gpu auto without card memory": (
        with_changes(base={"device": "auto"}, resources={"gpu": "auto"}),
        "resources.gpu_memory_mb",
    ),
    "gpu for a cpu trial": (with_changes(resources={"gpu": 0.5}), "resources.gpu"),
    "unknown sampler option": (
        with_changes(sampler_options={"population_sizes": 4}),
        "sampler_options.population_sizes",
    ),
    "sweep name with a space": (with_changes(name="my sweep"), "name"),
    "exactness not true or false": (with_changes(exactness="no"), "exactness"),
    "a chain plan off the frontier": (
        with_changes(param__checkpoint={"type": "choice", "values": ["chain-0", "chain-9"]}),
        "params.checkpoint",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_space_gives_one_line_and_creates_nothing(case, tmp_path, capsys):
    space, field = BAD[case]
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    store = tmp_path / "store"
    assert cli.main(["launch", str(path), "--store", str(store)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"tune-lowmem launch: error: {field}: "), lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["space.yaml"]  # no store, no Ray folder
    import ray

    assert not ray.is_initialized()


@pytest.mark.parametrize(
    ("sampler", "cls"),
    [
        ("nsga2", "NSGAIISampler"),
        ("tpe", "TPESampler"),
        ("gp", "GPSampler"),
        ("random", "RandomSampler"),
    ],
)
def test_each_sampler_builds(sampler, cls):
    import optuna

    built = build_sampler(SearchSpace.from_dict(with_changes(sampler=sampler)))
    assert isinstance(built, getattr(optuna.samplers, cls))


def test_not_yaml_and_missing_file_are_one_line_errors(tmp_path, capsys):
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    assert cli.main(["launch", str(broken), "--store", str(tmp_path / "s")]) == 2
    assert cli.main(["launch", str(tmp_path / "absent.yaml"), "--store", str(tmp_path / "s")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert (
        len(lines) == 2 and "not valid YAML" in lines[0] and "no such search-space file" in lines[1]
    )
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("path", sorted(SPACES.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_spaces_validate_and_round_trip(path):
    space = SearchSpace.load(path)
    assert SearchSpace.from_dict(space.to_dict()) == space


def test_conditional_params_are_sampled_only_when_their_condition_holds():
    space = SearchSpace.from_dict(GOOD)
    study = optuna.create_study(
        directions=["maximize", "minimize"], sampler=optuna.samplers.RandomSampler(seed=0)
    )
    seen = set()
    for _ in range(40):
        params = space.sample(study.ask())
        seen.add(params["sparsity.density"])
        assert ("sparsity.period_multiplier" in params) == (params["sparsity.density"] < 1)
        config = space.trial_config({**params, "seed": 1})
        assert config.seed == 1 and config.model.depth == 10  # base under, point over
    assert seen == {0.3, 1.0}


def test_grid_defaults_to_every_point_and_relative_data_root_is_made_absolute(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    grid = with_changes(
        sampler="grid",
        conditions=None,
        num_samples=None,
        base={"device": "cpu", "data": {"root": "data"}},
        params={
            "precision": {"type": "choice", "values": ["fp32", "bf16"]},
            "microbatch.size": {"type": "choice", "values": [None, 10, 25]},
        },
    )
    space = SearchSpace.from_dict(grid)
    assert space.num_samples == 6
    assert space.base["data.root"] == str(tmp_path / "data")


def test_gpu_share_follows_predicted_memory():
    space = SearchSpace.from_dict(
        with_changes(base={"device": "auto"}, resources={"gpu": "auto", "gpu_memory_mb": 16000})
    )
    small = space.resources.gpu_share(100.0, 600.0)
    large = space.resources.gpu_share(10_000.0, 600.0)
    assert 0 < small < large <= 1.0
    assert small == pytest.approx((100 + 600) / 16000, abs=0.01)
    assert space.resources.gpu_share(1e6, 600.0) == 1.0
    params = {
        "precision": "fp32",
        "sparsity.density": 1.0,
        "schedule.lr_multiplier": 1.0,
        "seed": 0,
    }
    config = space.trial_config(params)
    predicted = driver_prediction(space.resources, config)
    assert trial_resources(space, {"point": 0, "params": params}) == {
        "cpu": 1,
        "gpu": space.resources.gpu_share(
            predicted.reserved_bytes / 1e6, predicted.context_bytes / 1e6
        ),
    }


def test_a_compute_capability_names_the_gpus_and_a_bad_one_is_one_line():
    space = SearchSpace.from_dict(
        with_changes(
            base={"device": "auto"},
            resources={"gpu": "auto", "gpu_memory_mb": 16000, "gpu_capability": 8.0},
        )
    )
    assert space.resources.capability == (8, 0)
    assert SearchSpace.from_dict(space.to_dict()).resources == space.resources
    with pytest.raises(ConfigError, match=r"resources.gpu_capability: 'hopper' is not allowed"):
        SearchSpace.from_dict(with_changes(resources={"gpu_capability": "hopper"}))
