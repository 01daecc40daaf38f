"""Headless Chromium for the browser tests (Debian's `chromium`; CI installs it): the report's
page, optuna-dashboard's pages. A test that needs it is skipped where there is none."""

from __future__ import annotations

import html
import re
import shutil
import subprocess

import pytest

CHROMIUM = next(
    filter(
        None, (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome"))
    ),
    None,
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium here (Debian: apt-get install chromium)"
)
WINDOW = (1280, 900)  # a laptop's browser window: the first screen


def chromium(*arguments: str, budget_ms: int = 10000) -> subprocess.CompletedProcess:
    """Chromium run headless in a `WINDOW` window, its scripts given `budget_ms` of virtual
    time (the page's own requests answered meanwhile)."""
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu"]
    command += ["--enable-logging=stderr", "--v=0", f"--virtual-time-budget={budget_ms}"]
    command += ["--window-size={},{}".format(*WINDOW), *arguments]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def shown_text(url: str) -> str:
    """The words a page shows once its scripts ran: its DOM without styles and scripts."""
    dom = chromium("--dump-dom", url).stdout
    dom = re.sub(r"<(style|script)\b.*?</\1>", " ", dom, flags=re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", dom)).split())
