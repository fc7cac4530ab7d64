"""Helpers for the node integration tests: exact error lines, raw sockets, bounded polls."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable
from typing import Any

import hiredis
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.servers import NodeProcess

JOB_ID_RE = re.compile(rb"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")
# Well formed by structure (length 40, D at 0, '-' at 1, 10, 35) but known to nobody.
UNKNOWN_ID = b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"
BAD_IDS = [
    b"not-an-id",
    b"",
    UNKNOWN_ID[:-1],  # 39 chars
    UNKNOWN_ID + b"1",  # 41 chars
    b"X" + UNKNOWN_ID[1:],  # wrong first char
    UNKNOWN_ID[:1] + b"x" + UNKNOWN_ID[2:],  # no '-' at 1
    UNKNOWN_ID[:10] + b"x" + UNKNOWN_ID[11:],  # no '-' at 10
    UNKNOWN_ID[:35] + b"x" + UNKNOWN_ID[36:],  # no '-' at 35
]
BADID = "BADID Invalid Job ID format."
SYNTAX = "ERR syntax error"
NOT_INTEGER = "ERR value is not an integer or out of range"
# "-0" too: Redis' string2ll refuses it (a leading zero after the sign).
BAD_NUMBERS = ["abc", "1.5", "+1", " 1", "-0", "99999999999999999999", ""]


def strict_client(node: NodeProcess, **kwargs: Any) -> redis.Redis:
    """A redis-py client that does not silently reconnect and retry.

    redis-py retries a command after a dropped connection by default, which would hide
    a node that kills a connection instead of answering.
    """
    return node.client(retry=Retry(NoBackoff(), 0), **kwargs)


def arity_error(name: str) -> str:
    return f"ERR wrong number of arguments for '{name}' command"


def error_of(client: redis.Redis, *args: Any) -> str:
    """The full error line (without '-') a command gets; fails if it succeeds.

    redis-py strips known codes such as ERR or OOM from the message and keeps them in
    `status_code`; this puts them back so tests compare Disque's exact text.
    """
    try:
        reply = client.execute_command(*args)
    except redis.RedisError as exc:
        code = getattr(exc, "status_code", None)
        text = str(exc)
        return f"{code} {text}" if code else text
    raise AssertionError(f"{args!r} succeeded with {reply!r}, expected an error")


def wait_until(
    predicate: Callable[[], Any], timeout_s: float = 5.0, interval_s: float = 0.02
) -> Any:
    """Poll until predicate() is truthy (returns it) or fail after timeout_s."""
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / interval_s) + 2):
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            break
        time.sleep(interval_s)
    raise AssertionError(f"condition not met within {timeout_s} s")


def debug_jobs(client: redis.Redis) -> list[int]:
    """[registered jobs, registered queues]."""
    return list(client.execute_command("DEBUG", "JOBS"))


def info_text(client: redis.Redis, *section: str) -> bytes:
    """INFO's raw text: the name as bytes skips redis-py's INFO parsing callback."""
    return client.execute_command(b"INFO", *section)


def info(client: redis.Redis, section: str = "default") -> dict[str, str]:
    text = info_text(client, section)
    fields: dict[str, str] = {}
    for line in text.decode().split("\r\n"):
        if line and not line.startswith("#") and ":" in line:
            key, value = line.split(":", 1)
            fields[key] = value
    return fields


def qstat(client: redis.Redis, queue: str | bytes) -> dict[bytes, Any] | None:
    reply = client.execute_command("QSTAT", queue)
    if reply is None:
        return None
    return dict(zip(reply[::2], reply[1::2], strict=True))


def show(client: redis.Redis, job_id: bytes) -> dict[bytes, Any] | None:
    reply = client.execute_command("SHOW", job_id)
    if reply is None:
        return None
    return dict(zip(reply[::2], reply[1::2], strict=True))


def counters(client: redis.Redis, job_id: bytes) -> tuple[int, int]:
    fields = show(client, job_id)
    assert fields is not None
    return fields[b"nacks"], fields[b"additional-deliveries"]


def wait_blocked(client: redis.Redis, queue: str, count: int, timeout_s: float = 5.0) -> None:
    """Wait until `count` clients are blocked on queue."""

    def blocked() -> bool:
        stat = qstat(client, queue)
        return stat is not None and stat[b"blocked"] == count

    wait_until(blocked, timeout_s)


def encode_command(*args: str | bytes | int) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _reply_end(data: bytes, pos: int = 0) -> int | None:
    """Where the RESP2 reply starting at pos ends, or None if it is incomplete."""
    line_end = data.find(b"\r\n", pos)
    if line_end < 0:
        return None
    kind = data[pos : pos + 1]
    if kind in (b"+", b"-", b":"):
        return line_end + 2
    size = int(data[pos + 1 : line_end])
    if kind == b"$":
        if size < 0:
            return line_end + 2
        end = line_end + 2 + size + 2
        return end if len(data) >= end else None
    if kind == b"*":
        pos = line_end + 2
        for _ in range(max(size, 0)):
            next_pos = _reply_end(data, pos)
            if next_pos is None:
                return None
            pos = next_pos
        return pos
    raise AssertionError(f"not a RESP reply: {data[pos : pos + 50]!r}")


class RawClient:
    """A bare socket to the node: exact reply bytes, pipelining, half-sent requests."""

    def __init__(self, port: int, timeout_s: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.buffer = b""  # received, not yet returned

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_command(self, *args: str | bytes | int) -> None:
        self.send(encode_command(*args))

    def read_raw(self, timeout_s: float = 5.0) -> bytes:
        """The exact bytes of the next complete reply."""
        deadline = time.monotonic() + timeout_s
        while True:
            end = _reply_end(self.buffer) if self.buffer else None
            if end is not None:
                reply, self.buffer = self.buffer[:end], self.buffer[end:]
                return reply
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no complete reply, got {self.buffer!r}")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"closed by the node after {self.buffer!r}")
            self.buffer += chunk

    def read_reply(self, timeout_s: float = 5.0) -> Any:
        """The next reply, parsed (errors come back as hiredis.ReplyError)."""
        reader = hiredis.Reader()
        reader.feed(self.read_raw(timeout_s))
        return reader.gets()

    def call_raw(self, *args: str | bytes | int, timeout_s: float = 5.0) -> bytes:
        """Send one command and return the exact bytes of its reply."""
        self.send_command(*args)
        return self.read_raw(timeout_s)

    def nothing_to_read(self, wait_s: float = 0.2) -> bool:
        """True when the node sends nothing within wait_s."""
        self.sock.settimeout(wait_s)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return True
        self.buffer += data
        return False

    def is_closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        """True when the node closes the connection within timeout_s (after any data)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True
            if not data:
                return True
        return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
