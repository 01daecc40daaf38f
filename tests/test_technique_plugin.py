"""A technique from outside the package (tests/int8_activations.py), installed the way a user's
package is (its metadata with an entry point on the import path): it becomes a config field, the
profiler predicts its memory, a trial trains with it, and a real sweep searches it, while no file
of tune_lowmem names it."""

from __future__ import annotations

import json

import pytest
import yaml

from tune_lowmem import store
from tune_lowmem.config import ConfigError, TrialConfig
from tune_lowmem.memory.predict import predict
from tune_lowmem.plugins import TECHNIQUES, techniques
from tune_lowmem.search.exact import SAME_TRAINING, training_key
from tune_lowmem.train import Trainer

from .plugin_install import ROOT, install, launch

TINY_TASK = "tests.tiny_task:TinyBlobs"
# eight blocks whose activations outweigh their weights: where int8 activations save memory
DEEP = {"model.blocks": 8, "model.hidden": 64, "schedule.batch_size": 1024, "data.train": 2048}


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A package that registers tests/int8_activations.py, installed on the path."""
    entries = {"int8_activations": "tests.int8_activations:Int8Activations"}
    site = install(tmp_path / "site", "int8-activations-plugin", TECHNIQUES.group, entries)
    monkeypatch.syspath_prepend(str(site))
    return site


def test_the_package_names_no_plugin_technique():
    for path in (ROOT / "tune_lowmem").rglob("*.py"):
        assert "int8_activations" not in path.read_text(), path


# The layers every technique passes through, which know techniques only by their interface.
AGNOSTIC = (
    "config.py",
    "train.py",
    "space",
    "store",
    "memory",
    "tasks",
)


def test_the_config_store_tasks_training_loop_and_profiler_name_no_technique():
    """Their code imports no technique module but the interface (`techniques.base`), and reads
    no built-in technique's config section or key (`config.sparsity`, "sparsity.storage")."""
    import ast

    from tune_lowmem.plugins import BUILTIN_TECHNIQUES

    package = ROOT / "tune_lowmem"
    paths = [p for part in AGNOSTIC for p in sorted((package / part).glob("**/*.py"))]
    paths += [package / part for part in AGNOSTIC if part.endswith(".py")]
    assert len(paths) > len(AGNOSTIC)
    for path in paths:
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and "techniques" in (node.module or ""):
                modules = [node.module]  # from ..techniques import microbatch: each name
                if node.module.endswith("techniques"):
                    modules = [f"{node.module}.{alias.name}" for alias in node.names]
                found |= {f"import {m}" for m in modules if not m.endswith("techniques.base")}
            if isinstance(node, ast.Attribute) and node.attr in BUILTIN_TECHNIQUES:
                found.add(f"attribute {node.attr}")
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and text.split(".")[0] in BUILTIN_TECHNIQUES:
                found.add(f"string {text}")
        name = path.relative_to(package).as_posix()
        assert not found, (name, found)


def test_an_installed_technique_is_a_config_field_profiled_and_trained(installed):
    names = [t.NAME for t in techniques()]
    assert names[-1] == "int8_activations" and "precision" in names
    plain = TrialConfig.from_dict({"task": TINY_TASK, "device": "cpu", "schedule.epochs": 3})
    assert plain.int8_activations is False and plain.to_flat()["int8_activations"] is False
    with pytest.raises(ConfigError, match=r"^int8_activations: 1 is not allowed; true or false"):
        plain.replace(int8_activations=1)

    # its memory contribution: the dry run keeps the saved activations of a deep MLP as int8
    deep = plain.replace(**DEEP)
    before, after = predict(deep), predict(deep.replace(int8_activations=True))
    assert after.activation_bytes < 0.85 * before.activation_bytes
    assert (after.model_bytes, after.optimizer_bytes) == (
        before.model_bytes,
        before.optimizer_bytes,
    )

    history = Trainer(plain.replace(int8_activations=True)).run()
    assert history[-1]["int8_packed_tensors"] > 0  # its hooks held the activations
    assert history[-1]["val_accuracy"] > 0.6  # three well separated blobs; chance is 1/3
    assert Trainer(plain).run()[-1]["int8_packed_tensors"] == 0


def test_an_installed_techniques_declared_exact_value_shares_a_training_key(installed):
    """Its `EXACT` (off trains as the plain step) reaches the search with no change to it."""
    key = json.loads(training_key({"int8_activations": False, "checkpoint": "none"}))
    assert key == {"int8_activations": SAME_TRAINING, "checkpoint": SAME_TRAINING}
    assert json.loads(training_key({"int8_activations": True}))["int8_activations"] is True


def test_an_installed_technique_is_searched_by_a_real_sweep(installed, tmp_path):
    space = {
        "name": "int8",
        "base": {"task": TINY_TASK, "device": "cpu", "schedule.epochs": 2, **DEEP},
        "params": {"int8_activations": {"type": "choice", "values": [False, True]}},
        "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
        "sampler": "grid",
        "max_concurrent": 2,
        "baseline": False,
    }
    path = tmp_path / "int8.yaml"
    path.write_text(yaml.safe_dump(space))
    run = launch(path, tmp_path / "store", installed)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = store.read_trials(tmp_path / "store", "int8").set_index("config.int8_activations")
    assert sorted(rows.index) == [False, True]
    assert (rows["status"] == "completed").all()
    assert rows.loc[True, "metric.int8_packed_tensors"] > 0
    assert rows.loc[False, "metric.int8_packed_tensors"] == 0
    assert (
        rows.loc[True, "memory.predicted_activation_mb"]
        < rows.loc[False, "memory.predicted_activation_mb"]
    )
