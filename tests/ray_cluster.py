"""A real multi-node Ray cluster on this machine, for tests: a head and worker nodes from `ray start`.

Each node is its own `ray start --block` process, in its own process session and temp dir, with its
own ports and its own custom resource (`{"head": 1}`, `{"node_b": 1}`, ...), so a test can place
work on a node, kill one node's raylet, and stop everything it started, without touching any other
Ray on the machine (never `ray stop`: that kills every Ray here, other people's too).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))

# Faster failure detection: the GCS declares a node dead once its raylet has not answered five
# health checks a second apart (Ray's defaults take about 30 s); loose enough for a busy machine.
FAST_HEALTH_CHECK = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "2000",
    "RAY_health_check_failure_threshold": "5",
}


def _process_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (parent pid, command name, start time) of each live process, from /proc (Linux)."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we looked
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            table[int(stat.parent.name)] = (int(fields[1]), name, int(fields[19]))
    return table


def descendants(pid: int) -> dict[tuple[int, int], str]:
    """Every live process below `pid`: (pid, start time) -> command name. The start time tells a
    process from a later one that reuses its pid."""
    table = _process_table()
    found: dict[tuple[int, int], str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, name, started) in table.items():
            if ppid == parent and (child, started) not in found:
                found[child, started] = name
                frontier.append(child)
    return found


def working_dirs(pid: int) -> dict[tuple[int, int], Path]:
    """(pid, start time) -> working directory of each live process below `pid`."""
    found = {}
    for child, started in descendants(pid):
        try:
            found[child, started] = Path(os.readlink(f"/proc/{child}/cwd"))
        except OSError:  # it ended while we looked
            continue
    return found


def trial_processes(pid: int, sweep: str) -> dict[tuple[int, int], str]:
    """The processes below `pid` running a trial of `sweep`: (pid, start time) -> trial id. Tune
    runs each trial in a working directory named for it, under one named for the sweep."""
    return {
        proc: cwd.name
        for proc, cwd in working_dirs(pid).items()
        if cwd.parent.name == "working_dirs" and cwd.parent.parent.name == sweep
    }


def wait_for_trials_to_end(pid: int, sweep: str, timeout: float = 60.0) -> None:
    """Wait until no process below `pid` runs a trial of `sweep`. Ray ends a killed driver's
    trials a moment after the driver: until then one may still store its row or checkpoint."""
    deadline = time.monotonic() + timeout
    while trial_processes(pid, sweep):
        if time.monotonic() > deadline:
            raise TimeoutError(f"trials of {sweep} still run {timeout:.0f} s on")
        time.sleep(0.25)


def signal_all(processes, sig: signal.Signals) -> None:
    """Send `sig` to each (pid, start time) that is still that same process."""
    table = _process_table()
    for pid, started in processes:
        if pid in table and table[pid][2] == started:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_arguments() -> list[str]:
    """Every fixed port a node binds, chosen free, so that several nodes (and other clusters) coexist."""
    names = (
        "node-manager-port",
        "object-manager-port",
        "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port",
        "runtime-env-agent-port",
        "metrics-export-port",
    )
    return [arg for name in names for arg in (f"--{name}", str(free_port()))]


@dataclass
class Node:
    """One `ray start --block` process and the Ray processes under it."""

    name: str
    process: subprocess.Popen
    temp_dir: Path
    log: Path
    node_id: str = ""
    processes: set[tuple[int, int]] = field(default_factory=set)  # (pid, start time) seen

    def raylet_pid(self) -> int:
        for (pid, _), name in descendants(self.process.pid).items():
            if name == "raylet":
                return pid
        raise RuntimeError(f"node {self.name}: no raylet running; see {self.log}")

    def lose(self) -> int:
        """The machine is gone at once: every process of the node stops where it is, then its
        raylet is SIGKILLed (what the cluster notices), then the rest. Returns the raylet's pid."""
        raylet = self.raylet_pid()
        os.kill(self.process.pid, signal.SIGSTOP)  # `ray start --block` would tidy up after it
        self.remember_processes()
        signal_all(self.processes, signal.SIGSTOP)
        os.kill(raylet, signal.SIGKILL)
        signal_all(self.processes, signal.SIGKILL)
        self.process.kill()
        self.process.wait()
        return raylet

    def remember_processes(self) -> None:
        self.processes.update(descendants(self.process.pid))

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the `ray start --block` process (it stops its node), then SIGKILL what is left."""
        self.remember_processes()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        signal_all(self.processes, signal.SIGKILL)


class LocalCluster:
    """A head node and worker nodes on this machine, each with `cpus` CPUs and one custom resource.

    Run clients of it (a `tune-lowmem launch --address`) with `env`, which carries its token."""

    def __init__(
        self, root: Path, cpus: int = 1, object_store_mb: int = 100, env: dict | None = None
    ):
        self.root = Path(root)
        self.cpus = cpus
        self.object_store_bytes = object_store_mb * 1024 * 1024
        # Its own auth token: every node and every client of this cluster is given it through `env`,
        # so nothing depends on (or touches) a token another Ray on this machine left in ~/.ray.
        self.env = {
            **os.environ,
            "RAY_USAGE_STATS_ENABLED": "0",
            **FAST_HEALTH_CHECK,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            **(env or {}),
        }
        self.gcs_port = free_port()
        self.nodes: dict[str, Node] = {}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    def _start(self, name: str, arguments: list[str]) -> Node:
        temp_dir = self.root / name
        temp_dir.mkdir(parents=True, exist_ok=True)
        log = self.root / f"{name}.log"
        command = [
            RAY,
            "start",
            *arguments,
            f"--num-cpus={self.cpus}",
            "--num-gpus=0",
            f"--resources={json.dumps({name: 1})}",
            f"--temp-dir={temp_dir}",
            f"--object-store-memory={self.object_store_bytes}",
            "--disable-usage-stats",
            "--block",
            *_port_arguments(),
        ]
        with open(log, "w") as handle:
            process = subprocess.Popen(
                command,
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        node = Node(name, process, temp_dir, log)
        self.nodes[name] = node
        return node

    def start_head(self, name: str = "head") -> Node:
        node = self._start(name, ["--head", f"--port={self.gcs_port}", "--include-dashboard=false"])
        self.wait_for_nodes()
        return node

    def add_node(self, name: str) -> Node:
        node = self._start(name, [f"--address={self.address}"])
        self.wait_for_nodes()
        return node

    def alive_nodes(self) -> dict[str, str]:
        """Node name (its custom resource) to Ray node id, from the GCS's node table."""
        script = (
            "import json, ray\n"
            f"ray.init(address={self.address!r}, logging_level='ERROR', log_to_driver=False)\n"
            "print('NODES', json.dumps([[n['NodeID'], sorted(n['Resources'])] for n in ray.nodes() if n['Alive']]))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"cannot read the cluster's nodes: {out.stderr[-2000:]}")
        # Ray may print its own warnings (e.g. lagging heartbeats) to stdout around ours.
        line = next(line for line in out.stdout.splitlines() if line.startswith("NODES "))
        alive = json.loads(line.removeprefix("NODES "))
        return {
            name: node_id
            for node_id, resources in alive
            for name in self.nodes
            if name in resources
        }

    def wait_for_nodes(self, timeout: float = 60.0) -> dict[str, str]:
        """Wait until every running node is alive in the GCS; record each node's Ray id."""
        deadline = time.monotonic() + timeout
        expected = {name for name, node in self.nodes.items() if node.process.poll() is None}
        while True:
            try:
                alive = self.alive_nodes()
            except RuntimeError:
                alive = {}
            if expected <= set(alive):
                for name in expected:
                    self.nodes[name].node_id = alive[name]
                    self.nodes[name].remember_processes()
                return alive
            for name, node in self.nodes.items():
                if name in expected and node.process.poll() is not None:
                    raise RuntimeError(
                        f"node {name} exited; see {node.log}:\n{node.log.read_text()[-2000:]}"
                    )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"nodes {sorted(expected - set(alive))} did not join in {timeout} s"
                )
            time.sleep(0.5)

    def wait_until_dead(self, name: str, timeout: float = 60.0) -> None:
        """Wait until the GCS no longer lists node `name` as alive."""
        deadline = time.monotonic() + timeout
        while name in self.alive_nodes():
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {name} still alive after {timeout} s")
            time.sleep(0.5)

    def shutdown(self) -> None:
        """Stop the workers first, the head last; kill by PID only what this cluster started."""
        for name in sorted(self.nodes, key=lambda n: n == "head"):
            self.nodes[name].stop()
