"""Helpers for the pressure suite: starting redis-server, reading the keyspace raw."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from conveyor.pressure.queue import PressureQueue

QueueFactory = Callable[..., PressureQueue]

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RedisServer:
    """A redis-server child process we started and must stop."""

    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **options: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **options)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_redis(directory: Path) -> RedisServer:
    """Start redis-server on a free port in `directory` and wait until it answers PING."""
    assert Path(REDIS_SERVER).exists(), "redis-server is required (make sysdeps)"
    port = free_port()
    assert port != 6379
    process = subprocess.Popen(
        [
            REDIS_SERVER,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = RedisServer(port, process)
    deadline = time.monotonic() + 10
    probe = server.client(socket_timeout=1, socket_connect_timeout=1)
    try:
        while True:
            try:
                if probe.ping():
                    return server
            except redis.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"redis-server on port {port} did not start")
            time.sleep(0.05)
    finally:
        probe.close()


def spec_keys(prefix: str, name: str) -> dict[str, str]:
    """Suffix -> full key name, as the specification lists them ("" is the queue list)."""
    base = f"{prefix}:{name}"
    suffixes = [
        "bound",
        "producer",
        "consumer",
        "producer_free",
        "consumer_free",
        "stats:produced_messages",
        "stats:produced_bytes",
        "stats:consumed_messages",
        "stats:consumed_bytes",
        "not_full",
        "closed",
    ]
    return {"": base, **{suffix: f"{base}:{suffix}" for suffix in suffixes}}


def keyspace(raw: redis.Redis, prefix: str, name: str) -> dict[str, tuple[str, object]]:
    """Every key under the prefix, by spec suffix: ("string", value) or ("list", length).

    Asserts there is no key the specification does not name.
    """
    names = {full: suffix for suffix, full in spec_keys(prefix, name).items()}
    found: dict[str, tuple[str, object]] = {}
    for key in raw.keys(f"{prefix}:*"):
        text = key.decode()
        assert text in names, f"unexpected key {text!r}"
        kind = raw.type(key).decode()
        if kind == "string":
            found[names[text]] = ("string", raw.get(key).decode())  # type: ignore[union-attr]
        elif kind == "list":
            found[names[text]] = ("list", raw.llen(key))
        else:
            raise AssertionError(f"key {text!r} has type {kind}")
    return found


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll `predicate` until true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def background(action: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    """Run `action` in a daemon thread; what it raises lands in the returned list."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors
