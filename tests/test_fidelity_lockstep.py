"""fidelity.py's lockstep check in CI, on a tiny recipe: the project's trainer and the plain loop,
fed the same initial weights and minibatches, end with bit-identical weights and batch-norm
statistics and the same metrics; a project loop that drifts from the plain one is caught."""

from __future__ import annotations

import pytest
from torch import nn

from tests.test_fidelity_tost import fidelity
from tune_lowmem.train import Trainer

SEED = 3


@pytest.fixture(scope="module")
def module():
    return fidelity()


def tiny_trainer(module):
    """The project's trainer of WRN-10-1 on 100 images for 2 epochs, and that recipe."""
    recipe = module.Recipe(depth=10, width=1, epochs=2, train=100, val=50, batch=25)
    return Trainer(module.project_config(SEED, recipe)), recipe


def test_the_project_and_the_plain_loop_agree_bit_for_bit(module):
    trainer, recipe = tiny_trainer(module)
    found = module.lockstep(trainer, recipe)
    assert len(found["project"]) == recipe.epochs
    assert found["same_metrics"] and found["different_state"] == []


def test_a_project_step_with_other_momentum_is_caught(module):
    trainer, recipe = tiny_trainer(module)
    trainer.optimizer.param_groups[0]["momentum"] = 0.8  # the plain loop keeps 0.9
    found = module.lockstep(trainer, recipe)
    assert "fc.weight" in found["different_state"] and "conv.weight" in found["different_state"]


def test_batch_norm_statistics_gathered_otherwise_are_caught(module):
    trainer, recipe = tiny_trainer(module)
    for layer in trainer.model.modules():
        if isinstance(layer, nn.BatchNorm2d):
            layer.momentum = 0.2  # torch's default, which both use, is 0.1
    different = module.lockstep(trainer, recipe)["different_state"]
    assert "bn.running_mean" in different and "bn.running_var" in different
