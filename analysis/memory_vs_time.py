"""Training memory against seconds per update for the Pareto front's configurations, the
baseline's time marked.

    python analysis/memory_vs_time.py --store DIR --out DIR [--sweep NAME] [--metric COLUMN]

The same as `tune-lowmem report --only memory_vs_time`; the drawing lives in
tune_lowmem/analysis/.
"""

import sys

from tune_lowmem.cli import main

if __name__ == "__main__":
    sys.exit(main(["report", "--only", "memory_vs_time", *sys.argv[1:]]))
