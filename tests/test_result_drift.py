"""The result files' predicted figures against the current code: the fake-tensor predictions that
benchmarks/results/memory_ladder.json, profiler_accuracy.json and quickstart_front.json hold
are made again, as their benchmark made them, and must be the same bytes. A change to the profiler that moves a predicted
figure fails here until its benchmark is rerun, so the docs' tables never show a prediction the
code no longer makes.

A run peak with operators' workspace is this CPU's (`memory.workspace` runs each convolution
once), so what is made again is the run peak of tensors alone, from shapes.

The tolerance is the byte: the files hold MB as bytes / 10**6 at full precision, and tensor
storage is predicted from shapes alone, so the same code gives the same bytes; ratios of them
agree to 1e-9. A CPU figure that counts the heap's objects (`HEAP_BYTES_PER_STORAGE` per storage
alive) is made again with the constant its run recorded: a recalibration moves it by the
constant's change times the storages alive (the ladder's run predicted with 1232 bytes, the
profiler's rerun after it calibrated 1222: 1,070 bytes on WRN-28-2's 404 MB baseline), which is
the calibration's doing, not drift.

Each figure takes a dry run (seconds; a sparse DC-Transformer rung's rewiring over a minute), so
a fixed subset is predicted: every task, dense and sparse (with its rewiring), checkpointed,
microbatched, fused and low-precision rungs, the heap view."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory import MB
from tune_lowmem.memory import predict as predict_module

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
# (entry, task, rung index) of memory_ladder.json
LADDER_RUNGS = [
    ("run-peak", "wrn", 0),  # the dense baseline, measured at the ladder's batch
    ("run-peak", "wrn", 17),  # bf16, fused block, heavy-ball fused step, microbatch 1, 10%
    ("run-peak", "wrn", 29),  # the exact chain: chain-min, exact fused step, 5% nonzeros
    ("run-peak", "dct", 0),  # the DC-Transformer's baseline on 4,000 tokens
]
PROFILER_POINTS = [
    "tiny h64 b16",  # the user task, with the heap view
    "wrn-10-1 b16 bf16 kahan micro2",  # Kahan updates, microbatches, the heap view
    "wrn-10-1 b32 density0.1",  # sparse, a run that rewires
    "wrn-16-1 b32 chain-min",
    "vit-tiny b16 bf16 blocks-2 micro8",
    "dct e32x1 300tok",
]


def benchmark(name: str):
    """The benchmark script `name` as a module (the functions it predicts its figures with)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def heap_constant():
    """Predicts with the heap constant a run recorded (the cached dry runs kept while it stays);
    the package's own and a clean cache restored after this module, so no other test reads a
    dry run made with another constant."""
    package = predict_module.HEAP_BYTES_PER_STORAGE

    def use(constant: int) -> None:
        if predict_module.HEAP_BYTES_PER_STORAGE != constant:
            predict_module.HEAP_BYTES_PER_STORAGE = constant
            predict_module.dry_run.cache_clear()

    yield use
    predict_module.HEAP_BYTES_PER_STORAGE = package
    predict_module.dry_run.cache_clear()


def drifted(stored: dict, fresh: dict) -> list[str]:
    """The figures of `fresh` that `stored` lacks or holds other than to the byte (MB) or to
    1e-9 (a ratio)."""
    return [
        f"{key}: stored {stored.get(key)}, predicted now {value}"
        for key, value in fresh.items()
        if key not in stored
        or stored[key] != pytest.approx(value, abs=0.5 / MB if key.endswith("_mb") else 0, rel=1e-9)
    ]


@pytest.mark.parametrize("key, task, index", LADDER_RUNGS)
def test_the_ladders_predicted_figures_are_the_codes(key, task, index, heap_constant):
    ladder = benchmark("memory_ladder")
    entry = json.loads(ladder.RESULTS.read_text())[key][task]
    heap_constant(entry["heap_bytes_per_storage"])
    rows = {row["index"]: row for row in entry["rows"]}
    row = rows[index]

    def config(flat: dict, **at) -> TrialConfig:
        return TrialConfig.from_dict({**entry["config"], **flat, **at})

    baseline = None if index == 0 else config(rows[0]["config"])
    fresh = ladder.predicted_fields(config(row["config"]), baseline)
    for figure in ladder.THIS_MACHINE:  # with this CPU's workspace: not from shapes alone
        del fresh[figure]
    assert drifted(row, fresh) == []


@pytest.mark.parametrize("name", PROFILER_POINTS)
def test_the_profilers_predicted_figures_are_the_codes(name, heap_constant):
    accuracy = benchmark("profiler_accuracy")
    result = json.loads(accuracy.RESULTS.read_text())
    heap_constant(result["calibration"]["heap_bytes_per_storage"])
    point = next(p for p in result["points"] if p["name"] == name)
    config = TrialConfig.from_dict(point["config"])
    total, activation, run_tensor_peak = accuracy.predicted_storage(config, workspace=False)
    fresh = {"predicted_storage_mb": total / MB, "predicted_activation_mb": activation / MB}
    fresh["predicted_run_tensor_peak_mb"] = run_tensor_peak / MB
    if "heap_predicted_mb" in point:
        predicted = predict_module.predict(config, accuracy.lengths_of(config))
        fresh["heap_predicted_mb"] = predicted.total_mb
    assert drifted(point, fresh) == []


def test_a_byte_of_drift_is_found():
    """The tolerance is a byte: a figure one byte off, or missing, is drift; the same is not."""
    assert drifted({"stored_mb": 404.42002, "x_stored": 2.0}, {"stored_mb": 404.42002}) == []
    assert drifted({"stored_mb": 404.42002}, {"stored_mb": 404.420021}) != []
    assert drifted({"x_stored": 2.0}, {"x_stored": 2.0 * (1 + 1e-8)}) != []
    assert drifted({}, {"stored_mb": 1.0}) != []


def test_the_quickstart_front_s_predicted_run_peaks_are_the_codes():
    """The headline run peaks: each quickstart front point's, of tensors alone, predicted again
    from its stored config (benchmarks/results/quickstart_front.json)."""
    result = json.loads(benchmark("quickstart_front").RESULTS.read_text())
    assert result["points"]
    for point in result["points"]:
        config = TrialConfig.from_dict(point["config"])
        peak = predict_module.run_peak_storage(config, workspace=False)
        assert drifted(point, {"predicted_run_tensor_peak_mb": peak / MB}) == []
