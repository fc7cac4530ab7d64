"""Disque's own cluster test suite against Conveyor nodes: a compatibility yardstick.

Not part of `make test`: it needs a Disque source tree and takes about 10 minutes.
DISQUE_SRC names a checkout of antirez/disque (e.g. brought by the search tool's `fetch`;
nothing of it is copied into this repository). Its `tests/` directory is copied to a
scratch directory next to a `src/disque-server` that starts `conveyor server` with the
same arguments, and our driver (`scripts/disque_suite.tcl`) runs Disque's framework and
units, counting every block that fails instead of stopping there as Disque's harness
does. `--server PATH` runs the same against another binary (C Disque itself, for a
baseline).

    DISQUE_SRC=/tmp/disque-build .venv/bin/python scripts/disque_suite.py
    DISQUE_SRC=/tmp/disque-build .venv/bin/python scripts/disque_suite.py --single 02
    DISQUE_SRC=/tmp/disque-build .venv/bin/python scripts/disque_suite.py \\
        --server /tmp/disque-build/src/disque-server

Prints the suite's lines as they come, then the blocks that passed and failed per unit.
Exit status: 0 when the run completed (whatever failed), 2 when it could not run.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DRIVER = HERE / "disque_suite.tcl"
RUN_TIMEOUT_S = 3600  # the whole suite takes ~10 minutes here; a hang must end
# The client ports Disque's framework gives its instances (tests/instances.tcl: from
# disque_base_port 25000, a busy one skipped) and their bus ports, 10000 above.
FRAMEWORK_PORTS = [*range(25000, 25010), *range(35000, 35010)]
PORT_WAIT_S = 65.0  # Linux keeps a closed connection's port in TIME_WAIT for 60 s
_UNIT = re.compile(r"^Testing unit: (\S+)")
_BLOCK = re.compile(r"^\d\d:\d\d:\d\d> .*: (OK|FAILED)")


def conveyor_wrapper() -> str:
    """A disque-server that is a Conveyor node (the argument is Disque's config file)."""
    command = shlex.join([sys.executable, "-m", "conveyor.cli", "server"])
    pythonpath = shlex.quote(str(ROOT))
    return f'#!/bin/sh\nPYTHONPATH={pythonpath} exec {command} "$@"\n'


def prepare(scratch: Path, disque_src: Path, server: Path | None) -> None:
    shutil.copytree(disque_src / "tests", scratch / "tests")
    (scratch / "tests" / "cluster" / "tmp").mkdir(exist_ok=True)
    binary = scratch / "src" / "disque-server"
    binary.parent.mkdir()
    if server is None:
        binary.write_text(conveyor_wrapper())
        binary.chmod(0o755)
    else:
        binary.symlink_to(server.resolve())


def busy_ports(ports: Iterable[int]) -> list[int]:
    """The ports a node could not listen on now, as it listens (SO_REUSEADDR)."""
    busy = []
    for port in ports:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                busy.append(port)
    return busy


def wait_for_ports(ports: Iterable[int], wait_s: float = PORT_WAIT_S) -> list[int]:
    """Wait until every port can be listened on, or `wait_s`; returns those still busy.

    The framework's bus ports (35000 and up) lie in Linux's default ephemeral range
    (32768-60999). A client connection that just closed from one of them holds it in
    TIME_WAIT for 60 s, and a node cannot listen there until then (Conveyor retries, C
    Disque exits): right after a load of many connections (a benchmark, the crash test)
    the first units would fail for a reason that says nothing about the nodes."""
    ports = list(ports)
    deadline = time.monotonic() + wait_s
    busy = busy_ports(ports)
    if busy:
        print(f"disque_suite: ports {busy} are in use; waiting up to {wait_s:.0f} s", flush=True)
    while busy and time.monotonic() < deadline:
        time.sleep(1.0)
        busy = busy_ports(busy)
    return busy


def tally(lines: list[str]) -> tuple[Counter[str], Counter[str]]:
    """Blocks passed and failed, per unit."""
    passed: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    unit = "?"
    for line in lines:
        if match := _UNIT.match(line):
            unit = match.group(1)
        elif match := _BLOCK.match(line):
            (passed if match.group(1) == "OK" else failed)[unit] += 1
    return passed, failed


def run(scratch: Path, single: str | None) -> tuple[int, list[str]]:
    tclsh = shutil.which("tclsh8.6") or shutil.which("tclsh")
    if tclsh is None:
        raise SystemExit("disque_suite: no tclsh (Debian package tcl; `make disque-suite`)")
    command = [tclsh, str(DRIVER)] + (["--single", single] if single else [])
    lines: list[str] = []
    # Its own process group: a hang is ended with every node the driver started.
    with subprocess.Popen(
        command,
        cwd=scratch,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as process:
        timer = threading.Timer(RUN_TIMEOUT_S, os.killpg, (process.pid, signal.SIGKILL))
        timer.start()
        try:
            assert process.stdout is not None
            for line in process.stdout:
                print(line, end="", flush=True)
                lines.append(line.rstrip("\n"))
            status = process.wait()
        finally:
            timer.cancel()
    return status, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--single", help="only the units whose file name contains this")
    parser.add_argument("--server", type=Path, help="another disque-server binary")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    source = os.environ.get("DISQUE_SRC")
    if not source or not (Path(source) / "tests" / "cluster").is_dir():
        print("disque_suite: set DISQUE_SRC to a checkout of antirez/disque", file=sys.stderr)
        return 2
    still_busy = wait_for_ports(FRAMEWORK_PORTS)
    if still_busy:
        print(f"disque_suite: ports {still_busy} still in use; the units that need them "
              "will fail", file=sys.stderr)  # fmt: skip
    scratch = Path(tempfile.mkdtemp(prefix="conveyor-disque-suite-"))
    try:
        prepare(scratch, Path(source), args.server)
        status, lines = run(scratch, args.single)
    finally:
        if args.keep:
            print(f"scratch directory kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    passed, failed = tally(lines)
    server = args.server or "conveyor server"
    print(f"\nDisque's cluster suite against {server}:")
    for unit in sorted(passed.keys() | failed.keys()):
        print(f"  {unit:28} {passed[unit]:3} passed {failed[unit]:3} failed")
    print(f"  {'all units':28} {sum(passed.values()):3} passed {sum(failed.values()):3} failed")
    if status != 0:
        print(f"the driver stopped early (exit status {status})")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
