"""Accuracy against the fraction of nonzero weights, one line per precision (paper Figures 3 and 6).

    python analysis/accuracy_vs_density.py --store DIR --out DIR [--sweep NAME] [--metric COLUMN]

The same as `tune-lowmem report --only accuracy_vs_density`; the drawing lives in
tune_lowmem/analysis/.
"""

import sys

from tune_lowmem.cli import main

if __name__ == "__main__":
    sys.exit(main(["report", "--only", "accuracy_vs_density", *sys.argv[1:]]))
