"""The quickstart front's promised and measured memory: each Pareto point of a quickstart sweep,
the run peak the sweep searched against its whole run measured.

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
  replayed (no code shared with the prediction): its peak, and what the run was doing then.
Memory figures do not depend on the machine's load. The result goes to
benchmarks/results/quickstart_front.json; `benchmarks/render_docs.py` puts it in docs/profiler.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from tune_lowmem import pareto, store
from tune_lowmem.config import TrialConfig
from tune_lowmem.memory import MB
from tune_lowmem.memory.predict import run_peak_storage
from tune_lowmem.memory.whole_run import measure_run
from tune_lowmem.space import SearchSpace

RESULTS = Path(__file__).parent / "results" / "quickstart_front.json"
SPACE = Path(__file__).resolve().parents[1] / "search_spaces" / "quickstart.yaml"
SEARCHED = "memory.predicted_run_peak_mb"
COMMAND = "nice -n 10 .venv/bin/python benchmarks/quickstart_front.py"


def front(root: str, sweep: str) -> list[dict]:
    """The sweep's completed trials on its space's Pareto front (validation accuracy against the
    searched run peak), least memory first."""
    space = SearchSpace.load(SPACE)
    trials = store.read_trials(root, sweep)
    done = trials[trials["status"] == "completed"]
    columns = {
        store.store_column(metric): direction for metric, direction in space.objectives.items()
    }
    return pareto.pareto_front(done, columns).to_dict("records")


def point(row: dict) -> dict:
    """A front point's promised and measured figures (module docstring)."""
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
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="the quickstart sweep's store")
    parser.add_argument("--sweep", default="quickstart", help="its name (default quickstart)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the result file")
    args = parser.parse_args(argv)
    torch.set_num_threads(SearchSpace.load(SPACE).resources.cpu)  # as the sweep's trials ran
    points = []
    for row in front(args.store, args.sweep):
        points.append(point(row))
        figures = {k: v for k, v in points[-1].items() if k != "config"}
        print(json.dumps(figures), flush=True)
    result = {
        "command": " ".join([COMMAND, *(argv or sys.argv[1:])]),
        "sweep": "tune-lowmem launch search_spaces/quickstart.yaml",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "points": points,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
