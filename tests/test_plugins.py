"""Tasks, techniques and samplers as plug-ins: one registry rule for the three kinds, a user's
task named module:attribute runs a real sweep, and every registered technique has the one
shape."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from tests.plugin_install import install, launch
from tune_lowmem import store
from tune_lowmem.config import ConfigError, TrialConfig
from tune_lowmem.memory.measure import measure
from tune_lowmem.memory.predict import predict
from tune_lowmem.plugins import (
    SAMPLERS,
    TASKS,
    TECHNIQUES,
    plugins_folder,
    step_runner,
    technique_settings,
    techniques,
)
from tune_lowmem.space.sampler_settings import sampler_settings
from tune_lowmem.tasks.base import Task
from tune_lowmem.techniques.base import Technique
from tune_lowmem.train import Trainer

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).with_name("tune-lowmem"))
TINY_TASK = "tests.tiny_task:TinyBlobs"


def test_a_user_task_by_module_attribute_trains_and_is_profiled():
    config = TrialConfig.from_dict({"task": TINY_TASK, "device": "cpu", "schedule.epochs": 3})
    assert type(config.model).__name__ == "BlobModel" and config.data.train == 192
    history = Trainer(config).run()
    assert history[-1]["val_accuracy"] > 0.6  # three well separated blobs; chance is 1/3
    report = predict(config.replace(checkpoint="blocks-1", precision="bf16"))
    assert report.total_bytes > 0 and report.model_bytes == sum(
        p.numel() * 2
        for p in TASKS.get(TINY_TASK)(config, torch.device("cpu")).build_model().parameters()
    )
    with pytest.raises(
        ConfigError, match=r"^checkpoint: 'blocks-2' is not allowed; allowed: none, blocks-1$"
    ):
        config.replace(checkpoint="blocks-2")
    with pytest.raises(ConfigError, match=r"^model\.depth: unknown field"):
        TrialConfig.from_dict({"task": TINY_TASK, "model.depth": 16})


def test_a_user_task_runs_a_sweep_through_launch_and_answers_pareto(tmp_path):
    space = {
        "name": "blobs",
        "base": {"task": TINY_TASK, "device": "cpu", "schedule": {"epochs": 2}},
        "params": {
            "precision": {"type": "choice", "values": ["fp32", "bf16"]},
            "sparsity.density": {"type": "choice", "values": [0.5, 1.0]},
        },
        "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
        "sampler": "grid",
        "max_concurrent": 2,
        "baseline": False,
    }
    path = tmp_path / "blobs.yaml"
    path.write_text(yaml.safe_dump(space))
    store_root = tmp_path / "store"
    run = launch(path, store_root)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = store.read_trials(store_root, "blobs")
    assert sorted(rows["status"]) == ["completed"] * 4
    assert (rows["config.task"] == TINY_TASK).all() and (rows["metric.val_accuracy"] > 0.5).all()
    answer = subprocess.run(
        [CLI, "pareto", "--store", str(store_root), "--sweep", "blobs", "--format", "csv"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert answer.returncode == 0, answer.stderr[-3000:]
    front = pd.read_csv(io.StringIO(answer.stdout))
    chosen = {t for ids in front["trial_ids"] for t in json.loads(ids)}
    assert chosen and chosen <= set(rows["trial_id"])  # the front names the trials it chose


def test_unknown_task_names_the_registered_ones():
    with pytest.raises(ConfigError) as error:
        TrialConfig.from_dict({"task": "imagenet"})
    assert error.value.field == "task"
    for name in TASKS.builtin:
        assert name in str(error.value)


# Each kind: its registry, a built-in name, a class of it named module:attribute, a config's or
# a space's field that names one, and what naming it there builds.
KINDS = {
    "task": (TASKS, "tv-cifar10", TINY_TASK, lambda n: TrialConfig.from_dict({"task": n})),
    "sampler": (
        SAMPLERS,
        "tpe",
        "tests.cheapest_first:CheapestFirst",
        lambda n: sampler_settings(n, {}),
    ),
    "step_runner": (
        TECHNIQUES,
        "precision",
        "tests.test_step_runner:PlainStep",
        lambda n: TrialConfig.from_dict({"task": TINY_TASK, "step_runner": n}),
    ),
}


@pytest.mark.parametrize("field", sorted(KINDS))
def test_one_registry_rule_names_a_task_a_sampler_and_a_technique(field):
    """A built-in name, package.module:attribute, and the one wording of a name that names
    nothing, or something not of the kind, for each kind of plug-in."""
    registry, builtin, by_module, named_in = KINDS[field]
    assert registry.get(builtin, field) is registry.get(builtin)  # one class, looked up once
    assert registry.get(by_module, field).__name__ == by_module.split(":")[1]
    named_in(builtin), named_in(by_module)  # a config or a space takes either
    allowed = ", ".join(registry.names())
    with pytest.raises(ConfigError) as unknown:
        named_in("nothing-of-the-kind")
    assert str(unknown.value) == (
        f"{field}: 'nothing-of-the-kind' is not allowed; allowed: {allowed}, "
        "or package.module:attribute"
    )
    with pytest.raises(ConfigError, match=rf"^{field}: 'no_such_module:X' cannot be imported"):
        named_in("no_such_module:X")
    base = registry.base.replace(":", ".")
    with pytest.raises(
        ConfigError,
        match=rf"^{field}: 'tune_lowmem.config:TrialConfig' is <.*>, not a subclass of {base}$",
    ):
        named_in("tune_lowmem.config:TrialConfig")


def test_a_plugin_named_from_the_working_directory_puts_it_on_the_workers_path(
    tmp_path, monkeypatch
):
    TASKS.get(TINY_TASK)  # as reading a space that names it does
    monkeypatch.chdir(ROOT)
    assert plugins_folder() == str(ROOT)
    monkeypatch.chdir(tmp_path)  # the module is not the working directory's
    assert plugins_folder() is None


def test_an_entry_point_named_as_a_built_in_is_not_seen(tmp_path, monkeypatch):
    """A built-in name is declared once: a package registering the same name does not replace
    it, for any kind."""
    for registry, builtin in ((TASKS, "wrn-cifar10"), (SAMPLERS, "tpe"), (TECHNIQUES, "sparsity")):
        folder = tmp_path / registry.field
        site = install(folder, f"shadow-{registry.field}", registry.group, {builtin: TINY_TASK})
        monkeypatch.syspath_prepend(str(site))
        assert registry.names().count(builtin) == 1
        assert registry.get(builtin).__module__.startswith(("tune_lowmem.", "optuna."))


@pytest.mark.parametrize("name", list(TASKS.builtin) + [TINY_TASK])
def test_every_task_declares_its_sections_metrics_and_synthetic_batch(name):
    task = TASKS.get(name)
    assert issubclass(task, Task)
    config = TrialConfig.from_dict({"task": name, "device": "cpu"})
    for section, cls in task.sections().items():
        assert isinstance(getattr(config, section), cls) and dataclasses.is_dataclass(cls)
    assert task.METRICS and all(
        m.direction in ("maximize", "minimize") for m in task.METRICS.values()
    )
    assert "none" in task.CHECKPOINT_STRATEGIES
    synthetic = task(config, torch.device("cpu"), synthetic=True)
    assert next(iter(synthetic.train_batches(0))) is not None


def test_a_technique_reads_what_it_needs_of_a_task_or_the_default_it_declares():
    """`TASK_NEEDS` belong to the techniques, not to the `Task` interface: a task that sets
    none is read each technique's default, one that sets one is read its own."""
    from tune_lowmem.models.strategies import GENERIC_STRATEGIES
    from tune_lowmem.techniques.checkpointing import Checkpointing

    needs = {name: t for t in techniques() for name in t.TASK_NEEDS}
    assert {"CHECKPOINT_STRATEGIES", "MICROBATCH_MODES", "PAPER_UPDATES"} <= set(needs)
    for name, technique in needs.items():
        assert not hasattr(Task, name), name
        assert technique.task_needs(Task, name) == technique.TASK_NEEDS[name]
    tv = TASKS.get("tv-cifar10")
    assert Checkpointing.task_needs(tv, "CHECKPOINT_STRATEGIES") == GENERIC_STRATEGIES


def test_every_registered_technique_has_config_validation_and_memory_contribution():
    config = TrialConfig.from_dict({"task": "wrn-cifar10", "model.depth": 10, "device": "cpu"})
    task = TASKS.get(config.task)
    flat = config.to_flat()
    names = set()
    for technique in techniques():
        assert issubclass(technique, Technique)
        names.add(technique.NAME)
        for method in ("enabled", "validate", "shape_settings"):  # each overrides the interface
            assert getattr(technique, method).__func__ is not getattr(Technique, method).__func__
        assert technique.validate(config, task) is None
        assert isinstance(technique.enabled(config), bool)
        assert set(technique.shape_settings(config)) <= set(flat)
        model = task(config, torch.device("cpu"), synthetic=True).build_model()
        assert technique.weight_bytes(model) == {}  # a dense model holds nothing compressed
        assert technique.occasional_work(config) is False  # nor works between its steps
        assert technique.peak_updates(config) == []
    assert len(names) == len(techniques())
    # the config's technique fields are exactly the registered settings, each at its default
    assert [name for name, _ in config.settings] == [s.name for s in technique_settings()]
    for setting in technique_settings():
        assert getattr(config, setting.name) == setting.default_value()
    assert step_runner(config).NAME == config.step_runner == "precision"  # the default step
    listed = {t.NAME: t.SETTINGS for t in techniques() if "SETTINGS" in t.__dict__}
    assert all(s in technique_settings() for own in listed.values() for s in own)


def test_profile_json_of_a_user_task(capsys):
    from tune_lowmem.cli import main

    assert main(["profile", "--set", f"task={TINY_TASK}", "--set", "device=cpu", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["predicted"]["predicted_total_mb"] > 0


def test_measured_and_predicted_agree_for_a_user_task():
    config = TrialConfig.from_dict({"task": TINY_TASK, "device": "cpu", "schedule.batch_size": 64})
    predicted, measured = predict(config), measure(config)
    assert predicted.model_bytes == measured.model_bytes
    assert predicted.optimizer_bytes == measured.optimizer_bytes
