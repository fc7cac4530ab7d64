"""Fixtures for the console's tests: a real node, queue directories, a real worker and the
console served by a real uvicorn (`python -m conveyor.web.cli`), all on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from tests.servers import NodeProcess, running_node

# A queue script that logs in colour, then ends as param1 says: `err`, `slow` (waits for
# the file named by param2 to exist, at most 30 s), anything else done.
SCRIPT = r"""#!/bin/bash
echo $'\e[1;32mgreen start\e[0m for '"$RQ_PARAM1"
echo "run working on $RQ_PARAM1" >&$RQ_WRITE
if [ "$RQ_PARAM1" == "slow" ]; then
  for i in $(seq 1 300); do
    [ -e "$RQ_PARAM2" ] && break
    echo $'\e[33mtick\e[0m '"$i"
    sleep 0.1
  done
fi
if [ "$RQ_PARAM1" == "err" ]; then
  echo $'\e[31mfailing by design\e[0m'
  echo "err by design" >&$RQ_WRITE
  exit 0
fi
echo "done all good" >&$RQ_WRITE
"""
FORM = {
    "default": "hidden",
    "mesg_param1": {"label": "What to do", "help": "err, slow or text"},
    "mesg_param2": {"label": "Flag file"},
}


def make_queue(parent: Path, name: str, script: Path, **options: Any) -> Path:
    directory = parent / name
    directory.mkdir(parents=True)
    doc = {"name": name, "script": str(script), "exec_prefix": "", **options}
    (directory / "config.json").write_text(json.dumps(doc))
    (directory / "form.json").write_text(json.dumps(FORM))
    return directory


class Background:
    """A `python -m conveyor.cli ...`-style subprocess with its output in a log file."""

    def __init__(self, command: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ}
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


class WebProcess(Background):
    """`conveyor web` on a free port; `url` is its base URL."""

    def __init__(
        self, tmp: Path, node: NodeProcess, config: dict[str, Any], queues_dir: Path | None = None
    ) -> None:
        self.port = free_port()
        root = config.get("relative_root", "").rstrip("/")
        self.url = f"http://127.0.0.1:{self.port}{root}"
        config_path = tmp / f"web-{self.port}.json"
        config_path.write_text(json.dumps(config))
        command = [
            sys.executable,
            "-m",
            "conveyor.web.cli",
            "--config",
            str(config_path),
            "--nodes",
            f"127.0.0.1:{node.port}",
            "--port",
            str(self.port),
        ]
        if queues_dir is not None:
            command += ["--queues-dir", str(queues_dir)]
        super().__init__(command, tmp / f"web-{self.port}.log")
        self._wait_ready()

    def _wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"conveyor web exited:\n{self.output()}")
            try:
                with urllib.request.urlopen(f"{self.url}/static/console.css", timeout=1.0):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise RuntimeError(f"conveyor web did not answer:\n{self.output()}")


def wait_for(predicate: Any, what: str, timeout_s: float = 20.0) -> Any:
    """Poll `predicate` until it returns something truthy; bounded in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with running_node(tmp_path_factory.mktemp("node")) as started:
        yield started


@pytest.fixture(scope="module")
def queues_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("queues")
    script = parent / "script.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    make_queue(parent, "jobs", script, retry=5)
    return parent


@pytest.fixture(scope="module")
def worker(
    tmp_path_factory: pytest.TempPathFactory, node: NodeProcess, queues_dir: Path
) -> Iterator[Background]:
    command = [
        sys.executable,
        "-m",
        "conveyor.cli",
        "worker",
        "-v",
        "--grace",
        "2",
        "--nodes",
        f"127.0.0.1:{node.port}",
        str(queues_dir / "jobs"),
    ]
    started = Background(command, tmp_path_factory.mktemp("worker") / "worker.log")
    yield started
    started.stop()


@pytest.fixture(scope="module")
def web(
    tmp_path_factory: pytest.TempPathFactory, node: NodeProcess, queues_dir: Path
) -> Iterator[WebProcess]:
    """An open console (no auth configured): every user is admin."""
    started = WebProcess(tmp_path_factory.mktemp("web"), node, {}, queues_dir)
    yield started
    started.stop()


@pytest.fixture
def api(web: WebProcess) -> Iterator[Any]:
    import httpx

    with httpx.Client(base_url=f"{web.url}/api/v1", timeout=15.0) as client:
        yield client
