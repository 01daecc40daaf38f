"""The machine record every timing benchmark keeps (`benchmarks/machine.py`): a loaded machine's
timings are refused unless allowed, and then labelled; the busy processes are other people's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks import machine
from tune_lowmem.timing.device import cpu_model

QUIET = {"load": [0.2, 0.3, 0.3], "busy": []}


@pytest.mark.parametrize(
    "before, after, is_loaded",
    [
        (QUIET, None, False),
        ({"load": [1.6, 1.0, 1.0], "busy": []}, None, True),  # 1.6 > 2 - 1 + 0.5
        (QUIET, {"load": [1.4, 0.8, 0.5], "busy": []}, False),  # 1.4 less the run's 1 thread
        (QUIET, {"load": [2.6, 1.0, 0.5], "busy": []}, True),
        ({"load": [0.1] * 3, "busy": [{"pid": 7, "name": "x", "cores": 1.8}]}, None, True),
    ],
)
def test_loaded_when_others_leave_fewer_free_cores_than_the_run_uses(before, after, is_loaded):
    assert (machine.loaded(2, 1, before, after) is not None) is is_loaded


@pytest.fixture
def two_cores(monkeypatch):
    """A 2-core machine with no busy process; the returned function sets its load averages."""
    monkeypatch.setattr(machine.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(machine, "busy_processes", list)
    return lambda *load: monkeypatch.setattr(machine.os, "getloadavg", lambda: load)


def test_a_loaded_machine_is_refused_unless_allowed_and_then_labelled(two_cores):
    two_cores(15.0, 14.0, 12.0)
    with pytest.raises(SystemExit, match="refused: the machine is loaded: load before 15.00"):
        machine.Watch.start(threads=1)
    watch = machine.Watch.start(threads=1, allow_load=True)
    record = watch.stop()
    assert record["quiet"] is False and "load before 15.00" in record["label"]
    assert record["load_before"] == [15.0, 14.0, 12.0] and record["cores"] == 2
    assert "Measured under load" in machine.describe(record)
    two_cores(0.1, 0.1, 0.1)
    quiet = machine.Watch.start(threads=1).stop()
    assert quiet["quiet"] is True and quiet["label"] is None
    assert "under load" not in machine.describe(quiet)


def test_a_machine_loaded_by_the_end_is_refused(two_cores):
    two_cores(0.1, 0.1, 0.1)
    watch = machine.Watch.start(threads=1)
    two_cores(9.0, 3.0, 1.0)
    with pytest.raises(SystemExit, match="load after less the run's threads 8.00"):
        watch.stop()


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_spinning_process_is_busy_unless_it_is_the_runs_own(monkeypatch):
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert spin.pid not in {p["pid"] for p in machine.busy_processes()}  # our child
        monkeypatch.setattr(machine, "_own", lambda ticks: {machine.os.getpid()})
        busy = {p["pid"]: p for p in machine.busy_processes()}
        assert spin.pid in busy and busy[spin.pid]["cores"] > machine.BUSY_SHARE
    finally:
        spin.kill()
        spin.wait()
    assert cpu_model()  # what a run records of the machine
