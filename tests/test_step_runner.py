"""The step protocol (`techniques.base.StepRunner`) as a plug-in: a step runner installed the way
a user's package is (tests/clipped_step.py, its metadata with an entry point on the import
path) is named by a config's ``step_runner``, trains a trial and is profiled, while no file of
tune_lowmem names it; a config in which no technique or two run the step is refused in one line."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import tiny_wrn_config
from tune_lowmem.config import ConfigError
from tune_lowmem.memory.predict import predict, shape_key
from tune_lowmem.plugins import TECHNIQUES
from tune_lowmem.techniques.base import StepRunner
from tune_lowmem.techniques.precision import Precision
from tune_lowmem.train import Trainer

from .clipped_step import ClippedStep
from .plugin_install import ROOT, install

NORM = 1e-3  # far below a step's gradient norm: every update is clipped


class PlainStep(StepRunner):
    """A step runner without settings, named by ``module:attribute`` and installed nowhere."""

    NAME = "plain_step"
    SETTINGS = ()

    @classmethod
    def validate(cls, config, task) -> None:
        pass

    @classmethod
    def shape_settings(cls, config) -> dict:
        return {}


class ScaledClip(Precision):
    """Precision's step (its formats, fp16's loss scaling) with its gradients clipped."""

    NAME = "scaled_clip"
    SETTINGS = ()  # precision's fields stay precision's

    def unscale_(self, parameters, finite=None) -> bool:
        parameters = list(parameters)
        stepped = super().unscale_(parameters, finite)
        torch.nn.utils.clip_grad_norm_(parameters, NORM)
        return stepped


class EveryStep(PlainStep):
    """A step runner that binds itself to every trial, whatever the config names."""

    NAME = "every_step"

    @classmethod
    def enabled(cls, config) -> bool:
        return True


def installed_with(tmp_path, monkeypatch, entries: dict[str, str]) -> None:
    site = install(tmp_path / "site", "step-plugin", TECHNIQUES.group, entries)
    monkeypatch.syspath_prepend(str(site))


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A package that registers tests/clipped_step.py, installed on the path."""
    installed_with(tmp_path, monkeypatch, {"clipped_step": "tests.clipped_step:ClippedStep"})


def test_the_package_names_no_plugin_step_runner():
    for path in (ROOT / "tune_lowmem").rglob("*.py"):
        text = path.read_text()
        assert "clipped_step" not in text and "ClippedStep" not in text, path


def test_an_installed_step_runner_trains_the_trial_its_config_names(installed):
    assert isinstance(Trainer(tiny_wrn_config()).step_runner, Precision)  # the default's
    config = tiny_wrn_config(step_runner="clipped_step", clip_norm=NORM)
    trainer = Trainer(config)
    assert isinstance(trainer.step_runner, ClippedStep)
    assert trainer.technique(Precision) is None  # it runs the step in precision's place
    before = [p.detach().clone() for p in trainer.model.parameters()]
    batch = next(iter(trainer.task.train_batches(0)))
    assert trainer.train_step(batch)["stepped"] == 1.0
    assert float(trainer.step_runner.norms[0]) > NORM  # it clipped, to its setting's norm
    clipped_norm = torch.stack([p.grad.norm() for p in trainer.model.parameters()]).norm()
    assert float(clipped_norm) == pytest.approx(NORM, rel=1e-3)
    moved = [(p - b).abs().max() for p, b in zip(trainer.model.parameters(), before, strict=True)]
    assert max(moved) > 0

    history = trainer.run()  # the rest of the epoch, every update through the plug-in
    assert history[-1]["updates"] == len(trainer.step_runner.norms) > 1
    assert history[-1]["skipped_steps"] == 0
    with pytest.raises(ConfigError, match=r"^clip_norm: 0 is not allowed"):
        config.replace(clip_norm=0)


def test_the_profiler_steps_through_an_installed_step_runner(installed):
    """The dry run takes its step through the plug-in: the weights and state it holds are the
    default's, its activation part has the clipping's temporaries."""
    config = tiny_wrn_config(step_runner="clipped_step")
    assert shape_key(config).step_runner == "clipped_step"  # its own dry run
    plug_in, default = predict(config), predict(tiny_wrn_config())
    assert (plug_in.model_bytes, plug_in.optimizer_bytes) == (
        default.model_bytes,
        default.optimizer_bytes,
    )
    assert plug_in.activation_bytes >= default.activation_bytes


def test_a_step_runner_named_by_module_attribute_runs_the_step():
    trainer = Trainer(tiny_wrn_config(step_runner="tests.test_step_runner:PlainStep"))
    assert isinstance(trainer.step_runner, PlainStep) and trainer.technique(Precision) is None
    assert trainer.train_step(next(iter(trainer.task.train_batches(0))))["stepped"] == 1.0
    with pytest.raises(
        ConfigError,
        match=r"^precision: 'bf16' is not allowed with step_runner tests.test_step_runner:"
        r"PlainStep; allowed: fp32 \(the other formats need precision's own step\)$",
    ):
        tiny_wrn_config(step_runner="tests.test_step_runner:PlainStep", precision="bf16")
    with pytest.raises(ConfigError, match=r"^step_runner: 'tests.clipped_step:ClippedStep' "):
        tiny_wrn_config(step_runner="tests.clipped_step:ClippedStep")  # its clip_norm: no field


def test_a_step_runner_derived_from_precision_keeps_its_formats():
    config = tiny_wrn_config(step_runner="tests.test_step_runner:ScaledClip", precision="fp16")
    trainer = Trainer(config)
    assert isinstance(trainer.step_runner, ScaledClip) and trainer.step_runner.scaler is not None
    assert next(trainer.model.parameters()).dtype == torch.float16  # its cast, bound once
    assert trainer.train_step(next(iter(trainer.task.train_batches(0))))["stepped"] == 1.0


def test_a_config_in_which_none_or_two_run_the_step_is_one_line(tmp_path, monkeypatch):
    with pytest.raises(
        ConfigError,
        match=r"^step_runner: 'sparsity' runs no step; allowed: precision, "
        r"or package.module:attribute$",
    ):
        tiny_wrn_config(step_runner="sparsity")
    with pytest.raises(ConfigError, match=r"^step_runner: 'clipped' is not allowed; allowed: "):
        tiny_wrn_config(step_runner="clipped")
    installed_with(tmp_path, monkeypatch, {"every_step": "tests.test_step_runner:EveryStep"})
    with pytest.raises(
        ConfigError, match=r"^step_runner: precision and every_step both run the step; one is"
    ):
        tiny_wrn_config()
