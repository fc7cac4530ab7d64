"""A real C Disque 1.0-rc1 node for interop tests (env DISQUE_SERVER: a built disque-server).

Tests that use it skip with a clear reason when DISQUE_SERVER is unset (`needs_disque`).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

from tests.conftest import free_cluster_port

DISQUE_SERVER = os.environ.get("DISQUE_SERVER", "")

needs_disque = pytest.mark.skipif(
    not DISQUE_SERVER,
    reason="interop with C Disque: set DISQUE_SERVER to the path of a built disque-server",
)


class DisqueProcess:
    def __init__(self, data_dir: Path, *args: str, port: int | None = None) -> None:
        self.port = port or free_cluster_port()
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = data_dir / "disque.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [DISQUE_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(data_dir), "--cluster-config-file", "nodes.conf", *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"disque did not start:\n{self.log_path.read_text()}")

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, protocol=2, socket_timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
