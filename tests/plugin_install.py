"""What `pip install` of a package declaring plug-ins leaves on the import path: its dist-info
with the entry points (the plug-in modules themselves are tests' modules, importable from the
project's root)."""

from __future__ import annotations

from pathlib import Path


def install(folder: Path, distribution: str, group: str, entries: dict[str, str]) -> Path:
    """`folder` holding `distribution`'s metadata, which registers `entries` (name ->
    ``module:attribute``) under the entry-point `group`."""
    info = folder / f"{distribution.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}")
    return folder
