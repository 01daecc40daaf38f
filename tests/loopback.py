"""Real servers for tests, on the loopback address: each its own process session, started on a
free port, waited for until it answers, and stopped with everything it started (never by name:
other people's servers may run here)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    """A loopback port nothing listens on (once this returns)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def served(
    command: list[str], url: str, log: Path, env: dict | None = None, timeout: float = 180
) -> Iterator[subprocess.Popen]:
    """`command` running until the block ends, once `url` answers (its output in `log`)."""
    with open(log, "w") as handle:
        process = subprocess.Popen(
            command,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while not answers(url):
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen) -> None:
    """End the process and its session (the workers it started)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def mlflow_server(folder: Path) -> Iterator[str]:
    """A real `mlflow server` on a SQLite store in `folder`; its URI. One worker and no job
    runner: the tracking API is all a sweep uses."""
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    command = [
        str(BIN / "mlflow"),
        "server",
        "--backend-store-uri",
        f"sqlite:///{folder / 'mlflow.db'}",
        "--default-artifact-root",
        str(folder / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with served(command, f"{uri}/health", folder / "mlflow-server.log", env):
        yield uri
