"""The docs' result tables, generated from the result files the benchmarks write.

A region of a Markdown file between ``<!-- results:NAME -->`` and ``<!-- /results -->`` is
replaced by the table `RENDERERS[NAME]` makes from ``benchmarks/results/NAME.json``; nothing
else in the file changes. Run it after a benchmark writes its results:

    .venv/bin/python benchmarks/render_docs.py           # rewrite the regions
    .venv/bin/python benchmarks/render_docs.py --check   # exit 1 if a region is out of date

It imports nothing of tune_lowmem: the figures are the result files', as the scripts wrote them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = [
    ROOT / "README.md",
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
REGION = re.compile(r"(<!-- results:([\w-]+) -->\n)(.*?)(<!-- /results -->)", re.DOTALL)


def percent(value: float) -> str:
    return f"{100 * value:.2f}%"


def profiler_accuracy(result: dict) -> str:
    """The error distribution, the misses, then every evaluation point."""
    summary, calibration = result["summary"], result["calibration"]
    lines = [
        (
            f"Command: `{result['command']}` (torch {result['torch']}, "
            f"{result['threads']} thread); {len(result['protocol']['calibration'])} calibration "
            f"points, {len(result['points'])} of {len(result['protocol']['evaluation'])} "
            "evaluation points measured; `HEAP_BYTES_PER_STORAGE` = "
            f"{calibration['heap_bytes_per_storage']}."
        ),
        "",
        "| error, predicted against measured | points | median | 90th percentile | worst |",
        "| --- | --- | --- | --- | --- |",
    ]
    views = {
        "total": "total, tensor storage (allocator)",
        "activation": "activation part (allocator)",
        "heap_total": "stored total with heap objects (tracker, CPU heap)",
    }
    for key, label in views.items():
        if key in summary:
            d = summary[key]
            row = [label, str(d["points"]), percent(d["median"]), percent(d["p90"])]
            lines.append("| " + " | ".join([*row, percent(d["worst"])]) + " |")
    misses = ", ".join(summary["misses"]) or "none"
    lines += [
        "",
        (
            f"Points of at least {summary['floor_mb']:g} MB measured; goal: worst "
            f"{percent(summary['goal'])} on the total. Missing it: {misses}. Below "
            f"{summary['floor_mb']:g} MB (not counted): "
            f"{', '.join(summary['below_floor']) or 'none'}."
        ),
        "",
        "| point | predicted MB | measured MB | error | activation error | workspace MB |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for p in result["points"]:
        workspace = p["allocator_workspace_activation_mb"] - p["allocator_activation_mb"]
        cells = [
            p["name"],
            f"{p['predicted_storage_mb']:.3f}",
            f"{p['allocator_total_mb']:.3f}",
            percent(p["error_total"]),
            percent(p["error_activation"]),
            f"{workspace:.3f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[dict], str]] = {"profiler_accuracy": profiler_accuracy}


def render(text: str) -> str:
    """`text` with every results region regenerated from its result file."""

    def region(match: re.Match) -> str:
        name = match.group(2)
        result = json.loads((RESULTS / f"{name}.json").read_text())
        return match.group(1) + RENDERERS[name](result) + match.group(4)

    return REGION.sub(region, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a region is stale")
    args = parser.parse_args()
    stale = []
    for path in DOCS:
        text = path.read_text()
        rendered = render(text)
        if rendered != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(rendered)
    if args.check and stale:
        print(f"out of date with benchmarks/results: {', '.join(map(str, stale))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
