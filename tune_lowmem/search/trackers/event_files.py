"""Each trial's curves as TensorBoard event files, one run per trial, in the sweep's folder:

    DIR/ray/<sweep>/tensorboard/point <n> seed <s> <searched values>/events.out.tfevents.*

so that ``tensorboard --logdir DIR/ray/<sweep>/tensorboard`` shows the sweep (``--logdir
DIR/ray`` every sweep of the store). Each result is one event at its epoch holding every curve
(`curves`; ``memory.x`` as the tag ``memory/x``, so TensorBoard groups them), and each run
carries its searched values, seed and point as hparams, with its outcome when it ends
(TensorBoard's HParams page: one row per training; TensorBoard reads a run's first hparams, so
they are the same in every file of the run).

The events are written by tensorboardX's synchronous writer, in the driver, as results arrive:
an error (a full disk) is raised here, where `Trackers` turns it into one line, not in a
background thread whose queue would then fill and block the driver. A training that runs again
(restored from its checkpoint, restarted, or asked again under a new trial id) opens a new file
in its run and first writes a session start at its first epoch, TensorBoard's sign to drop what
the run held from that epoch on: the curves read once each epoch, the last attempt's.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tensorboardX.event_file_writer import EventsWriter
from tensorboardX.proto.api_pb2 import Status
from tensorboardX.proto.event_pb2 import Event, SessionLog
from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData, SessionEndInfo
from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboardX.summary import hparams

from .curves import Run

FOLDER = "tensorboard"
# how an outcome reads on TensorBoard's HParams page (a stopped trial ended as asked)
ENDED = {"completed": "STATUS_SUCCESS", "stopped": "STATUS_SUCCESS"}
_files = itertools.count()  # this process's event files: no two share a name


class EventFiles:
    """The sweep's event files: a writer per running trial (see the module docstring)."""

    def __init__(self, folder: Path):
        self.folder = folder / FOLDER
        self.writers: dict[str, tuple[Path, EventsWriter]] = {}  # run -> its folder, its file
        self.started: set[str] = set()  # runs whose session start is written

    def start(self, run: Run, config: Mapping[str, Any]) -> None:
        """Open the run (a new file in it) and record its hparams."""
        self.close(run.key)
        folder = self.folder / run.name
        with _writing(folder):
            folder.mkdir(parents=True, exist_ok=True)
            suffix = f".{os.getpid()}.{next(_files)}"
            writer = EventsWriter(str(folder / "events"), filename_suffix=suffix)
            self.writers[run.key] = folder, writer
            self.started.discard(run.key)
            _, session_start, _ = hparams(run.params, {})
            writer.write_event(Event(wall_time=time.time(), summary=session_start))
            writer.flush()

    def result(self, key: str, epoch: int, curves: Mapping[str, float]) -> None:
        if key not in self.writers:
            return
        folder, writer = self.writers[key]
        now = time.time()
        values = [Summary.Value(tag=tag(name), simple_value=v) for name, v in curves.items()]
        with _writing(folder):
            if key not in self.started:  # an earlier attempt's epochs from here: dropped
                start = SessionLog(status=SessionLog.START)
                writer.write_event(Event(wall_time=now, step=epoch, session_log=start))
                self.started.add(key)
            writer.write_event(Event(wall_time=now, step=epoch, summary=Summary(value=values)))
            writer.flush()

    def end(self, key: str, status: str, reason: str | None = None) -> None:
        """Record the run's outcome and close its file."""
        if key not in self.writers:
            return
        folder, writer = self.writers[key]
        outcome = Status.Value(ENDED.get(status, "STATUS_FAILURE"))
        content = HParamsPluginData(session_end_info=SessionEndInfo(status=outcome), version=0)
        plugin = SummaryMetadata.PluginData(
            plugin_name="hparams", content=content.SerializeToString()
        )
        value = Summary.Value(
            tag="_hparams_/session_end_info", metadata=SummaryMetadata(plugin_data=plugin)
        )
        with _writing(folder):
            writer.write_event(Event(wall_time=time.time(), summary=Summary(value=[value])))
        self.close(key)

    def close(self, key: str | None = None) -> None:
        """Close one run's file (None: every one still open)."""
        for each in [key] if key is not None else list(self.writers):
            folder, writer = self.writers.pop(each, (None, None))
            if writer is not None:
                with _writing(folder):
                    writer.close()

    def abandon(self) -> None:
        """Write nothing more (after a failure): close what can be closed."""
        for key in list(self.writers):
            with contextlib.suppress(OSError):
                self.close(key)


@contextlib.contextmanager
def _writing(folder: Path) -> Iterator[None]:
    """An error writing a run's file named by its folder (a failed write names no file)."""
    try:
        yield
    except OSError as error:
        raise OSError(error.errno, error.strerror, str(folder)) from error


def tag(key: str) -> str:
    """A curve's TensorBoard tag: ``memory.measured_step_eval_peak_mb`` as ``memory/measured_step_eval_peak_mb``."""
    return key.replace(".", "/", 1)
