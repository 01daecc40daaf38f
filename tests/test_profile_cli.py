"""`tune-lowmem profile`: the table, the JSON, the measured column, and bad input."""

import json
import re

import pytest

from tune_lowmem.cli import main

TINY = ["--set", "model.depth=10", "--set", "model.width=1", "--set", "schedule.batch_size=16"]
TINY += ["--set", "device=cpu"]


def table_rows(out: str) -> dict[str, list[str]]:
    """The table's rows by label (the first line describes, the second names the columns, the
    last three are the notes: the predicted time's device, the run's peak, and how sparse
    weights count)."""
    return {line[:28].strip(): line[28:].split() for line in out.splitlines()[2:-3]}


def test_prints_a_table_with_the_ratio_to_the_baseline(capsys):
    assert main(["profile", *TINY, "--set", "precision=bf16", "--set", "microbatch.size=8"]) == 0
    out = capsys.readouterr().out
    assert "WRN-10-1, batch 16, bf16, checkpoint none, microbatch 8 (true)" in out
    rows = table_rows(out)
    assert list(rows) == [
        "model MB",
        "optimizer MB",
        "activation MB",
        "total MB, stored",
        "tensor storage MB",
        "GFLOPs per step",
        "baseline total MB, stored",
        "baseline / this",
        "peak MB, all held",
        "s per update",
        "s per evaluation",
        "s per epoch",
        "slowdown (time / baseline)",
    ]
    assert out.splitlines()[-1] == "no sparse weights: stored = accounted"  # said once
    assert out.splitlines()[-2].startswith("the run's peak (each step with its minibatch")
    assert out.splitlines()[-3].startswith("time predicted for cpu (")
    total, baseline, ratio = (
        float(rows[k][0])
        for k in ("total MB, stored", "baseline total MB, stored", "baseline / this")
    )
    assert (
        ratio == pytest.approx(baseline / total, rel=1e-2) and ratio > 2.5
    )  # half, and 2 microbatches


def test_json_gives_both_parts_and_the_baseline(capsys, tmp_path):
    config = tmp_path / "trial.yaml"
    config.write_text("model: {depth: 10, width: 1}\nschedule: {batch_size: 16}\ndevice: cpu\n")
    assert main(["profile", str(config), "--set", "checkpoint=residual-1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    predicted = result["predicted"]
    assert predicted["source"] == "predicted" and "measured" not in result
    parts = sum(predicted[f"predicted_{part}_mb"] for part in ("model", "optimizer", "activation"))
    assert predicted["predicted_total_mb"] == pytest.approx(parts)
    baseline = result["baseline"]["predicted"]
    assert predicted["ratio_to_baseline"] == pytest.approx(
        baseline["predicted_total_mb"] / predicted["predicted_total_mb"]
    )
    assert predicted["flops_per_step"] > baseline["flops_per_step"]  # the recomputation


def test_prints_the_predicted_time_beside_the_memory(capsys):
    """Seconds per update, evaluation and epoch, predicted for this CPU at --threads, in the
    table and the JSON (the names a trial's ``time.`` columns take), with the slowdown against
    the baseline's update."""
    micro = [*TINY, "--set", "microbatch.size=2", "--set", "data.val_size=64", "--threads", "1"]
    assert main(["profile", *micro]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    update, evaluation, epoch = (
        float(rows[k][0]) for k in ("s per update", "s per evaluation", "s per epoch")
    )
    assert 0 < update and 0 < evaluation < epoch
    note = re.search(
        r"time predicted for cpu \(.+\), 1 thread\(s\), torch [\w.+]+ .*: "
        r"an epoch of (\d+) updates and (\d+) evaluation batches",
        out,
    )
    # 50,000 images less the 64 held out, at 16; the 64 at the microbatch's 2
    assert note.groups() == ("3121", "32")
    assert epoch == pytest.approx(3121 * update + evaluation, rel=1e-3)
    assert main(["profile", *micro, "--json"]) == 0
    time_figures = json.loads(capsys.readouterr().out)["time"]
    assert time_figures["predicted_update_s"] == pytest.approx(update, rel=1e-3)
    assert time_figures["predicted_epoch_s"] == pytest.approx(epoch, rel=1e-3)
    assert time_figures["predicted_slowdown"] == pytest.approx(
        time_figures["predicted_update_s"] / time_figures["baseline_predicted_update_s"]
    )
    assert time_figures["evaluation_batches"] == 32


def test_measure_adds_the_measured_column(capsys):
    assert main(["profile", *TINY, "--measure", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    predicted, measured = result["predicted"], result["measured"]
    assert measured["source"] == "measured" and measured["measured_peak_mb"] > 0
    total = predicted["predicted_total_mb"]
    assert total == pytest.approx(measured["measured_total_mb"], rel=0.05)
    assert set(result["baseline"]) == {"predicted", "measured"}
    allocator = result["allocator"]  # the independent measurement, beside the tracker's
    # (before the step: weights, momentum and batch; the gradients come in the step)
    storage = measured["measured_model_mb"] + measured["measured_optimizer_mb"]
    assert allocator["allocator_model_mb"] + allocator["allocator_optimizer_mb"] == pytest.approx(
        storage, rel=0.01
    )
    assert allocator["allocator_peak_mb"] > allocator["allocator_before_mb"] > 2 * storage / 3


def test_measure_prints_the_allocator_beside_the_tracker(capsys):
    config = ["--set", "task=tests.tiny_task:TinyBlobs", "--set", "device=cpu"]
    assert main(["profile", *config, "--measure"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("torch's allocator (profiler memory events")
    assert "predicted tensor storage" in line and "peak over the step" in line


def test_profiles_the_transformer_on_synthetic_batches_without_its_data(capsys):
    model = {"embed_dim": 32, "ffn_dim": 64, "encoder_layers": 1, "decoder_layers": 1}
    model |= {"encoder_kernels": "[3]", "decoder_kernels": "[7]"}
    argv = ["profile", "--set", "task=dct-iwslt14", "--set", "device=cpu"]
    argv += ["--set", "data.root=/nonexistent", "--set", "schedule.max_tokens=600"]
    argv += [f"--set=model.{key}={value}" for key, value in model.items()]
    argv += ["--set", "checkpoint=residual-1", "--set", "microbatch.size=240"]
    assert main([*argv, "--lengths", "25", "40"]) == 0
    out = capsys.readouterr().out
    assert (
        "dct-iwslt14 DC-Transformer 1+1 layers, embed 32, 600 tokens (15 pairs of 25/40), fp32, "
        "checkpoint residual-1, microbatch 240 (true)" in out
    )
    rows = table_rows(out)
    assert float(rows["baseline / this"][0]) > 1.5  # 6 of 15 pairs at a time, layers recomputed


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [*TINY, "--set", "checkpoint=every-3"],
            "checkpoint: 'every-3' is not allowed; allowed: none",
        ),
        (
            [*TINY, "--set", "sparsity.density=1.5"],
            "sparsity.density: 1.5 is not allowed; 0 < value",
        ),
        ([*TINY, "--set", "microbatch.size=7"], "microbatch.size: 7 is not allowed; a divisor of"),
        ([*TINY, "--set", "precision"], "--set: 'precision' is not allowed; KEY=VALUE is required"),
        (
            ["--set", "task=dct-iwslt14", "--lengths", "30", "5000"],
            "schedule.max_tokens: 4000 is not allowed; the synthetic sentence pairs",
        ),
        ([*TINY, "--lengths", "30", "30"], "lengths: (30, 30) is not allowed for wrn-cifar10"),
    ],
)
def test_bad_input_exits_2_naming_the_field(capsys, argv, message):
    assert main(["profile", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tune-lowmem profile: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_missing_config_file_exits_2(capsys, tmp_path):
    assert main(["profile", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_sparse_totals_are_what_the_packed_step_holds(capsys):
    """Packed sparse layers hold their nonzeros and indices: the stored total is the accounted
    one, well under the dense configuration's, and the paper's CSR accounting is said beside."""
    sparse = [*TINY, "--set", "sparsity.density=0.3"]
    assert main(["profile", *sparse]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert "sparse layers trained packed" in out and "the paper's CSR accounting" in out
    total_mb = float(rows["total MB, stored"][0])
    assert main(["profile", *sparse, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["predicted"]
    assert result["predicted_total_mb"] == pytest.approx(total_mb, abs=1e-3)
    assert result["predicted_stored_total_mb"] == result["predicted_total_mb"]
    assert main(["profile", *TINY, "--json"]) == 0
    dense = json.loads(capsys.readouterr().out)["predicted"]
    assert dense["predicted_stored_total_mb"] == dense["predicted_total_mb"]
    weights = 9 * (16 * 16 + 16 * 16 + 16 * 32 + 32 * 32 + 32 * 64 + 64 * 64)  # WRN-10-1's 3x3s
    # 70% of the sparse weights' values, gradients and momentum are gone (fp32: 12 bytes each)
    saving = dense["predicted_model_mb"] + dense["predicted_optimizer_mb"]
    saving -= result["predicted_model_mb"] + result["predicted_optimizer_mb"]
    assert saving > 0.7 * 0.9 * weights * 12 / 1e6


def test_measured_stored_total_is_what_the_step_held(capsys):
    """With --measure the measured column counts the packed sparse layers as the real step
    holds them: its stored total is its accounted total, and the weights, gradients and state it
    counts are within the peak of everything PyTorch held; the JSON labels every figure."""
    sparse = [*TINY, "--set", "sparsity.density=0.3", "--measure", "--threads", "1"]
    assert main(["profile", *sparse, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    measured, counted = result["measured"], result["counted"]
    accounted, held = measured["measured_total_mb"], measured["measured_stored_total_mb"]
    assert accounted == pytest.approx(held, abs=1e-9)
    stored_parts = held - measured["measured_activation_mb"]  # weights, gradients, state, indices
    assert stored_parts < measured["measured_peak_mb"]
    allocator = result["allocator"]  # the real tensors' storages: buffers too (a few kB)
    real = allocator["allocator_model_mb"] + allocator["allocator_optimizer_mb"]
    assert stored_parts == pytest.approx(real, rel=0.01)
    assert counted["measured_total_mb"] == counted["predicted_model_mb"] == "accounted"
    assert counted["measured_stored_total_mb"] == counted["measured_peak_mb"] == "stored"


def test_measure_says_what_the_peak_holds_beyond_the_prediction(capsys):
    assert main(["profile", *TINY, "--set", "microbatch.size=4", "--measure"]) == 0
    out = capsys.readouterr().out
    rows = {line[:28].strip(): line[28:].split() for line in out.splitlines()[2:12]}
    total, storage = float(rows["total MB, stored"][0]), float(rows["tensor storage MB"][0])
    note = re.search(
        r"measured peak ([\d.]+) MB = predicted stored total ([\d.]+) MB \(of which ([\d.]+) MB "
        r"the CPU heap's tensor and autograd objects\) \+ the input minibatch ([\d.]+) MB "
        r"([+-]) ([\d.]+) MB: the rest of the CPU heap",
        out,
    )
    peak, stored, objects, batch, _sign, rest = note.groups()
    assert float(stored) == total and float(objects) > 0
    # the minibatch holds its rows: int64 index and labels, two crop offsets and a flip each (each
    # microbatch's images, gathered and augmented, are the step's own)
    assert float(batch) == pytest.approx(16 * (8 + 8 + 2 * 8 + 1) / 1e6, abs=5e-4)
    assert float(rest) < 0.03 * float(peak)  # the prediction and the batch explain the peak
    # the tensor storage row against torch's allocator, which shares no code with the prediction
    allocator = re.search(r"= ([\d.]+) MB, predicted tensor storage ([\d.]+) MB", out).groups()
    assert float(allocator[1]) == storage
    assert storage == pytest.approx(float(allocator[0]), rel=0.01)
