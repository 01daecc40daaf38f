#!/usr/bin/env bash
# Create (or reuse) the virtual environment in .venv and install the project from its own files.
# torch==2.14.1 and torchvision==0.29.1 are pinned in pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --upgrade pip
fi
.venv/bin/pip install --quiet -e '.[dev]'
