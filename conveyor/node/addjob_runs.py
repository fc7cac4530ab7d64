"""Runs of ADDJOBs: consecutive ADDJOBs of one read with the same options, run as one.

A producer pipelining jobs sends the same ADDJOB again and again with a new body (often
the same queue): per job, the command table's checks (lookup, auth, arity), the option
parsing and a new AddJobArgs are the same work each time. `Connection._run` gathers such
a run (same argument count, same timeout and options, at most RUN_MAX_JOBS) and hands it
here. The command is looked up and its options parsed once, and the cluster checks
them once (`Replication.plan_adds`: TTL and RETRY, the replication level, the copies'
targets and header); each job then goes to the same cluster handler `cmd_jobs.addjob`
calls, with the same memory check `Server.execute` makes, one reply or deferred slot per
job in request order.

A run is planned (`plan_run`) as it is yielded, once the requests before it have run.
Anything unusual leaves it unplanned, and its requests are yielded one by one to go
through `Server.execute`: a single node (its own fast path), a renamed or refused
ADDJOB (loading), options that do not parse (each job gets the error). So a run answers
exactly what its jobs would answer one by one; only the per-command counters are added
once per run.

A planned run into one queue whose jobs nothing can hold, refuse or send elsewhere (the
usual case: a producer's pipeline, or node/turn_adds.py's ADDJOBs of one turn) goes
further: `_add_together` has all its jobs made, filed and copied in one call
(ClusterDriver.add_run, Replication.add_run, JobRunsMixin.add_run), which saves the ~10
Python calls each job otherwise makes on its way (docs/performance.md, twelfth look).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from time import perf_counter_ns
from typing import TYPE_CHECKING

from conveyor.core.args import AddJobArgs
from conveyor.core.errors import OOM, CommandError
from conveyor.core.state import JOB_OVERHEAD_BYTES
from conveyor.node import cmd_jobs
from conveyor.node.deferred import ADDJOB_SPELLINGS, MAX_OUTSTANDING, ReplySlot
from conveyor.protocol.requests import ProtocolError
from conveyor.protocol.resp import error

if TYPE_CHECKING:
    from conveyor.cluster.planned_adds import AddPlan
    from conveyor.node.commands import Command
    from conveyor.node.connection import Connection
    from conveyor.node.server import Server

# At most this many ADDJOBs gathered before they run: a read's copies still leave every
# MID_READ_ACTIONS (node/send_policy.py), and the run's list stays small.
RUN_MAX_JOBS = 32


class AddJobRun(list[list[bytes]]):
    """ADDJOB requests gathered to run as one (told apart from a request by its type),
    with what they share: the command and their parsed options (`plan_run`)."""

    __slots__ = ("args", "command")

    command: Command
    args: AddJobArgs


Plan = tuple["Command", AddJobArgs]


def gather_runs(
    requests: Iterator[list[bytes]], plan: Callable[[list[bytes]], Plan | None]
) -> Iterator[list[bytes] | AddJobRun]:
    """The requests of a read, with consecutive ADDJOBs of the same options gathered.

    A request is yielded as it comes unless it is an ADDJOB spelled as clients spell it;
    those wait in an AddJobRun until one with other options or another command comes,
    the run is full, or the read ends. A protocol error ends the read after the run
    gathered before it (the requests before an error run, as they always have)."""
    run = AddJobRun()
    tail: list[bytes] = []
    try:
        for request in requests:
            if request[0] not in ADDJOB_SPELLINGS or len(request) < 4:
                if run:
                    yield from _planned(run, plan)
                    run = AddJobRun()
                yield request
                continue
            if run and request[3:] != tail:
                yield from _planned(run, plan)
                run = AddJobRun()
            if not run:
                tail = request[3:]
            run.append(request)
            if len(run) == RUN_MAX_JOBS:
                yield from _planned(run, plan)
                run = AddJobRun()
    except ProtocolError:
        if run:
            yield from _planned(run, plan)
        raise
    if run:
        yield from _planned(run, plan)


def _planned(
    run: AddJobRun, plan: Callable[[list[bytes]], Plan | None]
) -> Iterator[list[bytes] | AddJobRun]:
    """The run as one, or its requests one by one when it has no plan. Planned as it is
    yielded: the requests before it have run, so the plan sees the state it runs in."""
    found = plan(run[0])
    if found is None:
        yield from run
    else:
        run.command, run.args = found
        yield run


def plan_run(conn: Connection, first: list[bytes]) -> Plan | None:
    """The command and the parsed options a run shares, or None: its requests go through
    `Server.execute` one by one (a single node, which has its own fast path; a client
    not authenticated; an ADDJOB renamed or refused while loading; options that do not
    parse, so that each job gets the error)."""
    server = conn.server
    if not conn.authenticated and server.config["requirepass"]:
        return None  # NOAUTH, from the command table
    name = first[0]
    commands = server.commands
    command = commands.get(name) or commands.get(name.lower())
    if command is None or command.handler is not cmd_jobs.addjob or server.core.cluster_size <= 1:
        return None
    try:
        args = cmd_jobs.parse_addjob(first)
    except CommandError:
        return None
    return command, args


def run_addjobs(
    conn: Connection, run: AddJobRun, out: list[bytes], out_bytes: int
) -> tuple[int, int]:
    """Run a planned run for `conn` as its requests would run one by one: ready replies
    appended to `out` (or behind replies still owed), requests held behind a blocked
    GETJOB or a full line of owed replies. Returns (the jobs now waiting for their
    copies, the size of `out`: `out_bytes` is what it held before)."""
    command = run.command
    # The run's checks, targets and header, once (None: each job takes the whole path).
    # A default REPLICATE, once resolved in `args`, is the same for every job of the run.
    plan = conn.server.cluster.replication.plan_adds(run.args)
    started = perf_counter_ns()
    owed, out_bytes, ran = add_jobs(
        conn.server, [(conn, request) for request in run], command, run.args, plan, out, out_bytes
    )
    command.calls += ran
    command.nanoseconds += perf_counter_ns() - started
    return owed, out_bytes


def add_jobs(
    server: Server,
    requests: list[tuple[Connection, list[bytes]]],
    command: Command,
    args: AddJobArgs,
    plan: AddPlan | None,
    out: list[bytes],
    out_bytes: int,
) -> tuple[int, int, int]:
    """The jobs of `requests`, ADDJOBs with the options in `args` each with the
    connection it came from, added with `plan` (see run_addjobs); returns (jobs waiting
    for their copies, the size of `out`, jobs the handler ran: the command's count).
    All in one call when they can be (`_add_together`), else one by one.

    `out` holds the replies ready for the connection of the first request. Where the
    connection changes (the ADDJOBs of a turn come from many clients: node/turn_adds.py)
    they are written to the one before; the caller writes what `out` holds at the end.
    A turn's ADDJOB has its connection's waiting mark cleared as it is about to run: if
    running them fails, node/turn_adds.py runs those not reached yet one by one."""
    if plan is not None:
        done = _add_together(server, requests, command, args, plan, out, out_bytes)
        if done is not None:
            return done
    core = server.core
    cluster = server.cluster
    owed = ran = 0
    last: Connection | None = None
    closed: Connection | None = None  # closed by one of its requests: skip the rest
    for conn, request in requests:
        conn.in_turn = False
        if conn is not last:
            if last is not None and out:
                last.write(b"".join(out))
                out.clear()
                out_bytes = 0
            last = conn
        if conn is closed:
            continue
        deferred = conn.deferred
        if (
            conn.waiter is not None
            or conn.pending
            or (deferred is not None and len(deferred.slots) >= MAX_OUTSTANDING)
        ):
            conn.hold(request)  # and every one after it: `pending` is no longer empty
            if conn.closed:
                closed = conn
            continue
        if (
            core.jobs_bytes + len(request[2]) > core.oom_guard
            and command.deny_oom
            and core.over_memory_limit(sum(len(arg) for arg in request), server.now)
        ):
            reply = error(OOM)  # refused before the handler: not counted, as in execute
        else:
            ran += 1
            args.queue = request[1]
            args.body = request[2]
            try:
                reply = cluster.add_job(conn, args, plan)
            except CommandError as exc:
                reply = error(exc.message)
            except Exception as exc:  # a bug must cost one reply, as in Server.execute
                reply = command.failed(request, exc)
        if reply is None:
            owed += 1
            if deferred is None and out:
                # This job's reply comes later: the replies before it go now.
                conn.write(b"".join(out))
                out.clear()
                out_bytes = 0
        elif deferred is not None:
            deferred.add_ready(conn, reply)  # behind the replies still owed
        else:
            out.append(reply)
            out_bytes += len(reply)
        if conn.closed:
            closed = conn
    return owed, out_bytes, ran


def _add_together(
    server: Server,
    entries: list[tuple[Connection, list[bytes]]],
    command: Command,
    args: AddJobArgs,
    plan: AddPlan,
    out: list[bytes],
    out_bytes: int,
) -> tuple[int, int, int] | None:
    """add_jobs for ADDJOBs into one queue, their jobs added in one call
    (ClusterDriver.add_run) when none of them can be held, refused or answered with an
    error: every client free to run it, memory well below the limit, the queue and the
    plan as the core and the replication's add_run want them. Else None, having run
    nothing: add_jobs runs them one by one. The replies are those add_jobs gives, in
    the same order and the same writes."""
    queue = entries[0][1][1]
    if not _free_to_run_together(server, entries, queue):
        return None
    synchronous = plan.synchronous
    slots = [ReplySlot(conn) for conn, _ in entries] if synchronous else []
    args.queue = queue
    failure = None
    try:
        jobs = server.cluster.add_run(args, plan, [request[2] for _, request in entries], slots)
    except Exception as exc:  # a bug must cost the run's replies, not the connection
        failure = command.failed(entries[0][1], exc)
        jobs, synchronous, slots = [], False, []
    if jobs is None:
        return None
    # By client: the entries one connection sent in a row (a pipelined run is one client;
    # a turn's ADDJOBs are one each).
    last: Connection | None = None
    start, count = 0, len(entries)
    while start < count:
        conn = entries[start][0]
        end = start + 1
        while end < count and entries[end][0] is conn:
            end += 1
        conn.in_turn = False  # a turn's ADDJOB (node/turn_adds.py) has run
        if last is not None and out:
            last.write(b"".join(out))
            out.clear()
            out_bytes = 0
        last = conn
        deferred = conn.deferred
        if synchronous:  # each owes its reply: the replies before the first go now
            conn.defer_all(slots[start:end])
            if deferred is None and out:
                conn.write(b"".join(out))
                out.clear()
                out_bytes = 0
        elif failure is None and deferred is None:  # all ready: one block, joined once
            block = b"+%s\r\n" % b"\r\n+".join([job.id for job in jobs[start:end]])
            out.append(block)
            out_bytes += len(block)
        else:
            for index in range(start, end):
                reply = failure or b"+%s\r\n" % jobs[index].id
                if deferred is not None:
                    deferred.add_ready(conn, reply)  # behind the replies still owed
                else:
                    out.append(reply)
                    out_bytes += len(reply)
        start = end
    return len(slots), out_bytes, len(entries)


def _free_to_run_together(
    server: Server, entries: list[tuple[Connection, list[bytes]]], queue: bytes
) -> bool:
    """Whether add_jobs would run every one of `entries` without holding it (a client
    blocked, or owed too many replies) or refusing it for memory, all into `queue`."""
    size = 0
    last: Connection | None = None
    for conn, request in entries:
        if conn is not last:  # a run's requests share one: checked once
            deferred = conn.deferred
            if (
                conn.closed
                or conn.waiter is not None
                or conn.pending
                or (deferred is not None and len(deferred.slots) + len(entries) >= MAX_OUTSTANDING)
            ):
                return False
            last = conn
        if request[1] != queue:
            return False
        size += len(request[2])
    # Below the guard after the last job too: no job needs execute's check of maxmemory.
    return (
        server.core.jobs_bytes + size + JOB_OVERHEAD_BYTES * len(entries) <= server.core.oom_guard
    )
