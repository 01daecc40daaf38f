"""Where the sweeps this process drives live, told by the driver at launch and at resume.

Ray Tune pickles the searcher and the callbacks into the sweep's folder (``tuner.pkl``,
``searcher-state-*.pkl``). What they pickle names their sweep only; they find its storage root
here. So a sweep folder copied or moved elsewhere resumes in its new place and writes nowhere
else, and no saved state names an absolute path.
"""

from __future__ import annotations

from pathlib import Path

from .. import store

RAY = "ray"  # the storage root's folder of Tune's experiments, one per sweep
bound: dict[str, Path] = {}  # sweep name -> storage root, in this process


def bind(sweep: str, root: str | Path) -> Path:
    """The sweep `sweep` lives under `root` for the rest of this process (or until bound again)."""
    bound[store.check_name(sweep, "name")] = Path(root)
    return Path(root)


def root(sweep: str) -> Path:
    """The storage root of a sweep this process launched or resumed."""
    if sweep not in bound:
        raise RuntimeError(f"sweep {sweep!r} has no storage root here; launch or resume binds it")
    return bound[sweep]


def sweep_folder(root: str | Path, sweep: str) -> Path:
    """Tune's experiment folder of a sweep: trial states, checkpoints, the space, the journal."""
    return Path(root) / RAY / store.check_name(sweep, "name")
