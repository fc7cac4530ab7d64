"""Fuzz target: every command's argument parser, driven against the pure core.

Run: `.venv/bin/python -m fuzz.fuzz_commands [libFuzzer flags] [corpus dirs]` (or `make fuzz`).

Each input is a short program run on a new in-process `Server` (no sockets, no event loop:
as in tests/node/test_node_in_process.py) with three clients. A step runs one command,
named from the command table (or not: an unknown name), with 0..8 arguments, each raw
bytes or drawn from what gets deep: keywords and subcommands, queue names, the job IDs
earlier replies returned, numbers at the edges (int64, nan, 1e400, '+1', '01'), config
directive names, bodies up to 4 KB. Other steps advance the node clock (timers fire:
retries, TTLs, GETJOB timeouts; at most a century in all) or disconnect a client (a
blocked one unblocks).
`encode_program` writes programs for seeds and tests.

Allowed: replies that are well-formed RESP for the client's protocol (RESP3 only after
HELLO 3) and not `-ERR internal error ...` (what `Server.execute` sends when a handler
raised: the bug class hunted here); no reply only from a GETJOB that blocked; replies a
blocked client is owed, delivered well-formed. After every step the core's invariants
hold: queue lengths agree with the jobs, `jobs_bytes` is the jobs' estimate and >= 0, the
blocked-client counts agree with the clients actually blocked.

Neutered, so the fuzzer can neither stall nor touch the file system outside its temp
directory: DEBUG SLEEP validates its argument as `time.sleep` would but does not sleep,
CONFIG SET of a path directive gets a name inside the temp directory (a NUL byte is left
in, to test its refusal), SHUTDOWN does nothing.

The temp directory is `$CONVEYOR_FUZZ_SCRATCH` when set: `fuzz/run.py` sets it inside its
work directory, which it removes, because libFuzzer ends a run with C's `exit()` and
Python's exit handlers never run. Otherwise (tests, seeds) it is a new temp directory
removed when the interpreter exits.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import atheris

from fuzz.harness import SCRATCH_ENV, Guard, Violation, main_args, no_known_issues
from fuzz.resp_check import Malformed, check_reply

MAX_STEPS = 64
MAX_CLOCK_ADVANCE_MS = 100 * 365 * 86400 * 1000  # a century of uptime
CLIENTS = 3
QUEUES = [b"q", b"q1", b"q2", b"", b"dead", b"\x00q"]
KEYWORDS = [
    # GETJOB, ADDJOB, NACK, scans, PAUSE
    b"FROM", b"NOHANG", b"WITHCOUNTERS", b"TIMEOUT", b"COUNT", b"REPLICATE", b"DELAY",
    b"RETRY", b"TTL", b"MAXLEN", b"ASYNC", b"BUSYLOOP", b"QUEUE", b"STATE", b"REPLY",
    b"ID", b"ALL", b"MINLEN", b"IMPORTRATE", b"IN", b"OUT", b"NONE", b"BCAST",
    b"queued", b"active", b"acked", b"wait-repl",
    # CONFIG, CLUSTER, DEBUG, COMMAND, CLIENT, HELLO, SHUTDOWN
    b"GET", b"SET", b"RESETSTAT", b"REWRITE", b"MYID", b"NODES", b"INFO", b"LEAVING",
    b"SAVECONFIG", b"MEET", b"FORGET", b"RESET", b"SOFT", b"HARD", b"yes", b"no", b"local",
    b"FLUSHALL", b"SLEEP", b"ERROR", b"STRUCTSIZE", b"JOBS", b"REWRITE-AOF", b"DOCS",
    b"LIST", b"HELP", b"KILL", b"SETNAME", b"GETNAME", b"SETINFO", b"LIB-NAME", b"LIB-VER",
    b"ADDR", b"LADDR", b"TYPE", b"USER", b"SKIPME", b"MAXAGE", b"normal", b"master",
    b"replica", b"pubsub", b"AUTH", b"default", b"2", b"3", b"*", b"server", b"memory",
    b"stats", b"clients", b"everything", b"127.0.0.1:40000", b"127.0.0.1:40001",
]  # fmt: skip
NUMBERS = [
    b"0", b"1", b"-1", b"2", b"10", b"100", b"1000", b"65535", b"65536", b"32768",
    b"40000", b"2147483647", b"2147483648", b"4294967296", b"9223372036854775807",
    b"9223372036854775808", b"-9223372036854775808", b"-9223372036854775809",
    b"18446744073709551616", b"99999999999999999999999", b"nan", b"inf", b"-inf",
    b"1e400", b"1.5", b"0.001", b"+1", b"01", b" 1", b"1_0", b"", b"0x10", b"-0", b"1mb",
    b"1gb", b"100kb", b"0 0 0", b"normal 1mb 1mb 60",
]  # fmt: skip
_ID_RE = re.compile(rb"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}")

conveyor: dict[str, Any] = {}  # the modules, imported by load()
_workdir: Path | None = None
_runs = 0


class Exhausted(Exception):
    """The program ran out of bytes."""


class Reader:
    """Reads a program front to back; the end of the input ends the program."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise Exhausted
        self.pos += 1
        return self.data[self.pos - 1]

    def take(self, count: int) -> bytes:
        chunk = self.data[self.pos : self.pos + count]
        self.pos += count
        return chunk


# -- loading and neutering ----------------------------------------------------------------
class _TimeShim:
    """`time` for cmd_admin: sleep() refuses what time.sleep refuses, without sleeping."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        if not (isinstance(seconds, int | float) and 0 <= seconds <= 9e9):
            time.sleep(seconds)  # nan, inf, negative, huge, not a number: it raises


class FakeHandle:
    def cancel(self) -> None:
        pass


class FakeLoop:
    """What the server asks of its event loop: timers, never run (the harness ticks)."""

    def call_later(self, delay: float, callback: Any, *args: Any) -> FakeHandle:
        return FakeHandle()

    def call_soon(self, callback: Any, *args: Any) -> FakeHandle:
        return FakeHandle()

    def time(self) -> float:
        return time.monotonic()


def load(instrument: bool = False) -> None:
    """Import the node (instrumented for coverage when fuzzing) and neuter what must be."""
    global _workdir
    if conveyor:
        return
    if instrument:
        with atheris.instrument_imports(include=["conveyor"]):
            _import()
    else:
        _import()
    conveyor["cmd_admin"].time = _TimeShim()
    _workdir = scratch_directory()


def scratch_directory() -> Path:
    """Where CONFIG SET puts the files it names (see the module docstring)."""
    given = os.environ.get(SCRATCH_ENV)
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        return path
    path = Path(tempfile.mkdtemp(prefix="conveyor-fuzz-commands-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _import() -> None:
    from conveyor.core import job, state
    from conveyor.node import cmd_admin, commands, config, connection, server

    conveyor.update(
        job=job,
        state=state,
        cmd_admin=cmd_admin,
        commands=commands,
        config=config,
        connection=connection,
        server=server,
    )


def names() -> list[bytes]:
    return sorted({command.name for command in conveyor["commands"].COMMANDS})


def directive_names() -> list[bytes]:
    return sorted(name.encode() for name in conveyor["config"].DIRECTIVES)


def path_directives() -> set[str]:
    paths = set(getattr(conveyor["config"], "PATH_DIRECTIVES", ()))
    return paths | {"dir", "event-log", "logfile", "pidfile", "unixsocket", "appendfilename"}


def neuter(request: list[bytes]) -> list[bytes] | None:
    """The request with dangerous arguments replaced; None to skip it."""
    assert _workdir is not None
    name = request[0].lower()
    if name == b"config" and len(request) >= 4 and request[1].lower() == b"set":
        request = list(request)
        paths = path_directives()
        for index in range(2, len(request) - 1, 2):
            directive = request[index].decode(errors="replace").lower()
            if directive not in paths:
                continue
            value = request[index + 1]
            if directive == "dir":
                request[index + 1] = str(_workdir).encode()
            elif b"\x00" in value or value == b"":
                pass  # refused before any file is touched, or "off"
            else:
                request[index + 1] = b"ev%d" % (sum(value) % 3)
    return request


# -- the clients --------------------------------------------------------------------------
def client_class() -> type:
    connection = conveyor["connection"]

    class FuzzClient(connection.Connection):  # type: ignore[misc, name-defined]
        """A connection without a socket: writes are checked, close is recorded."""

        __slots__ = ("writes",)

        def __init__(self, server: Any) -> None:
            super().__init__(server)
            self.addr = "127.0.0.1:40000"
            self.laddr = "127.0.0.1:7711"
            self.writes = 0

        def write(self, data: bytes) -> None:
            try:
                check_reply(data, self.protocol == 3)
            except Malformed as exc:
                raise Violation(f"written to a client: {exc}") from None
            self.writes += 1

        def close(self) -> None:
            self.closed = True

        def abort(self) -> None:
            self.closed = True

    return FuzzClient


class Session:
    """One input's server and clients."""

    def __init__(self) -> None:
        server_module = conveyor["server"]
        config = conveyor["config"].Config()
        config.set("dir", str(_workdir))
        import random

        self.server = server_module.Server(config, "f" * 40, b"s" * 20, random.Random(7))
        self.server.loop = FakeLoop()
        self.server.request_shutdown = lambda: None
        self.client_type = client_class()
        self.clients: list[Any] = [self.connect() for _ in range(CLIENTS)]
        self.ids: list[bytes] = []

    def connect(self) -> Any:
        client = self.client_type(self.server)
        self.server.client_connected(client)
        return client

    def replace_closed(self) -> None:
        for index, client in enumerate(self.clients):
            if client.closed:
                self.server.client_disconnected(client)
                self.clients[index] = self.connect()

    def run(self, client: Any, request: list[bytes]) -> None:
        if client.closed:
            return
        if client.waiter is not None or client.pending:
            if hasattr(client, "hold"):
                client.hold(request)
            else:
                client.pending.append(request)
            return
        reply = self.server.execute(client, request)
        self.check_reply(client, request, reply)

    def check_reply(self, client: Any, request: list[bytes], reply: bytes | None) -> None:
        name = request[0].lower()
        if reply is None:
            if name == b"getjob" and client.waiter is not None:
                return
            if name == b"shutdown":
                return
            raise Violation(f"no reply to {request[:3]!r:.200}")
        if reply == b"" and client.closed:
            return  # QUIT (its +OK was written), or a client cut off
        try:
            check_reply(reply, client.protocol == 3)
        except Malformed as exc:
            raise Violation(f"reply to {request[:4]!r:.200}: {exc}") from None
        for job_id in _ID_RE.findall(reply):
            if job_id not in self.ids and len(self.ids) < 32:
                self.ids.append(job_id)

    def settle(self) -> None:
        """What the node does after each read: deliver what the core left, then close."""
        self.server.after_io()
        self.replace_closed()
        self.server.after_io()

    def tick(self, now: int) -> None:
        """Advance the node clock (never past MAX_CLOCK_ADVANCE_MS from the start: a
        job's deadline may be int64 seconds away, a wall clock never gets there)."""
        server = self.server
        server.now = max(server.now, min(now, server.started_ms + MAX_CLOCK_ADVANCE_MS))
        server.core.tick(server.now)
        self.settle()

    def check_invariants(self) -> None:
        core = self.server.core
        job_module = conveyor["job"]
        queued = job_module.QUEUED
        per_queue: dict[bytes, int] = {}
        expected_bytes = 0
        for job in core.jobs.values():
            expected_bytes += conveyor["state"].JOB_OVERHEAD_BYTES + len(job.body)
            if job.state == queued:
                per_queue[job.queue] = per_queue.get(job.queue, 0) + 1
                if job.queue not in core.queues:
                    raise Violation(f"queued job {job.id!r} in a queue that does not exist")
        if core.jobs_bytes != expected_bytes or core.jobs_bytes < 0:
            raise Violation(f"jobs_bytes {core.jobs_bytes}, jobs hold {expected_bytes}")
        blocked_here = [c.waiter for c in self.clients if c.waiter is not None]
        if any(waiter.done for waiter in blocked_here):
            raise Violation("a client still holds a finished waiter")
        if core.blocked_clients != len(blocked_here) or core.blocked_clients < 0:
            raise Violation(
                f"blocked_clients {core.blocked_clients}, clients blocked {len(blocked_here)}"
            )
        for name, queue in core.queues.items():
            if queue.count != per_queue.get(name, 0) or core.qlen(name) != queue.count:
                raise Violation(
                    f"queue {name!r}: count {queue.count}, qlen {core.qlen(name)}, "
                    f"queued jobs {per_queue.get(name, 0)}"
                )
            waiting = sum(w.queues.count(name) for w in blocked_here)
            if queue.blocked != waiting or len(queue.waiters) != queue.blocked:
                raise Violation(
                    f"queue {name!r}: blocked {queue.blocked}, waiters {len(queue.waiters)}, "
                    f"clients waiting {waiting}"
                )
        if self.server.used_memory() < 0:
            raise Violation("used_memory() < 0")


# -- programs -----------------------------------------------------------------------------
OP_TICK, OP_DEADLINE, OP_DISCONNECT = 12, 13, 14
RAW_NAME = 0xF0  # a name byte from here on: the command name follows as raw bytes


def _argument(reader: Reader, session: Session) -> bytes:
    kind = reader.byte() % 10
    if kind == 0:
        return reader.take(reader.byte() % 32)
    if kind == 1:
        return KEYWORDS[reader.byte() % len(KEYWORDS)]
    if kind == 2:
        return QUEUES[reader.byte() % len(QUEUES)]
    if kind == 3:
        index = reader.byte()
        return session.ids[index % len(session.ids)] if session.ids else b"D-" + b"f" * 38
    if kind == 4:
        return NUMBERS[reader.byte() % len(NUMBERS)]
    if kind == 5:
        return str(int.from_bytes(reader.take(8).ljust(8, b"\0"), "little", signed=True)).encode()
    if kind == 6:
        return str(reader.byte() - 16).encode()
    if kind == 7:  # a job ID with one byte changed (or cut short)
        base = session.ids[0] if session.ids else b"D-ffffffff-" + b"A" * 24 + b"-0000"
        where, value = reader.byte() % 41, reader.byte()
        return base[:where] + (bytes([value]) + base[where + 1 :] if value else b"")
    if kind == 8:
        return bytes([reader.byte()]) * (reader.byte() << 4)
    return _directives[reader.byte() % len(_directives)]


_directives: list[bytes] = []


def run_program(data: bytes) -> None:
    global _runs, _directives
    load()
    if not _directives:
        _directives = directive_names()
    _runs += 1
    if _runs % 500 == 0:
        _clean_workdir()
    table = names()
    session = Session()
    reader = Reader(data)
    try:
        for _ in range(MAX_STEPS):
            op = reader.byte() % 16
            if op == OP_TICK:
                session.tick(session.server.now + ((reader.byte() << 8) | reader.byte()) * 16)
            elif op == OP_DEADLINE:
                deadline = session.server.core.next_deadline()
                if deadline is not None:
                    session.tick(deadline)
            elif op == OP_DISCONNECT:
                session.clients[reader.byte() % CLIENTS].closed = True
                session.settle()
            elif op == 15:
                continue
            else:
                pick = reader.byte()
                raw_name = reader.take(reader.byte() % 32) if pick >= RAW_NAME else None
                flags = reader.byte()
                client = session.clients[flags % CLIENTS]
                if raw_name is not None:
                    name = raw_name or b"x"  # any name, known or not, as the client spelled it
                else:
                    name = table[pick % len(table)]
                    spelling = (flags >> 2) % 3
                    name = name.upper() if spelling == 1 else name.title() if spelling else name
                args = [_argument(reader, session) for _ in range(reader.byte() % 9)]
                request = neuter([name, *args])
                if request is None:
                    continue
                session.run(client, request)
                session.settle()
            session.check_invariants()
    except Exhausted:
        pass
    session.check_invariants()
    for client in session.clients:
        session.server.client_disconnected(client)
    if session.server.event_log is not None:
        session.server.event_log = None  # drop, unflushed: nothing to write


def _clean_workdir() -> None:
    """Event-log directories made by CONFIG SET event-log grow; clear them now and then."""
    assert _workdir is not None
    for entry in _workdir.iterdir():
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)


# -- writing programs ---------------------------------------------------------------------
def encode_program(steps: list[Any]) -> bytes:
    """A fuzz input from steps: ("tick", ms), ("deadline",), ("disconnect", client), or
    (client, [name, *args]) where name is any command name (up to 31 bytes) and each arg
    is bytes (up to 31) or ("kw", word) / ("queue", name) / ("num", text) naming an entry
    of KEYWORDS / QUEUES / NUMBERS, ("id", n) the n-th job ID seen in replies,
    ("body", byte, size // 16), or ("directive", name) a config directive."""
    load()
    out = bytearray()
    for step in steps:
        if step[0] == "tick":
            units = min(step[1] // 16, 0xFFFF)
            out += bytes([OP_TICK, units >> 8, units & 0xFF])
        elif step[0] == "deadline":
            out.append(OP_DEADLINE)
        elif step[0] == "disconnect":
            out += bytes([OP_DISCONNECT, step[1]])
        else:
            client, (name, *args) = step
            # Names and directives as raw bytes: a seed means the same when the command
            # table or the directive list grows.
            out += bytes([0, RAW_NAME, len(name)]) + name + bytes([client, len(args)])
            for arg in args:
                if isinstance(arg, bytes):
                    assert len(arg) < 32
                    out += bytes([0, len(arg)]) + arg
                elif arg[0] == "kw":
                    out += bytes([1, KEYWORDS.index(arg[1])])
                elif arg[0] == "queue":
                    out += bytes([2, QUEUES.index(arg[1])])
                elif arg[0] == "id":
                    out += bytes([3, arg[1]])
                elif arg[0] == "num":
                    out += bytes([4, NUMBERS.index(arg[1])])
                elif arg[0] == "body":
                    out += bytes([8, arg[1], arg[2]])
                elif arg[0] == "directive":
                    assert arg[1].decode() in conveyor["config"].DIRECTIVES
                    out += bytes([0, len(arg[1])]) + arg[1]
                else:
                    raise ValueError(arg)
    return bytes(out)


# -- the target ---------------------------------------------------------------------------
def known_issue(exc: BaseException, data: bytes) -> str | None:
    """Crashes tracked by an xfail regression test (tests/fuzz/test_regressions.py)."""
    return no_known_issues(exc, data)


GUARD = Guard(known_issue)


def one_input(data: bytes) -> None:
    GUARD.run(run_program, data)


def silence_logs() -> None:
    """The node's logs, off for a fuzzing process (millions of inputs). Not done by
    load(): under pytest this process runs every other test too, which read logs."""
    root = logging.getLogger("conveyor")
    root.addHandler(logging.NullHandler())  # configure_logging adds none after this
    root.propagate = False
    root.setLevel(logging.CRITICAL + 1)


def main() -> None:
    silence_logs()
    load(instrument=True)
    atheris.Setup(main_args(), one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    sys.exit(main())
