"""Queue commands: QLEN, QPEEK, QSTAT, QSCAN, PAUSE."""

from __future__ import annotations

from typing import TYPE_CHECKING

from conveyor.core.errors import CommandError
from conveyor.core.queue import PAUSE_ALL, PAUSE_IN, PAUSE_NAMES, PAUSE_NONE, PAUSE_OUT, JobQueue
from conveyor.node.parsing import SYNTAX, int_or_error, parse_scan_args
from conveyor.node.replies import encode_getjob_reply
from conveyor.protocol.resp import encode, integer, null_array

if TYPE_CHECKING:
    from conveyor.node.context import ClientContext as Connection
    from conveyor.node.context import NodeContext as Server


def qlen(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    return integer(server.core.qlen(args[1]))


def qpeek(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    count = int_or_error(args[2])
    return encode_getjob_reply(server.core.qpeek(args[1], count), False)


def qstat(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    queue = server.core.queues.get(args[1])
    if queue is None:
        return null_array(conn.protocol == 3)
    now = server.now
    imports = queue.imports
    return encode(
        [
            b"name", queue.name,
            b"len", queue.count,
            b"age", (now - queue.ctime_ms) // 1000,
            b"idle", (now - queue.atime_ms) // 1000,
            b"blocked", queue.blocked,
            b"import-from", imports.valid_sources(now) if imports else [],
            b"import-rate", imports.rate(now) if imports else 0,
            b"jobs-in", queue.jobs_in,
            b"jobs-out", queue.jobs_out,
            b"pause", PAUSE_NAMES[queue.pause],
        ],
        conn.protocol == 3,
    )  # fmt: skip


_QSCAN_OPTIONS = frozenset((b"minlen", b"maxlen", b"importrate"))


def qscan(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    scan = parse_scan_args(args, _QSCAN_OPTIONS)
    # Every value is checked, as Disque parses each; the last one of an option counts.
    limits = {name: [int_or_error(value) for value in raw][-1] for name, raw in scan.values.items()}
    minlen = limits.get(b"minlen")
    maxlen = limits.get(b"maxlen")
    importrate = limits.get(b"importrate")
    now = server.now

    def accept(queue: JobQueue) -> bool:
        if minlen is not None and queue.count < minlen:
            return False
        if maxlen is not None and queue.count > maxlen:
            return False
        if importrate is None:
            return True
        imports = queue.imports
        return (imports.rate(now) if imports else 0) >= importrate

    next_cursor, names = server.core.scan_queues(
        scan.cursor, scan.count, scan.busyloop, accept, server.now
    )
    return encode([str(next_cursor).encode(), names], conn.protocol == 3)


_PAUSE_OPTIONS = {b"in": PAUSE_IN, b"out": PAUSE_OUT, b"all": PAUSE_ALL}


def pause(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    flags = PAUSE_NONE
    changed = broadcast = False
    for raw in args[2:]:
        option = raw.lower()
        if option in _PAUSE_OPTIONS:
            flags |= _PAUSE_OPTIONS[option]
            changed = True
        elif option == b"none":
            flags = PAUSE_NONE
            changed = True
        elif option == b"bcast":
            broadcast = True
        elif option != b"state":  # state only reads
            raise CommandError(SYNTAX)
    result = server.core.pause(args[1], flags if changed else None, server.now)
    if broadcast:
        # Every other node takes the same flags (Disque sends them even unchanged).
        server.cluster.broadcast_pause(args[1], result)
    return b"+%s\r\n" % PAUSE_NAMES[result]
