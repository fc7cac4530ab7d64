"""scripts/disque_suite.py, the runner of Disque's own cluster suite against Conveyor: its
tally of the suite's output, and (with DISQUE_SRC naming an antirez/disque checkout) a
real run of the suite's first unit."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DISQUE_SRC = os.environ.get("DISQUE_SRC", "")


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "disque_suite", ROOT / "scripts" / "disque_suite.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_blocks_are_counted_per_unit() -> None:
    lines = [
        "Starting disque #0 at port 25000",
        "Testing unit: 00-base.tcl",
        "09:55:27> (init) Restart killed instances: OK",
        "09:55:27> Cluster nodes are reachable: OK",
        "Testing unit: 02-jobs-replication.tcl",
        "09:55:34> ADDJOB, single node: OK",
        "09:55:34> ADDJOB, single node in OOM, external replication (REPL 1): FAILED: OOM ...",
        "09:55:35> A block whose name says: OK: FAILED: NOREPL ...",
        "BLOCKS: ok 3 failed 2",
    ]
    passed, failed = load_script().tally(lines)
    assert passed == {"00-base.tcl": 2, "02-jobs-replication.tcl": 1}
    assert failed == {"02-jobs-replication.tcl": 2}


def test_without_a_disque_checkout_it_says_what_is_missing() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DISQUE_SRC"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "disque_suite.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "set DISQUE_SRC to a checkout of antirez/disque" in done.stderr


@pytest.mark.skipif(
    not DISQUE_SRC, reason="Disque's own suite: set DISQUE_SRC to a checkout of antirez/disque"
)
def test_the_first_unit_of_disques_suite_passes_against_conveyor() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "disque_suite.py"), "--single", "00-base"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert "00-base.tcl                    5 passed   0 failed" in done.stdout


def test_the_framework_ports_are_waited_for_until_free() -> None:
    script = load_script()
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        assert script.busy_ports([port]) == [port]
        started = time.monotonic()
        # Still held at the end of the wait: reported, after waiting no longer than asked.
        assert script.wait_for_ports([port], wait_s=1.5) == [port]
        assert 1.0 <= time.monotonic() - started < 10
        threading.Timer(1.0, holder.close).start()
        assert script.wait_for_ports([port], wait_s=30) == []  # freed meanwhile
    finally:
        holder.close()
    assert script.busy_ports([port]) == []
    assert 35000 in script.FRAMEWORK_PORTS and 25006 in script.FRAMEWORK_PORTS
