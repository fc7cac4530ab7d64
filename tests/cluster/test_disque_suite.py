"""scripts/disque_suite.py, the runner of Disque's own cluster suite against Conveyor: its
tally of the suite's output, and (with DISQUE_SRC naming an antirez/disque checkout) a
real run of the suite's first unit."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
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
