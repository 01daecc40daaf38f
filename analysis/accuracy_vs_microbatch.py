"""Accuracy against microbatch size, true and simulated microbatching (paper Figure 4).

    python analysis/accuracy_vs_microbatch.py --store DIR --out DIR [--sweep NAME] [--metric COLUMN]

The same as `tune-lowmem report --only accuracy_vs_microbatch`; the drawing lives in
tune_lowmem/analysis/.
"""

import sys

from tune_lowmem.cli import main

if __name__ == "__main__":
    sys.exit(main(["report", "--only", "accuracy_vs_microbatch", *sys.argv[1:]]))
