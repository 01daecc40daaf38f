"""What `pip install` of a package declaring plug-ins leaves on the import path: its dist-info
with the entry points (the plug-in modules themselves are tests' modules, importable from the
project's root)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).with_name("tune-lowmem"))


def install(folder: Path, distribution: str, group: str, entries: dict[str, str]) -> Path:
    """`folder` holding `distribution`'s metadata, which registers `entries` (name ->
    ``module:attribute``) under the entry-point `group`."""
    info = folder / f"{distribution.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}")
    return folder


def launch(space: Path, store: Path, installed: Path | None = None) -> subprocess.CompletedProcess:
    """`tune-lowmem launch` of `space` into `store` in a process that sees the tests' modules
    and, when given, a plug-in's metadata (`installed`) on its import path, as an installed
    plug-in package would be."""
    paths = [str(installed or ""), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return subprocess.run(
        [CLI, "launch", str(space), "--store", str(store)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)},
    )
