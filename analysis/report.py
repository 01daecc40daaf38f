"""Everything at once: every figure as PNG, Table 3 as Markdown and CSV, and one static index.html.

    python analysis/report.py --store DIR --out DIR [--sweep NAME] [--task TASK] [--metric COLUMN]

The same as `tune-lowmem report`; one script per figure kind sits beside this one.
"""

import sys

from tune_lowmem.cli import main

if __name__ == "__main__":
    sys.exit(main(["report", *sys.argv[1:]]))
