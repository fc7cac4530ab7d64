"""`conveyor server --nodes N ...`: N nodes on consecutive ports, one cluster on one host.

One Python process uses one core, as one Disque process does; a machine's cores are used
the Disque way, with one node per core joined in a cluster. This supervisor starts N
`conveyor server` processes with the same directives except:
- `port` (and `tls-port` when set) P, P+1, ... P+N-1, each bus port 10000 above;
- `dir` DIR/node-PORT, so every node has its own AOF and nodes.conf;
- `logfile`, `pidfile` and `unixsocket`, when set, get "-PORT" before their extension.

Once every node answers PING, each node that knows fewer than N nodes MEETs the first;
after a restart nodes.conf already holds the cluster and no MEET is sent. Clients reach
every node with HELLO (conveyor.client spreads over them, preferring the best priority).

The supervisor forwards SIGINT/SIGTERM to the nodes and exits when they all have. A node
that exits on its own (crash, SIGKILL) is started again after a backoff of 1 s doubling to
30 s (reset after a minute up), and rejoins from its nodes.conf.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import click

from conveyor.node.config import Config

MAX_NODES = 64
READY_TIMEOUT_S = 30.0
BACKOFF_MIN_S, BACKOFF_MAX_S, STEADY_S = 1.0, 30.0, 60.0
_SUFFIXED = ("logfile", "pidfile", "unixsocket")


def split_nodes_option(argv: list[str]) -> tuple[int | None, list[str]]:
    """(N, the other arguments) for `--nodes N` anywhere in argv; N None when absent.
    Raises click.UsageError for a value that is not a count from 1 to MAX_NODES."""
    if "--nodes" not in argv:
        return None, argv
    at = argv.index("--nodes")
    if at + 1 >= len(argv):
        raise click.UsageError("--nodes needs a count, e.g. --nodes 4")
    value = argv[at + 1]
    if not value.isdigit() or not 1 <= int(value) <= MAX_NODES:
        raise click.UsageError(f"--nodes takes a count from 1 to {MAX_NODES}, not {value!r}")
    return int(value), argv[:at] + argv[at + 2 :]


def _request(*words: str) -> bytes:
    parts = [word.encode() for word in words]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def _suffixed(path: str, port: int) -> str:
    stem, dot, extension = path.rpartition(".")
    if not dot or "/" in extension:
        return f"{path}-{port}"
    return f"{stem}-{port}.{extension}"


def node_arguments(config: Config, argv: list[str], index: int) -> list[str]:
    """The command-line arguments of node `index`: argv, then the per-node overrides
    (later directives win, as in disque.conf)."""
    port = config["port"] + index
    data_dir = Path(config["dir"]) / f"node-{port}"
    extra = ["--port", str(port), "--dir", str(data_dir)]
    if config["tls-port"]:
        extra += ["--tls-port", str(config["tls-port"] + index)]
    for name in _SUFFIXED:
        if config[name]:
            extra += [f"--{name}", _suffixed(config[name], port)]
    return [*argv, *extra]


class NodeSupervisor:
    def __init__(self, config: Config, argv: list[str], count: int) -> None:
        self.config, self.argv, self.count = config, argv, count
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * count
        self.started_at = [0.0] * count
        self.backoff_s = [BACKOFF_MIN_S] * count
        self.restart_at: list[float | None] = [None] * count
        self.stopping = False

    def port(self, index: int) -> int:
        return int(self.config["port"]) + index

    def start(self, index: int) -> None:
        args = node_arguments(self.config, self.argv, index)
        (Path(self.config["dir"]) / f"node-{self.port(index)}").mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "conveyor.cli", "server", *args]
        self.processes[index] = subprocess.Popen(command)
        self.started_at[index] = time.monotonic()

    def run(self) -> int:
        last_port = self.port(self.count - 1)
        if last_port + 10000 > 65535:
            click.echo(f"--nodes {self.count}: port {last_port} has no bus port", err=True)
            return 1
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        for index in range(self.count):
            self.start(index)
        if not self._wait_ready():
            self._stop()
            self._wait_all()
            return 1
        try:
            self._form_cluster()
        except OSError as exc:
            # A node went away meanwhile: it is started again below. Leaving here would
            # leave the others running with nobody to stop or restart them.
            click.echo(f"forming the cluster: {exc}", err=True)
        click.echo(
            f"{self.count} nodes on {self._host()}:{self.port(0)}-{self.port(self.count - 1)}, "
            f"one cluster (bus ports {self.port(0) + 10000}-{self.port(self.count - 1) + 10000})"
        )
        return self._supervise()

    def _host(self) -> str:
        binds = str(self.config["bind"]).split()
        address = binds[0] if binds else "127.0.0.1"
        return "127.0.0.1" if address in ("0.0.0.0", "*", "::", "") else address

    def _call(self, index: int, *words: str) -> bytes:
        """One command on node `index` (after AUTH when a password is set): its reply."""
        with socket.create_connection((self._host(), self.port(index)), timeout=2) as sock:
            password = self.config["requirepass"]
            if password:
                sock.sendall(_request("AUTH", password))
                sock.recv(1024)
            sock.sendall(_request(*words))
            return sock.recv(65536)

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = set(range(self.count))
        while waiting and time.monotonic() < deadline and not self.stopping:
            for index in sorted(waiting):
                process = self.processes[index]
                if process is not None and process.poll() is not None:
                    click.echo(f"node on port {self.port(index)} exited while starting", err=True)
                    return False
                try:
                    if self._call(index, "PING")[:1] == b"+":
                        waiting.discard(index)
                except OSError:
                    pass
            time.sleep(0.1)
        return not waiting and not self.stopping

    def _known_nodes(self, index: int) -> int:
        reply = self._call(index, "CLUSTER", "INFO").decode(errors="replace")
        for line in reply.splitlines():
            if line.startswith("cluster_known_nodes:"):
                return int(line.split(":", 1)[1])
        return 0

    def _form_cluster(self) -> None:
        """MEET the first node where needed, then wait (a few seconds at most) until every
        node knows all N: clients told the cluster is up find it whole."""
        for index in range(1, self.count):
            if self._known_nodes(index) < self.count:
                self._call(index, "CLUSTER", "MEET", self._host(), str(self.port(0)))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and not self.stopping:
            if all(self._known_nodes(i) == self.count for i in range(self.count)):
                return
            time.sleep(0.05)
        click.echo("the nodes have not all met yet; they go on trying", err=True)

    def _supervise(self) -> int:
        while not self.stopping:
            now = time.monotonic()
            for index, process in enumerate(self.processes):
                self._tend(index, process, now)
            time.sleep(0.2)
        return self._wait_all()

    def _tend(self, index: int, process: subprocess.Popen[bytes] | None, now: float) -> None:
        """Start again a node that exited on its own, after its backoff."""
        restart_at = self.restart_at[index]
        if restart_at is not None:
            if now >= restart_at:
                self.restart_at[index] = None
                self.start(index)
            return
        if process is None or process.poll() is None:
            if now - self.started_at[index] > STEADY_S:
                self.backoff_s[index] = BACKOFF_MIN_S
            return
        delay = self.backoff_s[index]
        self.backoff_s[index] = min(delay * 2, BACKOFF_MAX_S)
        self.restart_at[index] = now + delay
        click.echo(
            f"node on port {self.port(index)} exited with {process.returncode}; "
            f"starting it again in {delay:g} s",
            err=True,
        )

    def _stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        self.stopping = True
        for process in self.processes:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)

    def _wait_all(self) -> int:
        failed = 0
        for process in self.processes:
            if process is None:
                continue
            try:
                code = process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            failed += code not in (0, -signal.SIGTERM)
        return 1 if failed else 0
