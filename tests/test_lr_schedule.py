"""The step schedule cuts the learning rate per update, at round(fraction x total updates)."""

import pytest

from tests.conftest import tiny_wrn_config
from tune_lowmem.tasks.classification import StepScheduleConfig, step_learning_rate
from tune_lowmem.train import Trainer

# (epochs, updates per epoch) -> the first update of each lr level after 0.1, worked out by hand
# from 0.3 / 0.6 / 0.8 of the run's updates, rounded half up.
CUTS = {
    (2, 10): (6, 12, 16),
    (3, 10): (9, 18, 24),
    (4, 10): (12, 24, 32),
    (3, 60): (54, 108, 144),  # the quickstart: 3,000 images, batch 50
    (200, 450): (27_000, 54_000, 72_000),  # the paper: epochs 60 / 120 / 160 of 200
    (3, 7.5): (7, 14, 18),  # 22.5 updates: 6.75 -> 7, 13.5 -> 14, 18 -> 18
}
LEVELS = (0.1, 0.02, 0.004, 0.0008)


def expected(update: int, cuts: tuple[int, ...]) -> float:
    return LEVELS[sum(update >= cut for cut in cuts)]


@pytest.mark.parametrize(("epochs", "per_epoch"), list(CUTS))
def test_lr_at_every_update(epochs, per_epoch):
    schedule = StepScheduleConfig(epochs=epochs)
    total = epochs * per_epoch
    lrs = [step_learning_rate(schedule, u, total) for u in range(int(total))]
    assert lrs == pytest.approx([expected(u, CUTS[(epochs, per_epoch)]) for u in range(int(total))])
    assert sorted(set(lrs), reverse=True) == pytest.approx(LEVELS)  # no level skipped


def test_multiplier_scales_every_level():
    schedule = StepScheduleConfig(epochs=4, lr_multiplier=2.0)
    assert [step_learning_rate(schedule, u, 40) for u in (0, 11, 12, 24, 32)] == pytest.approx(
        [0.2, 0.2, 0.04, 0.008, 0.0016]
    )


@pytest.mark.parametrize("epochs", [2, 3, 4])
def test_training_applies_the_lr_of_each_update(epochs):
    """The optimizer steps with the per-update lr (200 images / batch 20: 10 updates an epoch)."""
    trainer = Trainer(tiny_wrn_config(**{"schedule.epochs": epochs}))
    assert trainer.task.total_updates() == 10 * epochs
    applied = []
    step = trainer.optimizer.step
    trainer.optimizer.step = lambda: (
        applied.append(trainer.optimizer.param_groups[0]["lr"]),
        step(),
    )
    trainer.run()
    assert applied == pytest.approx([expected(u, CUTS[(epochs, 10)]) for u in range(10 * epochs)])
