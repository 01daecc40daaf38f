"""Accuracy (or BLEU) against training memory per technique combination, the Pareto front marked
(paper Figures 7 and 10).

    python analysis/accuracy_vs_memory.py --store DIR --out DIR [--sweep NAME] [--metric COLUMN]

The same as `tune-lowmem report --only accuracy_vs_memory`; the drawing lives in
tune_lowmem/analysis/.
"""

import sys

from tune_lowmem.cli import main

if __name__ == "__main__":
    sys.exit(main(["report", "--only", "accuracy_vs_memory", *sys.argv[1:]]))
