"""The machine a benchmark timed on, recorded with its figures; a loaded machine's timings refused.

A time measured while other work shares the cores is partly that work's: `step_time.json` once
said 8.9 s per step for what takes 0.09 s on a quiet machine, recorded at a load of about 15 on
2 cores. So every benchmark that times something watches the machine around its timed work:

    watch = Watch.start(threads, allow_load=args.allow_load)   # refuses at once on a loaded one
    ...                                                           # the timed work
    result["machine"] = watch.stop()                              # refuses a loaded end
    print(describe(result["machine"]))

and records what `stop` returns (CPU model, cores, the threads it used, the load averages and
the other busy processes before and after) beside its figures. The machine is loaded when the
other work leaves fewer free cores than the benchmark's threads: the 1-minute load average before
the run, or after it less the run's own threads, or the cores the other busy processes take, is
above `cores - threads + SLACK`. A loaded run exits without writing its result file unless told
to (`--allow-load`, `add_arguments`), and then its record says it was loaded (`label`), which
the rendered tables show.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

SLACK = 0.5  # cores of background work (daemons, the shell) a quiet machine may still show
BUSY_SHARE = 0.2  # a process using more than this share of one core is busy
SAMPLE_S = 0.5  # how long the busy processes are sampled
PROC = Path("/proc")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-load",
        action="store_true",
        help="write the results even on a loaded machine (they are labelled so)",
    )


def _cpu_ticks() -> dict[int, tuple[str, int, int]]:
    """Each process's (name, parent, user + system clock ticks), from /proc."""
    ticks = {}
    for stat in PROC.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :]
        fields = rest.split()  # from the state on: state ppid ... utime (12th) stime (13th)
        ticks[int(stat.parent.name)] = (name, int(fields[1]), int(fields[11]) + int(fields[12]))
    return ticks


def _own(ticks: dict[int, tuple[str, int, int]]) -> set[int]:
    """This process and its descendants."""
    own, grew = {os.getpid()}, True
    while grew:
        found = {pid for pid, (_, parent, _) in ticks.items() if parent in own} - own
        own |= found
        grew = bool(found)
    return own


def busy_processes(seconds: float = SAMPLE_S) -> list[dict]:
    """Processes other than this one and its children that used more than `BUSY_SHARE` of a
    core over `seconds`, busiest first: pid, name and cores used; empty without /proc."""
    if not PROC.is_dir():
        return []
    first = _cpu_ticks()
    time.sleep(seconds)
    second = _cpu_ticks()
    own, hertz = _own(second), os.sysconf("SC_CLK_TCK")
    busy = [
        {"pid": pid, "name": name, "cores": round((used - first[pid][2]) / hertz / seconds, 2)}
        for pid, (name, _, used) in second.items()
        if pid in first and pid not in own
    ]
    return sorted((p for p in busy if p["cores"] > BUSY_SHARE), key=lambda p: -p["cores"])


def snapshot() -> dict:
    """The load averages (1, 5, 15 minutes) and the busy processes now."""
    return {"load": [round(x, 2) for x in os.getloadavg()], "busy": busy_processes()}


def loaded(cores: int, threads: int, before: dict, after: dict | None) -> str | None:
    """Why the other work left fewer than `threads` of `cores` free (None: it did not)."""
    free = cores - threads + SLACK
    others = {
        "load before": before["load"][0],
        "busy processes before": sum(p["cores"] for p in before["busy"]),
    }
    if after is not None:  # the 1-minute load at the end holds the run's own threads
        others["load after less the run's threads"] = after["load"][0] - threads
        others["busy processes after"] = sum(p["cores"] for p in after["busy"])
    over = [f"{what} {value:.2f}" for what, value in others.items() if value > free]
    if not over:
        return None
    return f"loaded: {', '.join(over)} > {free:g} (cores {cores} - threads {threads} + {SLACK:g})"


@dataclass
class Watch:
    """The machine's state around one benchmark's timed work."""

    threads: int
    allow_load: bool
    before: dict

    @classmethod
    def start(cls, threads: int, allow_load: bool = False) -> Watch:
        """Record the state before the timed work; on a loaded machine exit at once, measuring
        nothing, unless `allow_load`."""
        watch = cls(threads, allow_load, snapshot())
        watch._judge(loaded(os.cpu_count() or 1, threads, watch.before, None))
        return watch

    def stop(self) -> dict:
        """The record to keep with the figures; on a loaded machine exit, writing nothing,
        unless `allow_load` (then the record's `label` says why it was loaded)."""
        from tune_lowmem.timing.device import cpu_model  # (render_docs imports no torch)

        after, cores = snapshot(), os.cpu_count() or 1
        why = loaded(cores, self.threads, self.before, after)
        self._judge(why)
        return {
            "cpu_model": cpu_model(),
            "cores": cores,
            "threads": self.threads,
            "load_before": self.before["load"],
            "load_after": after["load"],
            "busy_before": self.before["busy"],
            "busy_after": after["busy"],
            "quiet": why is None,
            "label": why,
        }

    def _judge(self, why: str | None) -> None:
        if why is None:
            return
        if not self.allow_load:
            raise SystemExit(
                f"refused: the machine is {why}; run it on a quiet machine, or pass "
                "--allow-load to write results labelled as measured under load"
            )
        print(f"warning: the machine is {why}; the results will say so", flush=True)


def unrecorded(why: str) -> dict:
    """The record of figures timed where the machine's state was not recorded (`why`)."""
    return {"quiet": False, "label": why}


def describe(machine: dict) -> str:
    """One line for a result's `machine` record, as printed and as the docs' tables show it."""
    if "load_before" not in machine:  # recorded before the state was recorded
        return f"Machine: not recorded; {machine['label']}."
    before, after = ("/".join(f"{v:g}" for v in machine[k]) for k in ("load_before", "load_after"))
    text = (
        f"Machine: {machine['cpu_model']}, {machine['cores']} cores, {machine['threads']} "
        f"thread(s) used; load average (1/5/15 min) {before} before, {after} after"
    )
    busy = {p["name"] for p in machine["busy_before"] + machine["busy_after"]}
    text += f"; other busy processes: {', '.join(sorted(busy)) or 'none'}"
    return text + (f". Measured under load ({machine['label']})." if machine["label"] else ".")
