"""Fixtures for worker tests: a real node, queue directories, real worker processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.client import Client
from conveyor.worker.queuedir import STATES, dir_name
from tests.servers import NodeProcess, running_node

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with running_node(tmp_path_factory.mktemp("node")) as started:
        yield started


@pytest.fixture
def client(node: NodeProcess) -> Iterator[Client]:
    with Client([f"127.0.0.1:{node.port}"]) as c:
        yield c


def make_queue(parent: Path, name: str, script: str | Path, **options: Any) -> Path:
    directory = parent / name
    directory.mkdir(parents=True)
    doc = {"name": name, "script": str(script), **options}
    (directory / "config.json").write_text(json.dumps(doc))
    return directory


def write_script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


class WorkerProcess:
    """`conveyor worker ...` as a real subprocess, its output in a log file."""

    def __init__(self, node: NodeProcess, args: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        command = [sys.executable, "-m", "conveyor.cli", "worker", "-v"]
        command += ["--nodes", f"127.0.0.1:{node.port}", *args]
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ}
        )

    def signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def start_worker(node: NodeProcess, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*args: str) -> WorkerProcess:
        worker = WorkerProcess(node, list(args), tmp_path / f"worker{len(started)}.log")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "") -> Any:
    """Poll `predicate` until it returns something truthy; bounded in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


def message_state(queue_dir: Path, job_id: str) -> tuple[str, dict[str, Any]] | None:
    name = dir_name(job_id)
    for state in STATES:
        status = queue_dir / state / name / "status.json"
        try:
            return state, json.loads(status.read_text())
        except FileNotFoundError:
            continue  # not in this state, or moved to the next one between two looks
        except json.JSONDecodeError:
            return None  # being replaced right now
    return None


def wait_state(
    queue_dir: Path, job_id: str, states: tuple[str, ...], timeout: float = 60.0
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        found = message_state(queue_dir, job_id)
        return found[1] if found and found[0] in states else None

    return wait_for(check, timeout, f"{job_id} in {states}")
