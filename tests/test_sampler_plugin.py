"""A sampler from outside the package (tests/cheapest_first.py), installed the way a user's
package is (its metadata with an entry point on the import path), or named by
package.module:attribute: a space names it, its options and what it declares it needs (the grid,
the known memory) are checked when the space is read and given to it, and a real sweep runs its
points in its order, while no file of tune_lowmem names it."""

from __future__ import annotations

import pickle

import pytest
import yaml

from tune_lowmem import store
from tune_lowmem.config import ConfigError
from tune_lowmem.plugins import SAMPLERS
from tune_lowmem.search.samplers import build_sampler
from tune_lowmem.space import SearchSpace

from .cheapest_first import CheapestFirst
from .plugin_install import ROOT, install, launch

NAME = "cheapest-first"
HIDDEN = [32, 8, 16]  # the tiny task's width: memory grows with it
SPACE = {
    "name": "cheapest",
    "base": {"task": "tests.tiny_task:TinyBlobs", "device": "cpu", "schedule.epochs": 1},
    "params": {"model.hidden": {"type": "choice", "values": HIDDEN}},
    "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
    "sampler": NAME,
    "baseline": False,
}


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A package that registers tests/cheapest_first.py, installed on the path."""
    entries = {NAME: "tests.cheapest_first:CheapestFirst"}
    site = install(tmp_path / "site", "cheapest-first-plugin", SAMPLERS.group, entries)
    monkeypatch.syspath_prepend(str(site))
    return site


def test_the_package_names_no_plugin_sampler():
    for path in (ROOT / "tune_lowmem").rglob("*.py"):
        text = path.read_text()
        assert NAME not in text and "cheapest_first" not in text, path


def test_a_space_names_an_installed_sampler_and_gets_what_it_declares(installed):
    with pytest.raises(
        ConfigError,
        match=f"^sampler: 'CHEAP' is not allowed; allowed: .*, {NAME}, or package.module:attribute$",
    ):
        SearchSpace.from_dict({**SPACE, "sampler": "CHEAP"})  # the names listed, its own last
    space = SearchSpace.from_dict(SPACE)
    assert (space.sampler.cls, space.sampler.needs) == (CheapestFirst, ("grid", "memory"))
    assert space.num_samples == len(HIDDEN)  # it needs the grid: the whole grid by default
    sampler = build_sampler(space)
    assert isinstance(sampler, CheapestFirst) and sampler.grid == {"model.hidden": HIDDEN}
    memories = [sampler.memory({"model.hidden": h}) for h in sorted(HIDDEN)]
    assert memories == sorted(memories) and memories[0] < memories[-1]  # the profiler's

    searched_range = {"model.hidden": {"type": "int", "low": 8, "high": 32}}
    with pytest.raises(
        ConfigError, match=f"^params.model.hidden: type int is not allowed with sampler {NAME}"
    ):
        SearchSpace.from_dict({**SPACE, "params": searched_range})
    with pytest.raises(ConfigError, match="^sampler_options.grid: not an option"):
        SearchSpace.from_dict({**SPACE, "sampler_options": {"grid": {}}})  # with the file
    measured = {"val_accuracy": "maximize", "memory.measured_total_mb": "minimize"}
    with pytest.raises(ConfigError, match=f"^objectives: sampler {NAME} needs an objective"):
        build_sampler(SearchSpace.from_dict({**SPACE, "objectives": measured}))


def test_an_uninstalled_sampler_is_not_a_sampler_but_its_module_attribute_is():
    assert NAME not in SAMPLERS.names()
    with pytest.raises(ConfigError, match=f"^sampler: '{NAME}' is not allowed"):
        SearchSpace.from_dict(SPACE)
    by_module = SearchSpace.from_dict({**SPACE, "sampler": "tests.cheapest_first:CheapestFirst"})
    assert isinstance(build_sampler(by_module), CheapestFirst)
    assert by_module.to_dict()["sampler"] == "tests.cheapest_first:CheapestFirst"  # as named


def test_a_pickled_space_resolves_its_sampler_when_read(installed):
    """A space is pickled (Tune's searcher state) with its sampler as named; one pickled before
    the sampler was resolved (an older sweep's) holds the name and options apart."""
    space = SearchSpace.from_dict({**SPACE, "sampler_options": {}})
    assert pickle.loads(pickle.dumps(space)) == space
    older = object.__new__(SearchSpace)
    older.__dict__.update(
        {**space.__dict__, "sampler": NAME, "sampler_options": {}}  # as older versions held it
    )
    assert pickle.loads(pickle.dumps(older)) == space


def test_an_installed_sampler_sweeps_a_space_through_launch(installed, tmp_path):
    path = tmp_path / "cheapest.yaml"
    path.write_text(yaml.safe_dump({**SPACE, "max_concurrent": 1}))
    run = launch(path, tmp_path / "store", installed)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = store.read_trials(tmp_path / "store", "cheapest").sort_values("point")
    assert (rows["status"] == "completed").all() and set(rows["sampler"]) == {NAME}
    assert list(rows["config.model.hidden"]) == sorted(HIDDEN)  # asked least memory first
    assert rows["memory.predicted_total_mb"].is_monotonic_increasing
