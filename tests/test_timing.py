"""The time prediction (`tune_lowmem.timing`): what the dry run records of an update's calls, the
probe's cache, the CUDA timer through its interface, and the prediction's direction."""

from __future__ import annotations

import time

import pytest
import torch

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory.calls import BACKWARD, PLAIN, RECORDS, CallCounts, Recording
from tune_lowmem.memory.predict import dry_run, pass_weights, passes, shape_key
from tune_lowmem.timing import TimePrediction, cache, faults, predict_time, probe
from tune_lowmem.timing.device import Device
from tune_lowmem.timing.predict import priced
from tune_lowmem.timing.timers import CallTime, EventTimer, WallTimer, timer_for

TINY = {"task": "tests.tiny_task:TinyBlobs", "device": "cpu"}


def tiny(**flat) -> TrialConfig:
    return TrialConfig.from_dict({**TINY, **flat})


def contexts(config: TrialConfig) -> dict[str, int]:
    """Calls per update of a config's dry run, by context."""
    counted = dict.fromkeys((RECORDS, BACKWARD, PLAIN), 0)
    for (context, _, _), count in dry_run(shape_key(config)).recording.calls.items():
        counted[context] += count
    return counted


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test probes into a cache folder of its own, and starts with nothing in memory."""
    monkeypatch.setenv("TUNE_LOWMEM_CACHE", str(tmp_path / "cache"))
    cache.clear()
    yield
    cache.clear()


def test_each_pass_stands_for_the_microbatches_it_repeats():
    a, b = (4, 8), (3, 8)
    assert pass_weights([a]) == {0: 1}
    assert pass_weights([a] * 5) == {0: 1, 1: 3, 4: 1}
    assert pass_weights([a, a, a, b, a, b]) == {0: 1, 1: 3, 3: 1, 5: 1}
    for shapes in ([a], [a] * 5, [a, b], [a, a, a, b, a, b]):
        assert sum(pass_weights(shapes).values()) == len(shapes)
        assert sorted(pass_weights(shapes)) == passes(shapes)


@pytest.mark.parametrize("k", [2, 4, 16])
def test_microbatch_k_runs_k_times_the_forward_calls_of_one_pass(k):
    """An update of k microbatches records k times the forward calls of one pass of the
    microbatch's size, though the dry run passes through at most three of them."""
    one_pass = contexts(tiny(**{"schedule.batch_size": 4}))
    update = contexts(tiny(**{"schedule.batch_size": 4 * k, "microbatch.size": 4}))
    assert update[RECORDS] == k * one_pass[RECORDS]
    assert update[BACKWARD] >= k * one_pass[BACKWARD]


def test_checkpointing_adds_the_recomputation_to_the_backward():
    plain = contexts(tiny(**{"model.blocks": 4}))
    checkpointed = contexts(tiny(**{"model.blocks": 4, "checkpoint": "blocks-1"}))
    # each block's forward runs again, recorded, inside the backward pass
    assert checkpointed[RECORDS] >= plain[RECORDS] + 4 * 2
    assert checkpointed[BACKWARD] >= plain[BACKWARD]


def test_the_optimizer_step_is_recorded_in_the_update():
    """SGD with momentum steps each of the MLP's 6 weights and biases with a few operators, none
    of them recorded by autograd; without the step the update has no plain calls but the
    finiteness check's."""
    counted = contexts(tiny())
    parameters = 2 * 3  # two hidden blocks and the classifier, weight and bias each
    assert counted[PLAIN] >= 3 * parameters


def test_a_call_is_described_by_what_decides_its_kernel_and_no_tensor():
    counts = CallCounts()
    counts.weight = 3
    x = torch.zeros(2, 3)
    counts.add(torch.ops.aten.mul.Tensor, (x, x.t().contiguous().t()), {}, x)
    (((context, call, made), count),) = counts.counts.items()
    assert (context, made, count) == (PLAIN, None, 3)
    func, (first, second), _ = call
    assert func is torch.ops.aten.mul.Tensor
    assert first.shape == second.shape == (2, 3) and first.stride != second.stride
    assert not any(isinstance(part, torch.Tensor) for part in (first, second))


def test_the_probe_cache_is_kept_per_device_threads_and_torch_version():
    here = Device("cpu", "Some CPU", 1, "2.14.1")
    figures = {"call": CallTime(0.5, 0.5)}
    cache.update(here, "calls", figures)
    cache.clear()  # read back from disk
    assert cache.section(here, "calls") == figures
    for other in (
        Device("cpu", "Some CPU", 2, "2.14.1"),
        Device("cpu", "Other CPU", 1, "2.14.1"),
        Device("cpu", "Some CPU", 1, "2.15.0"),
        Device("cuda", "Some CPU", 1, "2.14.1"),
    ):
        assert cache.path(other) != cache.path(here)
        assert cache.section(other, "calls") == {}


def test_a_second_prediction_probes_nothing_again(monkeypatch):
    probed = []
    real_probe = probe.probe

    def counting(calls, timer):
        probed.extend(calls)
        return real_probe(calls, timer)

    monkeypatch.setattr(probe, "probe", counting)
    config = tiny(**{"model.hidden": 32})
    first = predict_time(config, threads=1)
    assert len(probed) > 10 and first.update_seconds > 0
    cache.clear()  # a new process: the figures come from the disk
    probed.clear()
    second = predict_time(config, threads=1)
    assert probed == [] and second.update_seconds == first.update_seconds
    # another thread count is another device's figures: probed again
    predict_time(config, threads=2)
    assert len(probed) > 10


def test_prediction_grows_with_batch_and_model():
    small = predict_time(tiny(**{"model.hidden": 64, "schedule.batch_size": 16}), threads=1)
    wider = predict_time(tiny(**{"model.hidden": 1024, "schedule.batch_size": 16}), threads=1)
    larger = predict_time(tiny(**{"model.hidden": 1024, "schedule.batch_size": 512}), threads=1)
    assert small.update_seconds < wider.update_seconds < larger.update_seconds
    assert larger.update_seconds > 3 * wider.update_seconds  # 32x the rows of 1024x1024 products


def test_an_epoch_is_its_updates_and_its_evaluation():
    flat = {"model.depth": 10, "model.width": 1, "schedule.batch_size": 16, "device": "cpu"}
    flat |= {"data.train_subset": 64, "data.val_size": 40, "microbatch.size": 8}
    predicted = predict_time(TrialConfig.from_dict(flat), threads=1)
    assert isinstance(predicted, TimePrediction)
    assert predicted.updates_per_epoch == 4
    assert predicted.evaluation_batches == 5  # 40 images at the microbatch's 8
    assert predicted.epoch_seconds == pytest.approx(
        4 * predicted.update_seconds + predicted.evaluation_seconds
    )
    assert predicted.device.kind == "cpu" and predicted.device.threads == 1
    assert predicted.to_dict()["predicted_update_s"] == predicted.update_seconds


def test_a_task_without_an_evaluation_pass_has_no_evaluation_time():
    predicted = predict_time(tiny(), threads=1)
    assert predicted.evaluation_seconds is None
    assert predicted.epoch_seconds == pytest.approx(
        predicted.updates_per_epoch * predicted.update_seconds
    )


def test_half_precision_batch_norm_backward_is_priced():
    """The fake batch norm saves its statistics in bf16 where the real kernel keeps fp32: the
    probe prices the real call; only a profiler range's end is left unpriced."""
    flat = {"model.depth": 10, "model.width": 1, "schedule.batch_size": 4, "device": "cpu"}
    predicted = predict_time(TrialConfig.from_dict({**flat, "precision": "bf16"}), threads=1)
    assert predicted.unpriced_per_update <= 1


def test_fresh_memory_is_counted_in_pages_and_priced_per_page():
    """Storages above glibc's largest threshold come from fresh mappings each time: every page
    of each faults, in every run; small ones come back from the heap and fault none once it has
    grown. A page costs the device some time beyond rewriting it."""
    big = 40 * 2**20  # over 32 MiB: a fresh mapping at every request
    storages = ((1, 3, big), (2, 4, big // 2), (3, None, 4096))
    recording = Recording({}, storages, ((1, 1),))
    pages = faults.faults_per_run(recording)
    assert (big + big // 2) / 4096 <= pages < 1.1 * (big + big // 2) / 4096 + 64
    small = Recording({}, tuple((i, i + 1, 1024) for i in range(1, 200)), ((1, 1),))
    assert faults.faults_per_run(small) < 8
    assert faults.page_seconds(Device.of("cpu", 1)) > 0
    assert faults.page_seconds(Device("cuda", "Some GPU", 1, torch.__version__)) == 0


def test_a_microbatch_pass_that_faults_faults_once_for_each_microbatch():
    big = 40 * 2**20
    one = Recording({}, ((1, 2, big),), ((1, 1),))
    repeated = Recording({}, ((1, 2, big), (3, 4, big), (5, 6, big)), ((1, 1), (3, 6), (5, 1)))
    assert faults.faults_per_run(repeated) == pytest.approx(
        8 * faults.faults_per_run(one), rel=0.02
    )


class QueueEvent:
    """A CUDA event's interface (the CPU's stand-in for `torch.cuda.Event`) on a device whose
    queue runs each call for `KERNEL_S` while the host goes on: recording marks how much work is
    queued; synchronizing waits for it."""

    KERNEL_S = 0.004
    queued = 0.0  # seconds of work queued so far

    def __init__(self, enable_timing: bool = False) -> None:
        self.mark = None

    @classmethod
    def launch(cls) -> None:
        cls.queued += cls.KERNEL_S

    def record(self) -> None:
        self.mark = QueueEvent.queued

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: QueueEvent) -> float:
        return (end.mark - self.mark) * 1e3  # milliseconds, as CUDA's


def test_the_device_chooses_the_timer():
    assert isinstance(timer_for("cpu"), WallTimer) and not WallTimer.asynchronous
    assert isinstance(timer_for(torch.device("cuda")), EventTimer) and EventTimer.asynchronous


def test_the_event_timer_reads_the_device_from_events_and_the_host_from_its_clock():
    timer = EventTimer(event=QueueEvent, synchronize=lambda: None)
    measured = timer.seconds(QueueEvent.launch, 5)
    assert measured.device == pytest.approx(QueueEvent.KERNEL_S)  # per call, from the events
    assert 0 < measured.host < QueueEvent.KERNEL_S / 10  # the host only queued them


def test_an_asynchronous_call_costs_the_longer_of_its_kernel_and_its_launch():
    kernel_bound, launch_bound = CallTime(2e-3, 1e-5), CallTime(1e-6, 1e-5)
    assert kernel_bound.cost(5e-6, asynchronous=True) == 2e-3
    assert launch_bound.cost(5e-6, asynchronous=True) == pytest.approx(1.5e-5)
    assert kernel_bound.cost(5e-6, asynchronous=False) == pytest.approx(1.5e-5)  # the host's


def test_a_cuda_device_prices_calls_as_an_asynchronous_device_runs_them():
    """`priced` on a CUDA device's probed figures (here written into its cache, as a GPU's probe
    would have): each call the longer of its kernel and its launch with the overhead."""
    gpu = Device("cuda", "Some GPU", 1, torch.__version__)
    call = (torch.ops.aten.mul.Tensor, (), ())
    counts = {(RECORDS, call, None): 4, (BACKWARD, call, None): 1}
    cache.update(gpu, "overhead", {RECORDS: 2e-6, BACKWARD: 1e-6, PLAIN: 0.0})
    cache.update(gpu, "calls", {cache.text((call, None)): CallTime(1e-3, 5e-6)})
    seconds, calls, unpriced = priced(counts, gpu)
    assert (calls, unpriced) == (5, 0)
    assert seconds == pytest.approx(5e-3)  # kernel-bound: the launches hide behind the kernels
    cache.update(gpu, "calls", {cache.text((call, None)): CallTime(1e-6, 5e-6)})
    assert priced(counts, gpu)[0] == pytest.approx(4 * 7e-6 + 6e-6)  # launch-bound


@pytest.mark.gpu
def test_the_gpu_prediction_is_of_the_gpu_and_near_a_measured_update():
    from tune_lowmem.memory.stepping import synthetic_trainer, warm_up

    flat = {"model.depth": 16, "model.width": 2, "schedule.batch_size": 64, "device": "cuda"}
    config = TrialConfig.from_dict(flat)
    predicted = predict_time(config, threads=1)
    assert predicted.device.kind == "cuda"
    trainer, batches = synthetic_trainer(config, None)
    warm_up(trainer, batches)
    seconds = []
    for _ in range(7):
        batch = next(batches)
        torch.cuda.synchronize()
        started = time.perf_counter()
        trainer.train_step(batch)  # reads the loss on the host: the step's work is done
        seconds.append(time.perf_counter() - started)
    measured = sorted(seconds)[3]
    assert measured / 2 < predicted.update_seconds < 2 * measured
