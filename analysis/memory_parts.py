"""Training memory by part (model, optimizer, activation) per configuration, as stacked bars (paper
Figure 1).

    python analysis/memory_parts.py --store DIR --out DIR [--sweep NAME] [--metric COLUMN]

The same as `tune-lowmem report --only memory_parts`; the drawing lives in tune_lowmem/analysis/.
"""

import sys

from tune_lowmem.cli import main

if __name__ == "__main__":
    sys.exit(main(["report", "--only", "memory_parts", *sys.argv[1:]]))
