"""The run's peak: what a trial holds beyond a training step's tensors (its input, evaluation,
checkpoints) is held no longer than needed, predicted before training and measured by torch's
allocator, which shares no code with the prediction."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import profile

from tests.conftest import tiny_wrn_config
from tune_lowmem.config import TrialConfig
from tune_lowmem.memory.allocations import measure_allocations
from tune_lowmem.memory.predict import predict, run_peak_storage
from tune_lowmem.memory.stepping import peak_steps
from tune_lowmem.train import Trainer
from tune_lowmem.validation import ConfigError


def test_eval_batch_size_is_auto_by_default_and_reads_auto_or_a_positive_integer():
    assert tiny_wrn_config().schedule.eval_batch_size is None
    assert tiny_wrn_config(**{"schedule.eval_batch_size": "auto"}).schedule.eval_batch_size is None
    assert tiny_wrn_config(**{"schedule.eval_batch_size": 50}).schedule.eval_batch_size == 50
    with pytest.raises(ConfigError, match="schedule.eval_batch_size: 0 .*positive integer or auto"):
        tiny_wrn_config(**{"schedule.eval_batch_size": 0}).validate()
    for bad in ("all", 2.5):  # the field's type first: an integer, null or auto
        with pytest.raises(ConfigError, match="schedule.eval_batch_size: .* is not allowed"):
            tiny_wrn_config(**{"schedule.eval_batch_size": bad}).validate()


@pytest.mark.parametrize(
    ("flat", "images"),
    [
        ({}, 20),  # the training batch
        ({"microbatch.size": 5}, 5),  # the training microbatch
        ({"microbatch.size": 5, "schedule.eval_batch_size": 40}, 40),  # as asked
    ],
)
def test_auto_evaluates_at_the_training_microbatch(flat, images):
    task = Trainer(tiny_wrn_config(**flat)).task
    assert task.eval_batch() == images
    batch = task.synthetic_evaluation_batch(torch.Generator().manual_seed(0))
    assert batch[0].shape[0] == images


def test_evaluation_at_auto_gives_the_metrics_of_one_large_batch():
    """Per-image sums: equal within float reassociation, accuracy exactly."""
    trainer = Trainer(tiny_wrn_config(**{"microbatch.size": 5}))
    trainer.train_epoch()
    trainer.model.eval()
    auto = trainer.task.evaluate(trainer.model, final=True)
    large = Trainer(tiny_wrn_config(**{"schedule.eval_batch_size": 100})).task
    whole = large.evaluate(trainer.model, final=True)
    assert trainer.task.eval_batch() == 5 and auto.keys() == whole.keys()
    for name, value in whole.items():
        assert auto[name] == (value if name.endswith("accuracy") else pytest.approx(value, 1e-5))


def test_gradients_are_not_held_through_an_evaluation():
    held = []

    class Watched(Trainer):
        def train_epoch(self, spans=None):
            losses = super().train_epoch(spans)
            task_evaluate = self.task.evaluate

            def evaluate(model, final):
                held.append([p.grad for p in model.parameters() if p.grad is not None])
                return task_evaluate(model, final)

            self.task.evaluate = evaluate
            return losses

    Watched(tiny_wrn_config()).run()
    assert held == [[]]


def allocated_during(work) -> int:
    """The most bytes torch's CPU allocator held at once during `work`, beyond those live before."""
    with profile(profile_memory=True) as profiler:
        work()
    live, peak = 0, 0
    for event in profiler.events():
        live += event.cpu_memory_usage
        peak = max(peak, live)
    return peak


def test_a_checkpoint_is_written_without_a_copy_of_the_state(tmp_path):
    """`Trainer.save` adds no copy of the weights and optimizer state (the snapshot
    `state_dict` makes does), and a trainer resumed from it continues exactly."""
    config = tiny_wrn_config(**{"schedule.epochs": 2})
    trainer = Trainer(config)
    trainer.train_epoch()
    trainer.epoch = 1
    state = sum(t.nbytes for t in trainer.model.state_dict().values())
    saved = allocated_during(lambda: trainer.save(tmp_path / "a.pt", note="kept"))
    copied = allocated_during(lambda: torch.save(trainer.state_dict(), tmp_path / "b.pt"))
    assert saved < state / 4 and copied > state

    loaded = torch.load(tmp_path / "a.pt", weights_only=True)
    resumed = Trainer(config)
    resumed.load_state_dict(loaded["trainer"])
    assert loaded["note"] == "kept"
    resumed.run(), trainer.run()
    for (name, ours), theirs in zip(
        resumed.model.state_dict().items(), trainer.model.state_dict().values(), strict=True
    ):
        assert torch.equal(ours, theirs), name


@pytest.mark.parametrize(
    "flat",
    [
        {},
        {"schedule.eval_batch_size": 100},  # evaluation is the peak
        {"microbatch.size": 5, "checkpoint": "residual-1"},
        {"sparsity.density": 0.3, "precision": "bf16"},
    ],
    ids=["auto", "eval 100", "microbatch + checkpoint", "sparse bf16"],
)
def test_the_predicted_run_peak_is_the_allocators(flat):
    """The prediction (fake tensors; without the CPU heap's objects, which torch's allocator
    does not see) against torch's allocator over a step and an evaluation, at each step that may
    be the run's peak: with operators' workspace (each convolution run once on zeros) against
    everything the allocator held, and from shapes alone against the allocator's peak without
    kernels' internal temporaries, each within 1% (the allocator also sees the few small tensors
    a step makes outside the model, such as the random state)."""
    config = tiny_wrn_config(**flat)
    held, tensors = run_peak_storage(config), run_peak_storage(config, workspace=False)
    measured = [measure_allocations(config, None, update) for update in peak_steps(config)]
    assert all(m.evaluation_peak_bytes is not None for m in measured)
    assert held == pytest.approx(max(m.run_peak_bytes for m in measured), rel=0.01)
    assert tensors == pytest.approx(max(m.run_tensor_peak_bytes for m in measured), rel=0.01)
    assert held > tensors  # the convolutions' reorders are real bytes


def test_the_device_holds_one_microbatch_of_input_at_a_time():
    """The minibatch is rows of the host split and their augmentation draws; each microbatch's
    images are gathered, augmented and made the model's float input on the device only when its
    pass runs (a CPU trial's device is the host, so these show as the step's own allocations): no
    tensor of the whole minibatch's images is made, uint8 or float."""
    from torch.overrides import TorchFunctionMode

    class ImageInputs(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.rows = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            image = isinstance(out, torch.Tensor) and out.dim() == 4
            if image and tuple(out.shape[1:3]) in ((3, 32), (3, 40)):
                self.rows.append(out.shape[0])  # images, padded or not, of any dtype
            return out

    trainer = Trainer(tiny_wrn_config(**{"microbatch.size": 5}))  # batch 20: four microbatches
    batch = next(iter(trainer.task.train_batches(0)))
    assert len(batch.index) == 20 and batch.split is trainer.task.data.train
    with ImageInputs() as seen:
        trainer.train_step(batch)
    assert seen.rows and max(seen.rows) == 5
    assert len(seen.rows) > 4 * 3  # each microbatch's gather, pad, crop and flip, then its floats


def test_evaluating_at_a_large_batch_raises_the_run_peak_above_the_step():
    auto, large = (
        predict(tiny_wrn_config(**{"microbatch.size": 5, "schedule.eval_batch_size": size}))
        for size in ("auto", 100)
    )
    assert auto.total_bytes == large.total_bytes  # the step is the same
    assert large.run_peak_bytes > auto.run_peak_bytes
    assert large.run_peak_bytes > large.total_bytes


def test_a_task_without_an_evaluation_pass_peaks_at_its_step_with_the_input():
    """A plug-in task that declares no `evaluation_pass` (tests.tiny_task): its run's peak is
    its step's tensors and the minibatch it trains on."""
    from tune_lowmem.memory.predict import dry_run, shape_key

    config = TrialConfig.from_dict({"task": "tests.tiny_task:TinyBlobs", "device": "cpu"})
    run = dry_run(shape_key(config))
    report = predict(config)
    features, batch = config.model.features, config.schedule.batch_size
    assert run.evaluation is None
    assert run.input_bytes == batch * features * 4 + batch * 8  # float features, int64 labels
    assert report.run_peak_bytes == report.total_bytes + run.input_bytes
