"""Job commands: ADDJOB, GETJOB, ACKJOB, FASTACK, WORKING, NACK, ENQUEUE, DEQUEUE, DELJOB,
SHOW, JSCAN, LOADJOB. Each parses its arguments into typed values and calls the core."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from conveyor.core.args import AddJobArgs, GetJobArgs
from conveyor.core.errors import CommandError
from conveyor.core.job import STATE_BY_NAME, Job
from conveyor.core.node import NodeCore
from conveyor.core.waiters import Waiter
from conveyor.node.parsing import (
    SYNTAX,
    check_ids,
    option_codes,
    parse_int,
    parse_scan_args,
    parse_timeout_ms,
)
from conveyor.node.replies import dummy_ack_show_fields, encode_getjob_reply, show_fields
from conveyor.protocol.resp import (
    Status,
    encode,
    error,
    integer,
    null_array,
    null_bulk,
)

if TYPE_CHECKING:
    from conveyor.node.context import ClientContext as Connection
    from conveyor.node.context import NodeContext as Server

_REPLICATE_RANGE = "ERR REPLICATE must be between 1 and 65535"
_TTL_POSITIVE = "ERR TTL must be a number > 0"
_RETRY_NON_NEGATIVE = "ERR RETRY time must be a non negative number"
_DELAY_NON_NEGATIVE = "ERR DELAY time must be a non negative number"
_MAXLEN_POSITIVE = "ERR MAXLEN must be a positive number"
_COUNT_POSITIVE = "ERR COUNT must be a number greater than zero"


def _option_int(raw: bytes, message: str, minimum: int, maximum: int | None = None) -> int:
    value = parse_int(raw)
    if value is None or value < minimum or (maximum is not None and value > maximum):
        raise CommandError(message)
    return value


_REPLICATE, _DELAY, _RETRY, _TTL, _MAXLEN, _ASYNC = 1, 2, 3, 4, 5, 6
_ADDJOB_OPTIONS = option_codes({b"replicate": _REPLICATE, b"delay": _DELAY, b"retry": _RETRY,
                                b"ttl": _TTL, b"maxlen": _MAXLEN, b"async": _ASYNC})  # fmt: skip


# AddJobArgs' fields from repl on (repl, delay, retry, ttl, maxlen, async, timeout).
_AddJobOptions = tuple[int | None, int, int | None, int | None, int | None, bool, int]
# Parsed option tails (the timeout and options after the body): a producer sends the same
# ones with every job, and a lookup costs half as much as parsing them again (5k of 11k
# instructions a job). Only valid tails of at most _TAIL_MAX_ARGS arguments are kept (a
# longer one repeats options, and a key must stay small), at most _RECENT_TAILS_MAX,
# cleared when full like parse_int's cache.
_RECENT_TAILS: dict[tuple[bytes, ...], _AddJobOptions] = {}
_RECENT_TAILS_MAX = 256
_TAIL_MAX_ARGS = 12  # the timeout and all six options once


def parse_addjob(args: list[bytes]) -> AddJobArgs:
    """ADDJOB's arguments; REPLICATE left None when not given (the node's default)."""
    if len(args) == 4:
        # No options: skip the option loop (the hot path of most producers).
        return AddJobArgs(
            args[1], args[2], None, 0, None, None, None, False, parse_timeout_ms(args[3])
        )
    if len(args) - 3 > _TAIL_MAX_ARGS:
        return AddJobArgs(args[1], args[2], *_parse_options(args))
    tail = tuple(args[3:])
    fields = _RECENT_TAILS.get(tail)
    if fields is None:
        fields = _parse_options(args)  # raises for an invalid tail: nothing kept
        if len(_RECENT_TAILS) >= _RECENT_TAILS_MAX:
            _RECENT_TAILS.clear()
        _RECENT_TAILS[tail] = fields
    return AddJobArgs(args[1], args[2], *fields)


def _parse_options(args: list[bytes]) -> _AddJobOptions:
    """ADDJOB's options and timeout, in AddJobArgs' field order from repl on."""
    repl: int | None = None
    delay = 0
    retry: int | None = None
    ttl: int | None = None
    maxlen: int | None = None
    asynchronous = False
    argc = len(args)
    index = 4
    while index < argc:
        raw = args[index]
        option = _ADDJOB_OPTIONS.get(raw) or _ADDJOB_OPTIONS.get(raw.lower(), 0)
        has_value = index + 1 < argc
        if option == _REPLICATE and has_value:
            repl = _option_int(args[index + 1], _REPLICATE_RANGE, 1, 65535)
        elif option == _DELAY and has_value:
            delay = _option_int(args[index + 1], _DELAY_NON_NEGATIVE, 0)
        elif option == _RETRY and has_value:
            retry = _option_int(args[index + 1], _RETRY_NON_NEGATIVE, 0)
        elif option == _TTL and has_value:
            ttl = _option_int(args[index + 1], _TTL_POSITIVE, 1)
        elif option == _MAXLEN and has_value:
            maxlen = _option_int(args[index + 1], _MAXLEN_POSITIVE, 1)
        elif option == _ASYNC:
            asynchronous = True
            index += 1
            continue
        else:
            raise CommandError(SYNTAX)
        index += 2
    return repl, delay, retry, ttl, maxlen, asynchronous, parse_timeout_ms(args[3])


def addjob(server: Server, conn: Connection, args: list[bytes]) -> bytes | None:
    core = server.core
    if core.cluster_size > 1:
        # Copies on other nodes first; None: the client waits for them (blocked).
        return server.cluster.add_job(conn, parse_addjob(args))
    if len(args) == 4 and args[3] == b"0":
        return b"+" + core.add_default_job(args[1], args[2], server.now).id + b"\r\n"
    job = core.add_job(parse_addjob(args), server.now)
    # A status reply, as Disque sends it (clients expect '+', not a bulk).
    return b"+%s\r\n" % job.id


_FROM, _NOHANG, _WITHCOUNTERS, _TIMEOUT, _COUNT = 1, 2, 3, 4, 5
_GETJOB_OPTIONS = option_codes({b"from": _FROM, b"nohang": _NOHANG, b"withcounters": _WITHCOUNTERS,
                                b"timeout": _TIMEOUT, b"count": _COUNT})  # fmt: skip


def parse_getjob(args: list[bytes]) -> GetJobArgs:
    parsed = GetJobArgs([])
    argc = len(args)
    index = 1
    while index < argc:
        raw = args[index]
        option = _GETJOB_OPTIONS.get(raw) or _GETJOB_OPTIONS.get(raw.lower(), 0)
        has_value = index + 1 < argc
        if option == _FROM:
            parsed.queues = args[index + 1 :]
            break
        if option == _NOHANG:
            parsed.nohang = True
        elif option == _WITHCOUNTERS:
            parsed.with_counters = True
        elif option == _TIMEOUT and has_value:
            parsed.timeout_ms = parse_timeout_ms(args[index + 1])
            index += 1
        elif option == _COUNT and has_value:
            parsed.count = _option_int(args[index + 1], _COUNT_POSITIVE, 1)
            index += 1
        else:
            raise CommandError(SYNTAX)
        index += 1
    if not parsed.queues:
        raise CommandError(SYNTAX)
    return parsed


def getjob(server: Server, conn: Connection, args: list[bytes]) -> bytes | None:
    parsed = parse_getjob(args)
    result = server.core.get_job(parsed, conn, server.now)
    if type(result) is Waiter:
        server.block(conn, result)
        return None
    if result:
        return encode_getjob_reply(result, parsed.with_counters)  # type: ignore[arg-type]
    return null_array(conn.protocol == 3)


def _count_reply(
    server: Server, ids: list[bytes], apply: Callable[[NodeCore, list[bytes], int], int]
) -> bytes:
    check_ids(ids)
    return integer(apply(server.core, ids, server.now))


def ackjob(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    if server.core.cluster_size > 1:
        check_ids(args[1:])
        return integer(server.cluster.ack(args[1:]))
    return _count_reply(server, args[1:], NodeCore.ack)


def fastack(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    if server.core.cluster_size > 1:
        check_ids(args[1:])
        return integer(server.cluster.fast_ack(args[1:]))
    return _count_reply(server, args[1:], NodeCore.fast_ack)


def deljob(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    return _count_reply(server, args[1:], NodeCore.del_jobs)


def working(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    check_ids(args[1:2])
    return integer(server.core.working(args[1], server.now))


def nack(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    """NACK id... [DELAY sec]: Conveyor's DELAY puts the jobs back after a pause."""
    ids = args[1:]
    delay_s: int | None = None
    if len(ids) >= 2 and ids[-2].lower() == b"delay":
        delay_s = _option_int(ids[-1], _DELAY_NON_NEGATIVE, 0)
        ids = ids[:-2]
    check_ids(ids)
    return integer(server.core.nack(ids, server.now, delay_s))


def enqueue(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    return _count_reply(server, args[1:], NodeCore.enqueue)


def dequeue(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    return _count_reply(server, args[1:], NodeCore.dequeue)


def show(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    check_ids(args[1:2])
    job = server.core.jobs.get(args[1])
    if job is None:
        dummy = server.cluster.acks.dummies.get(args[1])
        if dummy is None:
            return null_bulk(conn.protocol == 3)
        fields = dummy_ack_show_fields(dummy.id, dummy.etime_ms, server.now)
        return encode(fields, conn.protocol == 3)
    return encode(show_fields(job, server.core.node_name, server.now), conn.protocol == 3)


def loadjob(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    return error("ERR LOADJOB is a special command only processed from AOF")


_JSCAN_OPTIONS = frozenset((b"queue", b"state", b"reply"))


def jscan(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    scan = parse_scan_args(args, _JSCAN_OPTIONS)
    queues = scan.values.get(b"queue")
    queue = queues[-1] if queues else None
    states: set[int] = set()
    for raw in scan.values.get(b"state", ()):
        state = STATE_BY_NAME.get(raw.lower())
        if state is None:
            raise CommandError("ERR Invalid job state name")
        states.add(state)
    reply_all = False
    for raw in scan.values.get(b"reply", ()):
        kind = raw.lower()
        if kind not in (b"id", b"all"):
            raise CommandError("ERR Invalid REPLY type, try ID or ALL")
        reply_all = kind == b"all"

    def accept(job: Job) -> bool:
        return (queue is None or job.queue == queue) and (not states or job.state in states)

    core = server.core
    next_cursor, ids = core.scan_jobs(scan.cursor, scan.count, scan.busyloop, accept, server.now)
    items: list[object] = []
    for job_id in ids:
        if reply_all:
            items.append(show_fields(core.jobs[job_id], core.node_name, server.now))
        else:
            items.append(Status(job_id))
    return encode([str(next_cursor).encode(), items], conn.protocol == 3)
