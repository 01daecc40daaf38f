#!/usr/bin/env bash
# Create (or reuse) the virtual environment in .venv and install the project from its own files.
# torch==2.14.1 and torchvision==0.29.1 are pinned in pyproject.toml.
# --fairseq: also the `fairseq` extra (fairseq-fixed, about 6 minutes of compiling on 2 cores).
# It builds C++ extensions against the installed torch, so torch and its build tools come first
# and pip must not isolate the build (an isolated build would fetch another torch).
set -euo pipefail
cd "$(dirname "$0")"
case "${1:-}" in
  "") fairseq=0 ;;
  --fairseq) fairseq=1 ;;
  *) echo "setup.sh: error: ${1}: unknown option; allowed: --fairseq" >&2; exit 2 ;;
esac
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --upgrade pip
fi
.venv/bin/pip install --quiet -e '.[dev]'
if [ "$fairseq" = 1 ]; then
  .venv/bin/pip install --quiet numpy cython wheel
  .venv/bin/pip install --quiet --no-build-isolation -e '.[dev,fairseq]'
fi
