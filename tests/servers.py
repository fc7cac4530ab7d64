"""Real `conveyor server` processes for tests: each on a free port on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from tests.conftest import free_port

# Starts on a port we chose ourselves, when another process took it meanwhile.
PORT_ATTEMPTS = 3


class NodeProcess:
    """A running node; `client()` gives a redis-py client set up for Disque."""

    def __init__(
        self,
        data_dir: Path,
        *args: str,
        config_file: Path | None = None,
        preexec_fn: Callable[[], None] | None = None,
        wait: bool = True,
        port: int | None = None,
        pick_port: Callable[[], int] = free_port,
    ) -> None:
        """Start the node; with `wait`, return once it answers PING. A port of our own
        choosing that another process took meanwhile is chosen again (a few times)."""
        self.data_dir = data_dir
        self.log_path = data_dir / "node.log"
        data_dir.mkdir(parents=True, exist_ok=True)
        attempts = 1 if port is not None or not wait else PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            self.port = port or pick_port()
            self._spawn(args, config_file, preexec_fn)
            if not wait:
                return
            try:
                self._wait_ready()
                return
            except RuntimeError as error:
                if attempt == attempts or "address already in use" not in str(error):
                    raise
                self._log.close()

    def _spawn(
        self,
        args: tuple[str, ...],
        config_file: Path | None,
        preexec_fn: Callable[[], None] | None,
    ) -> None:
        command = [sys.executable, "-m", "conveyor.cli", "server"]
        if config_file is not None:
            command.append(str(config_file))
        command += ["--port", str(self.port), "--dir", str(self.data_dir), *args]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ},
            preexec_fn=preexec_fn,
        )

    def _wait_ready(self, timeout_s: float = 10.0) -> None:
        # A raw inline PING: any reply (+PONG, or -NOAUTH under requirepass) means ready.
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"node exited early:\n{self.log_path.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64)[:1] in (b"+", b"-"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"node did not answer PING:\n{self.log_path.read_text()}")

    def client(self, **kwargs: object) -> redis.Redis:
        options: dict[str, object] = {
            "host": "127.0.0.1",
            "port": self.port,
            "protocol": 2,
            "socket_timeout": 10,
        }
        options.update(kwargs)
        return redis.Redis(**options)  # type: ignore[arg-type]

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout_s: float = 10.0) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


@contextmanager
def running_node(
    data_dir: Path, *args: str, config_file: Path | None = None
) -> Iterator[NodeProcess]:
    node = NodeProcess(data_dir, *args, config_file=config_file)
    try:
        yield node
    finally:
        node.stop()
