import dataclasses

import pytest

from tune_lowmem.config import ConfigError, TrialConfig


def test_flat_nested_and_yaml_agree(tmp_path):
    flat = TrialConfig.from_dict(
        {"precision": "fp16", "microbatch.size": 10, "sparsity.density": 0.3}
    )
    nested = TrialConfig.from_dict(
        {"precision": "fp16", "microbatch": {"size": 10}, "sparsity": {"density": 0.3}}
    )
    path = tmp_path / "trial.yaml"
    path.write_text(flat.to_yaml())
    assert flat == nested == TrialConfig.from_yaml(path)
    assert TrialConfig.from_dict(flat.to_flat()) == flat


def test_task_picks_its_sections():
    config = TrialConfig.from_dict({"task": "dct-iwslt14", "schedule.max_updates": 10})
    assert type(config.model).__name__ == "DynamicConvConfig"
    assert config.schedule.max_updates == 10


def test_replace_changes_one_field():
    config = TrialConfig().replace(**{"sparsity.density": 0.5})
    assert config.sparsity.density == 0.5 and config.precision == "fp32"


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TrialConfig().precision = "fp16"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("values", "field", "allowed"),
    [
        ({"precision": "fp8"}, "precision", "fp32, fp16, bf16"),
        ({"microbatch.size": 30}, "microbatch.size", "divisor of schedule.batch_size 100"),
        ({"microbatch.mode": "fake"}, "microbatch.mode", "true, simulated"),
        ({"checkpoint": "residual-3"}, "checkpoint", "residual-2*"),
        ({"model.depth": 27}, "model.depth", "6n+4"),
        ({"model.width": 0}, "model.width", "positive integer"),
        ({"sparsity.density": 0}, "sparsity.density", "0 < value <= 1"),
        ({"sparsity.density": 1.5}, "sparsity.density", "0 < value <= 1"),
        ({"sparsity.rewiring": "sometimes"}, "sparsity.rewiring", "dynamic, static"),
        ({"schedule.lr_multiplier": -1}, "schedule.lr_multiplier", "positive"),
        ({"schedule.epochs": 2.5}, "schedule.epochs", "an integer"),
        ({"schedule.epochs": True}, "schedule.epochs", "an integer"),  # booleans are not numbers
        ({"schedule.epochs": 2**63}, "schedule.epochs", "within int64"),
        ({"schedule.milestones": 0.5}, "schedule.milestones", "a list of finite numbers"),
        ({"schedule.milestones": [0.5, True]}, "schedule.milestones", "a list of finite numbers"),
        ({"schedule.lr": float("nan")}, "schedule.lr", "a finite number"),
        ({"data.augment": 1}, "data.augment", "true or false"),
        ({"data.root": 5}, "data.root", "text or null"),
        ({"precision": 16}, "precision", "text"),
        ({"seed": 2**32}, "seed", "[0, 2**32)"),
        ({"task": "mnist"}, "task", "wrn-cifar10, tv-cifar10, dct-iwslt14"),
        ({"task": "no_such_module:Task"}, "task", "cannot be imported"),
        ({"task": "tune_lowmem.config:TrialConfig"}, "task", "not a subclass"),
        ({"bogus": 1}, "bogus", "unknown field"),
        ({"model.heads": 4}, "model.heads", "unknown field"),
        ({"task": "dct-iwslt14", "checkpoint": "residual-2"}, "checkpoint", "none, residual-1"),
        (
            {"task": "dct-iwslt14", "microbatch.mode": "simulated"},
            "microbatch.mode",
            "allowed: true",
        ),
        ({"data.split": "all"}, "data.split", "search, final"),
        ({"seed": -1}, "seed", "[0, 2**32)"),
    ],
)
def test_invalid_configs_name_the_field(values, field, allowed):
    with pytest.raises(ConfigError) as error:
        TrialConfig.from_dict(values)
    assert error.value.field == field
    assert str(error.value).startswith(f"{field}: ")
    assert allowed in str(error.value)
    assert "\n" not in str(error.value)


def test_config_error_survives_pickling_and_copying():
    """Ray sends a worker's exceptions to the driver pickled; the message must come back whole."""
    import copy
    import pickle

    error = ConfigError("sparsity.density", "0 is not allowed; 0 < value <= 1 is required")
    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert (clone.field, clone.reason, str(clone)) == (error.field, error.reason, str(error))


def test_profiler_modules_are_not_hidden_by_their_functions():
    import importlib

    for name in ("predict", "measure"):
        module = importlib.import_module(f"tune_lowmem.memory.{name}")
        assert module.__name__ == f"tune_lowmem.memory.{name}" and callable(getattr(module, name))


def test_attempt_is_the_config_from_dict_builds_or_the_error_it_raises():
    assert TrialConfig.attempt({"precision": "bf16"}) == TrialConfig.from_dict(
        {"precision": "bf16"}
    )
    refused = TrialConfig.attempt({"precision": "fp8"})
    with pytest.raises(ConfigError) as raised:
        TrialConfig.from_dict({"precision": "fp8"})
    assert isinstance(refused, ConfigError) and str(refused) == str(raised.value)
