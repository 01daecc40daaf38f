"""The GPU check's packing trials: a plug-in task and one trial run as a plain process.

`HungryBlobs` is the blob MLP of tests/tiny_task.py whose one point of width `HOG_HIDDEN` holds
`model.hog_mb` more than the profiler sees (a buffer only its real model has), so its trial
outgrows its predicted share. Named ``benchmarks.gpu_check_task:HungryBlobs``.

Run as a script, it trains one point of a packing plan (a JSON file: the base config and the
resources, as a search space's `base` and `resources`) as the Ray trainable does, without Ray or
Optuna (the device machine has neither, and a `SearchSpace` builds its Optuna sampler):
predicted memory, the share `trial_share` asks for, the process held to it (`hold_to_share`), a measured
step, training, and the outcome stored as a row of the Parquet store: completed, or infeasible
when it ran out of memory.

  python3 benchmarks/gpu_check_task.py PLAN_JSON HIDDEN STORE_ROOT
"""

from __future__ import annotations

import json
import socket
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.tiny_task import BlobModel, TinyBlobs
from tune_lowmem.config import TrialConfig
from tune_lowmem.space import Resources
from tune_lowmem.validation import nonnegative_int

HOG_HIDDEN = 1000  # the mispredicted point's width
HOG_MB = 5_000  # over the 1% of a card (the smallest share) of any GPU up to 500 GB
SWEEP = "gpu-check-packing"


@dataclass(frozen=True)
class HungryModel(BlobModel):
    """The blob MLP's fields, and the buffer the point of width `HOG_HIDDEN` holds unseen."""

    hog_mb: int = HOG_MB

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        nonnegative_int(self.hog_mb, f"{prefix}.hog_mb")


class HungryBlobs(TinyBlobs):
    MODEL_CONFIG = HungryModel

    def build_model(self) -> nn.Module:
        model = super().build_model()
        m = self.config.model
        if not self.synthetic and m.hidden == HOG_HIDDEN:
            model.register_buffer("hog", torch.zeros(m.hog_mb * 10**6 // 4))
        return model


def packing_trial(plan: dict, hidden: int) -> tuple[TrialConfig, Resources]:
    """The config of the point of width `hidden` of a packing plan, and the plan's resources."""
    config = TrialConfig.from_dict({**plan["base"], "model.hidden": hidden})
    return config, Resources(**plan["resources"])


def run_trial(plan_file: Path, hidden: int, root: Path) -> str:
    """Train the point `model.hidden = hidden` of the plan and store its row; its status."""
    from tune_lowmem import store
    from tune_lowmem.memory.measure import measure
    from tune_lowmem.memory.predict import predict
    from tune_lowmem.memory.share import hold_to_share, peak_memory_mb, trial_share
    from tune_lowmem.memory.stepping import at_peak
    from tune_lowmem.outcome import memory_columns
    from tune_lowmem.search.trainable import failure_reason, out_of_memory
    from tune_lowmem.train import Trainer, measured_times, resolve_device

    config, resources = packing_trial(json.loads(plan_file.read_text()), hidden)
    device = resolve_device(config.device)
    started = datetime.now(UTC)
    predicted = predict(config)
    hold_to_share(trial_share(resources, config), device)  # its OOM is its own
    trainer, measured, status, reason = None, None, "completed", None
    try:
        trainer = Trainer(config)
        measured = at_peak(measure, config)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        trainer.run()
    except Exception as error:  # noqa: BLE001 - the trial's own failure, stored as its outcome
        status = "infeasible" if out_of_memory(error) else "failed"
        reason = failure_reason(error)
    history = trainer.history if trainer is not None else []
    outcome = {
        **memory_columns(predicted, measured),
        **peak_memory_mb(device),
        **measured_times(history),
    }
    final = history[-1] if history and status == "completed" else {}
    record = store.SweepRows(SWEEP).row(
        f"width-{hidden}",
        status,
        config.to_flat(),
        final,
        outcome,
        failure_reason=reason,
        started_at=started,
        finished_at=datetime.now(UTC),
        epochs_completed=trainer.epoch if trainer is not None else 0,
        node_id=socket.gethostname(),
        point=hidden,
    )
    store.write_trial(root, record, epochs=history)
    return status


if __name__ == "__main__":
    plan_file, hidden, root = sys.argv[1:]
    print(f"width {hidden}: {run_trial(Path(plan_file), int(hidden), Path(root))}", flush=True)
