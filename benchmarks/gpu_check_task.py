"""The GPU check's packing trials: a plug-in task and one trial run as a plain process.

`HungryBlobs` is the blob MLP of tests/tiny_task.py whose one point of width `HOG_HIDDEN` holds
`model.hog_mb` more than the profiler sees (a buffer only its real model has), so its trial
outgrows its predicted share. Named ``benchmarks.gpu_check_task:HungryBlobs``.

Run as a script, it trains one point of a search space as the Ray trainable does, without Ray
(the device machine has none): predicted memory, the share `trial_share` asks for, the process
held to it (`hold_to_share`), a measured step, training, and the outcome stored as a row of the
Parquet store: completed, or infeasible when it ran out of memory.

  python3 benchmarks/gpu_check_task.py SPACE_YAML HIDDEN STORE_ROOT
"""

from __future__ import annotations

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
from tune_lowmem.validation import nonnegative_int

HOG_HIDDEN = 1000  # the mispredicted point's width
HOG_MB = 5_000  # over the 1% of a card (the smallest share) of any GPU up to 500 GB


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


def run_trial(space_file: Path, hidden: int, root: Path) -> str:
    """Train the point `model.hidden = hidden` of the space and store its row; its status."""
    from tune_lowmem import store
    from tune_lowmem.memory.measure import measure
    from tune_lowmem.memory.predict import predict
    from tune_lowmem.memory.share import hold_to_share, peak_memory_mb, trial_share
    from tune_lowmem.memory.stored import stored
    from tune_lowmem.space import SearchSpace
    from tune_lowmem.train import Trainer, resolve_device
    from tune_lowmem.trainable import failure_reason, memory_metrics, out_of_memory, store_record

    space = SearchSpace.load(space_file)
    config = space.trial_config({"model.hidden": hidden})
    device = resolve_device(config.device)
    started = datetime.now(UTC)
    predicted, predicted_stored = predict(config), stored(config)
    hold_to_share(trial_share(space.resources, config), device)  # its OOM is its own
    trainer, measured, status, reason = None, None, "completed", None
    try:
        trainer = Trainer(config)
        measured = measure(config)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        trainer.run()
    except Exception as error:  # noqa: BLE001 - the trial's own failure, stored as its outcome
        status = "infeasible" if out_of_memory(error) else "failed"
        reason = failure_reason(error)
    history = trainer.history if trainer is not None else []
    memory = {
        **memory_metrics(predicted, measured, predicted_stored),
        **{f"memory.{part}": mb for part, mb in peak_memory_mb(device).items()},
    }
    record = store_record(
        space,
        space.name,
        f"width-{hidden}",
        status,
        config.to_flat(),
        history[-1] if history and status == "completed" else {},
        memory,
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
    space_file, hidden, root = sys.argv[1:]
    print(f"width {hidden}: {run_trial(Path(space_file), int(hidden), Path(root))}", flush=True)
