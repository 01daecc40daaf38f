"""Hypervolume of the memory-accuracy front against the number of trials, one line per sweep and
sampler.

    python analysis/hypervolume.py --store DIR --out DIR [--sweep NAME] [--metric COLUMN]

The same as `tune-lowmem report --only hypervolume`; the drawing lives in tune_lowmem/analysis/.
"""

import sys

from tune_lowmem.cli import main

if __name__ == "__main__":
    sys.exit(main(["report", "--only", "hypervolume", *sys.argv[1:]]))
