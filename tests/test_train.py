"""A short real training run on real CIFAR-10 images."""

import pytest

from tests.conftest import timed, tiny_wrn_config
from tune_lowmem.train import Trainer, TrainingDiverged, train

REAL_RUN = {
    "schedule.epochs": 4,
    "schedule.batch_size": 50,
    "data.train_subset": 3000,
    "data.val_size": 1000,
    "data.test_subset": 1000,
    "model.width": 1,
}


def test_short_real_run_learns():
    history = train(tiny_wrn_config(**REAL_RUN))
    final = history[-1]
    print(
        f"WRN-10-1, 3000 CIFAR-10 images, 4 epochs: val {final['val_accuracy']:.3f} test {final['test_accuracy']:.3f}"
    )
    assert final["val_accuracy"] > 0.3 and final["test_accuracy"] > 0.3  # chance is 0.10
    assert history[-1]["train_loss"] < history[0]["train_loss"]


def test_same_seed_same_numbers():
    config = tiny_wrn_config(**{"schedule.epochs": 2})
    first, second = train(config), train(config)
    strip = lambda h: [{k: v for k, v in m.items() if not timed(k)} for m in h]
    assert strip(first) == strip(second)


def test_resume_from_state_dict_continues_identically():
    config = tiny_wrn_config(**{"schedule.epochs": 2})
    straight = train(config)
    states = []
    Trainer(config).run(
        on_epoch=lambda m, t: states.append(t.state_dict()) if m["epoch"] == 1 else None
    )
    resumed = Trainer(config)
    resumed.load_state_dict(states[0])
    history = resumed.run()
    assert history[-1]["val_accuracy"] == straight[-1]["val_accuracy"]
    assert history[-1]["train_loss"] == straight[-1]["train_loss"]


def test_nan_loss_ends_the_trial_with_its_reason():
    trainer = Trainer(tiny_wrn_config(**{"schedule.lr_multiplier": 1e6}))
    with pytest.raises(TrainingDiverged, match="not finite|loss is"):
        trainer.run()
