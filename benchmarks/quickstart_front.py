"""The quickstart front's memory, time and accuracy side by side: each Pareto point of a
quickstart sweep, the run peak the sweep searched against its whole run measured, and its
seconds per update and accuracy priced against the sweep's baseline.

    .venv/bin/tune-lowmem launch search_spaces/quickstart.yaml --store /tmp/qs-store
    .venv/bin/python benchmarks/quickstart_front.py --store /tmp/qs-store

The points are the sweep's Pareto front of validation accuracy against the predicted run peak
(the space's objectives), fixed by the sweep before this script runs. For each, from its stored
config (its device, the CPU):
- promised: the run peak the sweep searched (`memory.predicted_run_peak_mb`, the store's: tensor
  storage, this CPU's operators' workspace and the CPU heap's objects); its tensor storage and
  workspace alone (`predict.run_peak_storage`), what torch's allocator can be held to; and of
  tensors alone, from shapes (`workspace=False`), which `tests/test_result_drift.py` predicts
  again;
- measured: the whole run (`memory.whole_run`): its schedule on its data, every epoch's
  evaluation and a checkpoint saved and restored after each, torch's CPU allocator's reports
  replayed (no code shared with the prediction): its peak, and what the run was doing then;
- priced: the point's validation accuracy and seconds per update (predicted before training and
  measured by its trial, `time.*`) beside the sweep's baseline's (every technique off, the
  median over its seeds): the memory reduction, the time ratio (measured over measured) and the
  accuracy change.
Memory figures do not depend on the machine's load; the seconds are the sweep's own, so the
sweep is run on a quiet machine. The result goes to
benchmarks/results/quickstart_front.json; `benchmarks/render_docs.py` puts it in docs/profiler.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd
import torch

from tune_lowmem import pareto, store
from tune_lowmem.analysis.slowdown import baseline_rows
from tune_lowmem.config import TrialConfig
from tune_lowmem.memory import MB
from tune_lowmem.memory.predict import run_peak_storage
from tune_lowmem.memory.whole_run import measure_run
from tune_lowmem.outcome import MEASURED_UPDATE_S, PREDICTED_UPDATE_S
from tune_lowmem.space import SearchSpace

RESULTS = Path(__file__).parent / "results" / "quickstart_front.json"
SPACE = Path(__file__).resolve().parents[1] / "search_spaces" / "quickstart.yaml"
SEARCHED = "memory.predicted_run_peak_mb"
ACCURACY = "metric.val_accuracy"
PRICED = {"val_accuracy": ACCURACY, "searched_run_peak_mb": SEARCHED}
PRICED |= {"predicted_update_s": PREDICTED_UPDATE_S, "measured_update_s": MEASURED_UPDATE_S}
COMMAND = "nice -n 10 .venv/bin/python benchmarks/quickstart_front.py"


def completed(root: str, sweep: str) -> pd.DataFrame:
    """The sweep's completed trials, its baseline's among them."""
    trials = store.read_trials(root, sweep)
    return trials[trials["status"] == "completed"]


def front(done: pd.DataFrame) -> list[dict]:
    """The sweep's completed points on its space's Pareto front (validation accuracy against the
    searched run peak; the baseline is the reference, not a point), least memory first."""
    space = SearchSpace.load(SPACE)
    points = done[done["point"].notna()]
    columns = {
        store.store_column(metric): direction for metric, direction in space.objectives.items()
    }
    return pareto.pareto_front(points, columns).to_dict("records")


def figures(rows: pd.DataFrame) -> dict:
    """The priced figures (`PRICED`) of a set of rows: the median over them (NaN: none)."""
    return {
        name: float(rows[col].median()) if col in rows else float("nan")
        for name, col in PRICED.items()
    }


def priced(row: dict, base: dict) -> dict:
    """A front point against the baseline: memory reduction, time ratio, accuracy change."""
    mine = {name: float(row.get(col, math.nan)) for name, col in PRICED.items()}
    return {
        **{k: v for k, v in mine.items() if k != "val_accuracy"},
        "memory_reduction": base["searched_run_peak_mb"] / mine["searched_run_peak_mb"],
        "time_ratio": mine["measured_update_s"] / base["measured_update_s"],
        "accuracy_change": mine["val_accuracy"] - base["val_accuracy"],
    }


def point(row: dict, base: dict) -> dict:
    """A front point's promised, measured and priced figures (module docstring)."""
    config = TrialConfig.from_dict(store.config_values(row))
    run = measure_run(config)
    storage = run_peak_storage(config)
    return {
        "trial_id": row["trial_id"],
        "config": config.to_flat(),
        "val_accuracy": row["metric.val_accuracy"],
        "searched_run_peak_mb": row[SEARCHED],
        "predicted_run_storage_mb": storage / MB,
        "predicted_run_tensor_peak_mb": run_peak_storage(config, workspace=False) / MB,
        "measured_run_peak_mb": run.peak_bytes / MB,
        "error": run.peak_bytes / storage - 1,
        "peak_during": run.peak_during,
        "epochs": run.epochs,
        "updates": run.updates,
        "checkpoints": run.checkpoints,
        "allocator_reports": run.events,
        **priced(row, base),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="the quickstart sweep's store")
    parser.add_argument("--sweep", default="quickstart", help="its name (default quickstart)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the result file")
    args = parser.parse_args(argv)
    torch.set_num_threads(SearchSpace.load(SPACE).resources.cpu)  # as the sweep's trials ran
    done = completed(args.store, args.sweep)
    rows = baseline_rows(done)
    if rows.empty:
        parser.error(f"--store: sweep {args.sweep!r} holds no completed baseline to price against")
    base = {**figures(rows), "seeds": int(rows["config.seed"].nunique())}
    points = []
    for row in front(done):
        points.append(point(row, base))
        shown = {k: v for k, v in points[-1].items() if k != "config"}
        print(json.dumps(shown), flush=True)
    result = {
        "command": " ".join([COMMAND, *(argv or sys.argv[1:])]),
        "sweep": "tune-lowmem launch search_spaces/quickstart.yaml",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "baseline": base,
        "points": points,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
