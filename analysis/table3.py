"""The paper's Table 3: configuration, memory, reduction factor, accuracy, accuracy change; as
Markdown and CSV.

    python analysis/table3.py --store DIR --out DIR [--sweep NAME] [--metric COLUMN]

The same as `tune-lowmem report --only table3`; the drawing lives in tune_lowmem/analysis/.
"""

import sys

from tune_lowmem.cli import main

if __name__ == "__main__":
    sys.exit(main(["report", "--only", "table3", *sys.argv[1:]]))
