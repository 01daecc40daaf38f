"""The step both memory measurements count (`memory.stepping`): a step placed at an update must
update the weights, and a warm-up that never updates is an error, not a measurement."""

import pytest

from tune_lowmem.memory import stepping


class _Trainer:
    """A stand-in whose steps update the weights only when told to."""

    def __init__(self, updates: bool):
        self.updates = updates
        self.steps = 0

    def train_step(self, batch):
        self.steps += 1
        return {"stepped": self.updates}


def test_a_step_placed_at_an_update_must_update():
    with pytest.raises(RuntimeError, match="the measured step of update 7 skipped its update"):
        stepping.take(_Trainer(updates=False), None, 7)
    stepping.take(_Trainer(updates=False), None, None)  # the step after the warm-up: any step
    stepping.take(_Trainer(updates=True), None, 7)


def test_the_warm_up_stops_at_the_first_update_and_fails_without_one():
    trainer = _Trainer(updates=True)
    stepping.warm_up(trainer, iter(range(100)))
    assert trainer.steps == 1
    with pytest.raises(RuntimeError, match=f"no optimizer step in {stepping.WARM_UP_TRIES}"):
        stepping.warm_up(_Trainer(updates=False), iter(range(100)))
