"""The step protocol (`techniques.base.StepRunner`): what the training loop and the profiler ask
of the technique that runs the step is declared, so a technique from outside the package can run
it in the default's place."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import tiny_wrn_config
from tune_lowmem import train
from tune_lowmem.memory import predict as predict_module
from tune_lowmem.plugins import techniques
from tune_lowmem.techniques.base import StepRunner
from tune_lowmem.techniques.precision import Precision

MAX_NORM = 1e-3


class ClippedStep(StepRunner):
    """A user's step: fp32, every update's gradients clipped to a global norm of `MAX_NORM`."""

    NAME = "clipped_step"
    SETTINGS = ()

    def __init__(self, config, task):
        super().__init__(config, task)
        self.norms: list[torch.Tensor] = []

    @classmethod
    def enabled(cls, config) -> bool:
        return True

    def unscale_(self, parameters, finite=None) -> bool:
        self.norms.append(torch.nn.utils.clip_grad_norm_(list(parameters), MAX_NORM))
        return True if finite is None else finite


@pytest.fixture
def clipped(monkeypatch):
    """The registry with `ClippedStep` in the default step runner's place."""
    replaced = tuple(ClippedStep if t is Precision else t for t in techniques())
    monkeypatch.setattr(train, "techniques", lambda: replaced)
    predict_module.dry_run.cache_clear()
    yield
    predict_module.dry_run.cache_clear()


def test_a_plug_in_runs_the_training_step(clipped):
    trainer = train.Trainer(tiny_wrn_config())
    assert isinstance(trainer.step_runner, ClippedStep)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    batch = next(iter(trainer.task.train_batches(0)))
    assert trainer.train_step(batch)["stepped"] == 1.0
    assert float(trainer.step_runner.norms[0]) > MAX_NORM  # it clipped
    clipped_norm = torch.stack([p.grad.norm() for p in trainer.model.parameters()]).norm()
    assert float(clipped_norm) == pytest.approx(MAX_NORM, rel=1e-3)
    moved = [(p - b).abs().max() for p, b in zip(trainer.model.parameters(), before, strict=True)]
    assert max(moved) > 0


def test_the_profiler_steps_through_a_plug_in(clipped):
    """The dry run takes its step through the plug-in: the weights and state it holds are the
    default's, its activation part has the clipping's temporaries."""
    config = tiny_wrn_config()
    plug_in = predict_module.predict(config)
    predict_module.dry_run.cache_clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train, "techniques", techniques)
        default = predict_module.predict(config)
    assert (plug_in.model_bytes, plug_in.optimizer_bytes) == (
        default.model_bytes,
        default.optimizer_bytes,
    )
    assert plug_in.activation_bytes >= default.activation_bytes
