"""The predicted memory of a sweep's untrained baseline, worked out when the sweep ends (its
driver has the profiler loaded) and kept beside the sweep's space, so that Table 3 compares
against it without the profiler, and so without torch, in `tune-lowmem report`."""

from __future__ import annotations

import json
from pathlib import Path

from ..config import ConfigError
from .points import NoResult, Points, load_points

FILE = "baselines.json"  # in ray/<sweep>/: {reference seed group: [label, predicted MB]}


def record(root: str | Path, sweep: str) -> Path | None:
    """Predict and keep the baseline Table 3 would need for this sweep (None: none needed, as
    a baseline was trained, or nothing to compare: no completed trial, no validation metric)."""
    from . import table3

    try:
        points = load_points(str(root), sweep)
    except (NoResult, ConfigError):
        return None
    scored = points.scored()
    if scored.empty or (scored["techniques"] == table3.NO_TECHNIQUE).any():
        return None
    reference = table3.baseline_reference(scored, points)
    path = Path(root) / "ray" / sweep / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    known = json.loads(path.read_text()) if path.is_file() else {}
    known[reference["seed_group"]] = list(table3.predict_baseline(points, reference))
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
