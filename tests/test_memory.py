"""The memory profiler, for both tasks: prediction from fake tensors against a real step's
measurement, the effect of each technique, the paper's baseline, and speed."""

import random
import resource
import sys
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from tests.allocator_parts import allocator_parts
from tests.conftest import tiny_wrn_config
from tune_lowmem.config import ConfigError, TrialConfig
from tune_lowmem.data import iwslt14
from tune_lowmem.memory import MB, MemoryReport, baseline_config
from tune_lowmem.memory.allocations import measure_allocations
from tune_lowmem.memory.measure import allocator_probe, measure
from tune_lowmem.memory.predict import heap_object_bytes, predict
from tune_lowmem.memory.synthetic import synthetic_task
from tune_lowmem.memory.tracker import StorageTracker
from tune_lowmem.models.wideresnet import WideResNet
from tune_lowmem.tasks.translation import IWSLT14_VOCAB, DynamicConvIwslt14
from tune_lowmem.techniques.rewiring import first_rewiring, planned_run, rewires
from tune_lowmem.train import Trainer

TINY = {"schedule.batch_size": 32}  # big enough that the graph's own heap is under 5%
COMBINATIONS = [  # fp16 kernels are slow on the CPU: benchmarks/profiler_accuracy.py covers fp16
    {},
    {"precision": "bf16", "checkpoint": "residual-1", "microbatch.size": 16},
    {
        "precision": "amp-bf16",
        "checkpoint": "residual-2*",
        "sparsity.density": 0.3,
        "microbatch.size": 8,
        "microbatch.mode": "simulated",
    },
]


def tiny(**flat) -> TrialConfig:
    return tiny_wrn_config(**{**TINY, **flat})


def tensor_bytes(config: TrialConfig) -> int:
    """The predicted activation part's tensors, without their heap objects (on the CPU), which
    do not scale with the tensors."""
    return predict(config).activation_bytes - heap_object_bytes(config)


@pytest.mark.parametrize(
    "flat", COMBINATIONS, ids=lambda flat: ",".join(f"{k}={v}" for k, v in flat.items())
)
def test_prediction_matches_a_real_step(flat):
    config = tiny(**flat)
    predicted, measured = predict(config), measure(config)
    assert (predicted.source, measured.source) == ("predicted", "measured")
    # model and optimizer against the allocator's storages, not the accounting both share
    assert (predicted.model_bytes, predicted.optimizer_bytes) == allocator_parts(config)
    assert predicted.activation_bytes == pytest.approx(measured.activation_bytes, rel=0.05)
    assert predicted.total_bytes == pytest.approx(measured.total_bytes, rel=0.05)
    assert predicted.flops_per_step == measured.flops_per_step
    assert measured.peak_bytes > measured.activation_bytes


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's mallinfo2")
def test_cpu_measurement_reads_the_heap_not_the_tracker():
    probe = allocator_probe(torch.device("cpu"))
    assert probe is not None
    before = probe()
    tensor = torch.ones(2**20)  # 4 MiB
    assert probe() - before >= tensor.nbytes
    del tensor
    assert probe() - before < 2**20


def test_checkpointing_lowers_activations_and_costs_flops():
    reports = {
        s: predict(tiny(checkpoint=s, **{"model.depth": 16}))  # 6 blocks: 3 pairs
        for s in ("none", "residual-1", "residual-2", "residual-2*")
    }
    none = reports.pop("none")
    for strategy, report in reports.items():
        assert report.activation_bytes < 0.8 * none.activation_bytes, strategy
        assert report.flops_per_step > none.flops_per_step, strategy
        assert (report.model_bytes, report.optimizer_bytes) == (
            none.model_bytes,
            none.optimizer_bytes,
        )
    assert (
        reports["residual-2*"].flops_per_step > reports["residual-2"].flops_per_step
    )  # stem, head


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precision_halves_every_part(precision):
    full, half = predict(tiny()), predict(tiny(precision=precision))
    ratio = tensor_bytes(tiny(precision=precision)) / tensor_bytes(tiny())
    assert ratio == pytest.approx(0.5, abs=0.01)
    model = WideResNet(depth=10, width=1)
    bn = sum(
        p.numel() for m in model.modules() if isinstance(m, nn.BatchNorm2d) for p in m.parameters()
    )
    assert half.model_bytes == full.model_bytes // 2 + 2 * bn  # batch-norm parameters stay fp32
    assert half.optimizer_bytes == 2 * half.model_bytes  # gradient + momentum, in the same dtypes
    assert half.flops_per_step == full.flops_per_step


def test_mixed_precision_keeps_fp32_state_and_counts_autocast_copies():
    full, amp = predict(tiny()), predict(tiny(precision="amp-bf16"))
    assert (amp.model_bytes, amp.optimizer_bytes) == (full.model_bytes, full.optimizer_bytes)
    half = predict(tiny(precision="bf16"))
    assert half.activation_bytes < amp.activation_bytes < full.activation_bytes


def test_true_microbatching_divides_activations_simulated_does_not():
    whole = predict(tiny())
    micro = {size: predict(tiny(**{"microbatch.size": size})) for size in (16, 8)}
    assert micro[16].activation_bytes / whole.activation_bytes == pytest.approx(1 / 2, rel=0.03)
    assert micro[8].activation_bytes / whole.activation_bytes == pytest.approx(1 / 4, rel=0.03)
    assert micro[8].flops_per_step == whole.flops_per_step
    simulated = predict(tiny(**{"microbatch.size": 8, "microbatch.mode": "simulated"}))
    assert simulated.activation_bytes >= whole.activation_bytes  # the whole batch is in memory


def test_sparsity_shrinks_model_and_optimizer_only():
    dense, sparse = predict(tiny()), predict(tiny(**{"sparsity.density": 0.3}))
    assert sparse.activation_bytes == dense.activation_bytes
    assert sparse.flops_per_step == dense.flops_per_step
    model = WideResNet(depth=10, width=1)
    names = set(synthetic_task(tiny(), torch.device("cpu")).sparse_parameter_names(model))
    params = dict(model.named_parameters())
    kept = {n: max(1, round(0.3 * params[n].numel())) for n in names}
    dense_rest = sum(p.numel() * 4 for n, p in params.items() if n not in names)
    # CSR: fp32 values, uint16 column indices (at most 64 x 3 x 3 columns), int32 row pointers
    assert sparse.model_bytes == dense_rest + sum(
        kept[n] * (4 + 2) + (params[n].shape[0] + 1) * 4 for n in names
    )
    assert sparse.optimizer_bytes == 2 * (dense_rest + 4 * sum(kept.values()))


@pytest.mark.parametrize("rewiring", ["dynamic", "static"])
def test_a_run_that_rewires_is_predicted_at_its_rewiring(rewiring):
    # the user task's MLP at density 0.5 on a run of 12 updates: a dynamic one rewires after
    # update 1, and the rewiring's temporaries (the hidden layer's int64 index arrays of its
    # 524,288 nonzeros, three at once: ~13 MB) outgrow the step's activations (~11 MB: the
    # packed layer's transient dense weight and weight gradient)
    flat = {
        "task": "tests.tiny_task:TinyBlobs",
        "device": "cpu",
        "model.hidden": 1024,
        "schedule.batch_size": 32,
        "sparsity.density": 0.5,
        "sparsity.rewiring": rewiring,
    }
    config = TrialConfig.from_dict(flat)
    predicted = predict(config).total_bytes - heap_object_bytes(config)
    update = first_rewiring(config.sparsity, planned_run(config))
    assert (update is not None) == rewires(config) == (rewiring == "dynamic")
    measured = measure_allocations(config, update=update).total_bytes  # None: a plain step
    assert predicted == pytest.approx(measured, rel=0.01)
    step_only = TrialConfig.from_dict({**flat, "sparsity.rewiring": "static"})
    if rewiring == "dynamic":  # the step alone is far below the run's peak
        assert predict(step_only).total_bytes < 0.9 * measured


def test_tracker_flops_equal_flop_counter_mode():
    model, x = WideResNet(depth=10, width=1), torch.randn(2, 3, 32, 32)
    model.set_grad_checkpointing("residual-2*")
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), torch.tensor([0, 1])).backward()
    with StorageTracker() as tracker:
        F.cross_entropy(model(x), torch.tensor([0, 1])).backward()
    assert tracker.flops == counter.get_total_flops() > 0


def test_tracker_follows_storage_lifetimes():
    with StorageTracker() as tracker:
        a = torch.ones(1000)  # 4,000 bytes
        b = a * 2  # 8,000 alive
        view = b[:10]  # a view: no new storage
        del a
        c = b + 1  # 8,000 alive again (a is gone)
        del b, c
    assert [life.nbytes for life in tracker.lives] == [4000, 4000, 4000]
    assert tracker.peak() == 8000
    assert (
        tracker.peak(exclude=[view]) == 4000
    )  # without b (alive through its view) a, c never meet
    assert tracker.curve([view], of=True)[-1] == 4000


def test_wrn28_batch100_is_the_papers_baseline_predicted_in_seconds():
    # a process's first prediction also pays, once, for what fake tensors load (torch's
    # symbolic-shape modules, the first dispatch through a Python mode): ~90 MiB and seconds.
    # A small prediction takes that first, so what follows is this prediction's own cost. The
    # tensors come from shapes alone; operators' workspace (`workspace=True`, the default) runs
    # each distinct convolution once for real, which this prediction leaves out.
    predict(tiny(**{"schedule.batch_size": 2}), workspace=False)
    config = TrialConfig.from_dict({"device": "cpu"})
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    started = time.process_time()  # the prediction's own CPU time, which other load leaves alone
    report = predict(config, workspace=False)
    assert time.process_time() - started < 10  # measured: about 1 s
    params = sum(p.numel() for p in WideResNet(28, 2).parameters())
    assert report.model_bytes == 4 * params and report.optimizer_bytes == 8 * params
    assert report.total_bytes / MB == pytest.approx(404.8, rel=0.05)  # the paper's MB: 10^6 bytes
    # no real activation memory was allocated for the ~387 MB predicted: the peak grew by what
    # the dry run holds for real (the model built before its weights are faked, the synthetic
    # minibatch, the tracker's records), under a tenth of it (measured: ~8 MiB)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert grown * 1024 < report.activation_bytes / 10
    started = time.process_time()
    cached = predict(config.replace(schedule__lr_multiplier=2.0, seed=3), workspace=False)
    assert cached == report  # the cached pass
    assert time.process_time() - started < 0.5


def test_report_units_ratio_and_baseline():
    report = MemoryReport(2 * MB, 4 * MB, 10 * MB, 123, "predicted")
    assert report.to_dict() == {
        "predicted_model_mb": 2.0,
        "predicted_optimizer_mb": 4.0,
        "predicted_activation_mb": 10.0,
        "predicted_total_mb": 16.0,
        "flops_per_step": 123,
        "source": "predicted",
    }
    assert report.ratio_to(MemoryReport(8 * MB, 16 * MB, 40 * MB, 1, "measured")) == 4.0
    with pytest.raises(ValueError, match="source: 'guessed'"):
        MemoryReport(1, 1, 1, 1, "guessed")
    config = tiny(
        precision="fp16", checkpoint="residual-1", **{"microbatch.size": 8, "sparsity.density": 0.5}
    )
    base = baseline_config(config)
    assert (base.precision, base.checkpoint, base.microbatch.size, base.sparsity.density) == (
        "fp32",
        "none",
        None,
        1.0,
    )
    assert base.model == config.model and base.schedule == config.schedule


def test_prediction_leaves_global_generators_alone():
    random.seed(5)
    torch.manual_seed(5)
    expected = (random.random(), torch.rand(1))
    random.seed(5)
    torch.manual_seed(5)
    predict(tiny(seed=9, checkpoint="residual-1"))
    assert (random.random(), torch.rand(1)) == expected


# ---- the DC-Transformer ---------------------------------------------------------------------


def tiny_dct(**flat) -> TrialConfig:
    """A one-layer DC-Transformer (IWSLT'14 vocabularies) on 600-token minibatches of 20 synthetic
    30-token pairs, with a data root that does not exist: the profiler never reads the data set.
    Big enough that the heap's own overhead (graph nodes, malloc headers: ~0.3 MB) is under 2%."""
    base = {
        "task": "dct-iwslt14",
        "device": "cpu",
        "data.root": "/nonexistent/iwslt14",
        "schedule.max_tokens": 600,
        "model": {
            "embed_dim": 32,
            "ffn_dim": 64,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "encoder_kernels": [3],
            "decoder_kernels": [7],
        },
    }
    return TrialConfig.from_dict({**base, **flat})


DCT_COMBINATIONS = [  # half kernels are slow on the CPU: the benchmark's --task dct-iwslt14 grid
    {},  # covers fp16 and every combination
    {"checkpoint": "residual-1", "microbatch.size": 240},  # 8 + 8 + 4 pairs: a smaller last one
    {"precision": "bf16", "sparsity.density": 0.4},
]


@pytest.mark.parametrize(
    "flat", DCT_COMBINATIONS, ids=lambda flat: ",".join(f"{k}={v}" for k, v in flat.items())
)
def test_transformer_prediction_matches_a_real_step(flat):
    config = tiny_dct(**flat)
    predicted, measured = predict(config), measure(config)
    model, optimizer = allocator_parts(config)  # the allocator's, not the shared accounting's
    assert predicted.model_bytes == model
    # the allocator holds Adam's step counters too (one float32 scalar per parameter)
    assert predicted.optimizer_bytes == pytest.approx(optimizer, rel=1e-4)
    assert predicted.activation_bytes == pytest.approx(measured.activation_bytes, rel=0.05)
    assert predicted.total_bytes == pytest.approx(measured.total_bytes, rel=0.05)
    assert predicted.flops_per_step == measured.flops_per_step


def test_synthetic_translation_batch_is_one_full_token_budget_without_the_data():
    config = tiny_dct()
    with pytest.raises(FileNotFoundError):
        _ = DynamicConvIwslt14(config, torch.device("cpu")).corpus
    task = synthetic_task(config, torch.device("cpu"))
    batch = next(iter(task.train_batches(0)))
    assert batch.src_tokens.shape == batch.target.shape == (20, 30)  # 600 tokens, 20 x 30
    assert batch.ntokens == 600 and batch.num_tokens == 600
    assert (batch.target[:, -1] == iwslt14.EOS).all() and (
        batch.prev_output_tokens[:, 0] == iwslt14.EOS
    ).all()
    assert not batch.src_tokens.eq(iwslt14.PAD).any()
    model = task.build_model()
    vocab = (model.encoder.embed_tokens.num_embeddings, model.decoder.embed_tokens.num_embeddings)
    assert vocab == (IWSLT14_VOCAB["de"], IWSLT14_VOCAB["en"]) == (8848, 6632)
    long = synthetic_task(config, torch.device("cpu"), lengths=(25, 40))
    assert next(iter(long.train_batches(0))).target.shape == (15, 40)  # 15 x max(25, 40) = 600
    with pytest.raises(ConfigError, match="^schedule.max_tokens: 600 is not allowed"):
        predict(config, lengths=(30, 700))
    with pytest.raises(ConfigError, match="^lengths: .* not allowed for wrn-cifar10"):
        predict(tiny(), lengths=(30, 30))


def test_transformer_checkpointing_lowers_activations_and_costs_flops():
    model = {"embed_dim": 128, "ffn_dim": 256, "encoder_kernels": [3, 7, 15]}
    model |= {"decoder_kernels": [3, 7, 15], "encoder_layers": 3, "decoder_layers": 3}
    none = predict(tiny_dct(model=model))
    layers = predict(tiny_dct(model=model, checkpoint="residual-1"))
    assert layers.activation_bytes < 0.7 * none.activation_bytes
    assert 1.05 < layers.flops_per_step / none.flops_per_step < 4 / 3  # at most one more forward
    assert (layers.model_bytes, layers.optimizer_bytes) == (none.model_bytes, none.optimizer_bytes)


def test_token_microbatches_divide_activations_not_flops():
    whole = predict(tiny_dct())
    for tokens, pairs in ((240, 8), (90, 3)):  # of 20 pairs of 30 tokens
        micro = tiny_dct(**{"microbatch.size": tokens})
        ratio = tensor_bytes(micro) / tensor_bytes(tiny_dct())
        assert ratio == pytest.approx(pairs / 20, rel=0.01)
        micro = predict(micro)
        assert micro.flops_per_step == whole.flops_per_step


def test_adam_memory_is_gradient_and_two_moments_three_times_the_model():
    config = tiny_dct(precision="bf16")  # half storage, layer norm fp32
    predicted = predict(config)
    trainer = Trainer(config, task=synthetic_task(config, torch.device("cpu")))
    trainer.train_step(next(iter(trainer.task.train_batches(0))))
    params = list(trainer.model.parameters())
    steps = 4 * len(params)  # Adam's step counters: an fp32 scalar per weight, as measured
    assert predicted.optimizer_bytes == 3 * predicted.model_bytes + steps
    state = trainer.optimizer.state
    buffers = [p.grad for p in params] + [
        state[p][k] for p in params for k in ("exp_avg", "exp_avg_sq")
    ]
    assert sum(t.nbytes for t in buffers) + steps == predicted.optimizer_bytes
    assert sum(p.nbytes for p in params) == predicted.model_bytes
    assert {k for p in params for k in state[p]} == {"step", "exp_avg", "exp_avg_sq"}


@pytest.mark.gpu
@pytest.mark.parametrize(
    "flat", [*COMBINATIONS, {"precision": "fp16", "checkpoint": "residual-2"}], ids=str
)
def test_prediction_matches_a_real_step_on_the_gpu(flat):
    config = tiny(device="cuda", **flat)
    predicted, measured = predict(config), measure(config)
    assert predicted.activation_bytes == pytest.approx(measured.activation_bytes, rel=0.05)
    assert predicted.total_bytes == pytest.approx(measured.total_bytes, rel=0.05)
    assert measured.peak_bytes >= measured.activation_bytes


@pytest.mark.gpu
@pytest.mark.parametrize(
    "flat", [*DCT_COMBINATIONS, {"precision": "fp16", "microbatch.size": 240}], ids=str
)
def test_transformer_prediction_matches_a_real_step_on_the_gpu(flat):
    config = tiny_dct(device="cuda", **flat)
    predicted, measured = predict(config), measure(config)
    assert predicted.activation_bytes == pytest.approx(measured.activation_bytes, rel=0.05)
    assert predicted.total_bytes == pytest.approx(measured.total_bytes, rel=0.05)
