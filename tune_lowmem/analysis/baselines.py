"""The predicted memory of a sweep's untrained baseline, worked out when the sweep ends (its
driver has the profiler loaded) and kept beside the sweep's space, so that Table 3 compares
against it without the profiler, and so without torch, in `tune-lowmem report`."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..config import ConfigError
from .points import NO_TECHNIQUE, NoResult, Points, describe, load_points, trial_config

FILE = "baselines.json"  # in ray/<sweep>/: {reference seed group: [label, predicted MB]}


def record(root: str | Path, sweep: str) -> Path | None:
    """Predict and keep the baseline Table 3 would need for this sweep (None: none needed, as
    a baseline was trained, or nothing to compare: no completed trial, no validation metric)."""
    try:
        points = load_points(str(root), sweep)
    except (NoResult, ConfigError):
        return None
    scored = points.scored()
    if scored.empty or (scored["techniques"] == NO_TECHNIQUE).any():
        return None
    reference = baseline_reference(scored, points)
    path = Path(root) / "ray" / sweep / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    known = json.loads(path.read_text()) if path.is_file() else {}
    known[reference["seed_group"]] = list(predict_baseline(points, reference))
    path.write_text(json.dumps(known, indent=1) + "\n")
    return path


def saved(points: Points) -> dict[str, tuple[str, float]]:
    """The baselines the store's sweeps recorded: reference seed group -> (label, MB)."""
    found: dict[str, tuple[str, float]] = {}
    for sweep in sorted(points.trials["sweep"].unique()):
        path = Path(points.root) / "ray" / str(sweep) / FILE
        if path.is_file():
            found.update({k: (v[0], float(v[1])) for k, v in json.loads(path.read_text()).items()})
    return found


def baseline_reference(scored: pd.DataFrame, points: Points) -> pd.Series:
    """The configuration whose model the baseline trains: the best full-size one on validation."""
    return points.top(scored[~scored["techniques"].str.contains("smaller ", regex=False)])


def predict_baseline(points: Points, reference: pd.Series) -> tuple[str, float]:
    """The baseline's label and predicted memory (MB): the one place the analysis needs the
    profiler, and so torch, imported only here."""
    from ..config import TrialConfig
    from ..memory import MB, baseline_config
    from ..memory.predict import predict

    stored = trial_config(points.trials, reference["seed_group"])
    config = baseline_config(TrialConfig.from_dict(stored))
    label = describe({f"config.{key}": value for key, value in config.to_flat().items()})
    return label, predict(config).total_bytes / MB
