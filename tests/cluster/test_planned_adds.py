"""A run of ADDJOBs planned once (Replication.plan_adds, add_planned) does exactly what its
jobs do one by one through add_job (sans-IO, in process).

Two nodes made alike (same name, seed and view) make the same job IDs and draw the same
targets, so each job's outcome, the copies sent and the jobs awaiting confirmation must
be equal, whatever the options, the queues (one paused, one full) and the memory: a run
that crosses the memory warning's threshold goes on replicating externally from the job
that crosses it, as one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.cluster.state import ClusterState
from conveyor.core.errors import CommandError
from conveyor.core.job import Job
from conveyor.core.queue import PAUSE_IN
from conveyor.core.state import JOB_OVERHEAD_BYTES, QUEUE_OVERHEAD_BYTES
from conveyor.node.cmd_jobs import parse_addjob
from tests.cluster.test_hot_path_caches import NOW, node

_OPTIONS = st.sampled_from(
    [
        (),
        (b"ASYNC",),
        (b"REPLICATE", b"1"),
        (b"REPLICATE", b"2"),
        (b"REPLICATE", b"3", b"ASYNC"),
        (b"REPLICATE", b"4"),  # more than a 3-node view can hold: NOREPL
        (b"REPLICATE", b"3", b"RETRY", b"0"),  # refused: at-most-once with copies
        (b"DELAY", b"9", b"TTL", b"5"),  # refused: DELAY past TTL
        (b"MAXLEN", b"2"),
        (b"RETRY", b"0", b"REPLICATE", b"1"),
        (b"DELAY", b"1", b"ASYNC"),
    ]
)


def _outcome(add: Callable[..., tuple[Job, bool]], *args: Any) -> tuple[Any, ...]:
    try:
        job, answered = add(*args)
    except CommandError as exc:
        return ("error", exc.message)
    return (job.id, job.state, job.nodes_delivered, job.nodes_confirmed, answered)


def _effects(state: ClusterState) -> tuple[Any, ...]:
    actions = state.membership.take_actions()  # seals the copies' batches
    return (actions, sorted(state.replication.pending), sorted(state.core.jobs))


def _alike(others: int, maxmemory: int) -> ClusterState:
    state = node(0, others)
    state.core.pause(b"paused", PAUSE_IN, NOW)
    if maxmemory:
        state.core.set_memory_limit(maxmemory, "noeviction", 0, NOW)
    return state


def _maxmemory(others: int, jobs_before_warning: int | None, body: bytes) -> int:
    """A maxmemory whose warning threshold (75 %) falls after this many jobs of a run (0:
    none). Roughly: each job adds JOB_OVERHEAD_BYTES and its body, each new queue
    QUEUE_OVERHEAD_BYTES (q and r), over what the paused queue holds already."""
    if jobs_before_warning is None:
        return 0
    used = _alike(others, 0).core.memory_estimate() + 2 * QUEUE_OVERHEAD_BYTES
    step = JOB_OVERHEAD_BYTES + len(body)
    return (used + jobs_before_warning * step + step // 2) * 100 // 75


# A run's options, its jobs' queues, the other nodes, where the memory warning falls.
_RUNS = {
    "options": _OPTIONS,
    "queues": st.lists(st.sampled_from([b"q", b"r", b"paused"]), min_size=1, max_size=12),
    "others": st.integers(1, 3),
    "jobs_before_warning": st.sampled_from([None, 0, 1, 3, 6]),
}


@settings(max_examples=150, deadline=None)
@given(**_RUNS)
def test_a_planned_run_does_what_its_jobs_do_one_by_one(
    options: tuple[bytes, ...],
    queues: list[bytes],
    others: int,
    jobs_before_warning: int | None,
) -> None:
    body = b"x" * 100
    maxmemory = _maxmemory(others, jobs_before_warning, body)
    one_by_one, planned = _alike(others, maxmemory), _alike(others, maxmemory)
    token = object()

    expected = []
    for queue in queues:
        args = parse_addjob([b"ADDJOB", queue, body, b"5000", *options])
        expected.append(_outcome(one_by_one.replication.add_job, args, token, NOW))

    run_args = parse_addjob([b"ADDJOB", b"q", body, b"5000", *options])
    repl = run_args.repl
    plan = planned.replication.plan_adds(run_args)
    got = []
    replication = planned.replication
    for queue in queues:
        run_args.queue, run_args.body, run_args.repl = queue, body, repl  # as run_addjobs
        if plan is None:
            got.append(_outcome(replication.add_job, run_args, token, NOW))
        else:
            got.append(_outcome(replication.add_planned, plan, run_args, token, NOW))

    assert got == expected
    assert _effects(planned) == _effects(one_by_one)


def test_a_plan_is_made_only_where_its_jobs_would_all_pass_the_same_checks() -> None:
    state = node(0, 2)
    replication = state.replication
    refused = parse_addjob([b"ADDJOB", b"q", b"b", b"5000", b"REPLICATE", b"3", b"RETRY", b"0"])
    assert replication.plan_adds(refused) is None
    assert refused.repl == 3  # as parsed: the failed check left the options as they were
    default = parse_addjob([b"ADDJOB", b"q", b"b", b"5000"])
    plan = replication.plan_adds(default)
    assert plan is not None and plan.repl == 3 and plan.synchronous
    assert plan.targets == replication._others  # REPLICATE 3 of 3: every other node
    two = replication.plan_adds(parse_addjob([b"ADDJOB", b"q", b"b", b"5000", b"REPLICATE", b"2"]))
    assert two is not None and two.targets is None  # one of two others: drawn per job
    state.core.set_leaving(True)  # every job replicated externally: each takes add_job
    assert replication.plan_adds(parse_addjob([b"ADDJOB", b"q", b"b", b"5000"])) is None


def test_a_run_crossing_the_memory_warning_replicates_externally_from_there() -> None:
    used = _alike(3, 0).core.memory_estimate() + QUEUE_OVERHEAD_BYTES  # and queue q
    step = JOB_OVERHEAD_BYTES + 100
    state = _alike(3, (used + 3 * step + step // 2) * 100 // 75)  # 3 others: room outside
    me = state.membership.name
    args = parse_addjob([b"ADDJOB", b"q", b"x" * 100, b"5000"])
    plan = state.replication.plan_adds(args)
    assert plan is not None
    delivered = []
    for _ in range(10):
        args.queue, args.body, args.repl = b"q", b"x" * 100, None
        job, answered = state.replication.add_planned(plan, args, object(), NOW)
        delivered.append(me in (job.nodes_delivered or (me,)))
        assert not answered
    # The first jobs keep a copy here; past 75 % of maxmemory, none does.
    assert delivered[:3] == [True] * 3 and delivered[-3:] == [False] * 3
    assert delivered == sorted(delivered, reverse=True)


@settings(max_examples=150, deadline=None)
@given(**_RUNS, queue_first=st.booleans())
def test_a_run_added_together_does_what_its_jobs_do_one_by_one(
    options: tuple[bytes, ...],
    queues: list[bytes],
    others: int,
    jobs_before_warning: int | None,
    queue_first: bool,
) -> None:
    """Replication.add_run takes each stretch of one queue at once, or declines it (None,
    having added nothing) and its jobs take add_planned, as node/addjob_runs.py does."""
    body = b"x" * 100
    maxmemory = _maxmemory(others, jobs_before_warning, body)
    one_by_one, together = _alike(others, maxmemory), _alike(others, maxmemory)
    if queue_first:  # queues that exist already: a run is added together only into one
        for state in (one_by_one, together):
            for queue in (b"q", b"r"):
                first = parse_addjob([b"ADDJOB", queue, b"first", b"5000", b"ASYNC"])
                state.replication.add_job(first, object(), NOW)
    tokens = [object() for _ in queues]

    expected = []
    for queue, token in zip(queues, tokens, strict=True):
        args = parse_addjob([b"ADDJOB", queue, body, b"5000", *options])
        expected.append(_outcome(one_by_one.replication.add_job, args, token, NOW))

    run_args = parse_addjob([b"ADDJOB", b"q", body, b"5000", *options])
    repl = run_args.repl
    replication = together.replication
    plan = replication.plan_adds(run_args)
    got = []
    start = 0
    while start < len(queues):
        end = start + 1
        while end < len(queues) and queues[end] == queues[start]:
            end += 1
        run_args.queue, run_args.body, run_args.repl = queues[start], body, repl
        jobs = None
        if plan is not None:
            bodies = [body] * (end - start)
            jobs = replication.add_run(plan, run_args, bodies, tokens[start:end], NOW)
        if jobs is not None:
            answered = not plan.synchronous  # type: ignore[union-attr]
            got.extend(
                (job.id, job.state, job.nodes_delivered, job.nodes_confirmed, answered)
                for job in jobs
            )
        for token in tokens[start:end] if jobs is None else ():
            run_args.queue, run_args.body, run_args.repl = queues[start], body, repl
            if plan is None:
                got.append(_outcome(replication.add_job, run_args, token, NOW))
            else:
                got.append(_outcome(replication.add_planned, plan, run_args, token, NOW))
        start = end

    assert got == expected
    assert _effects(together) == _effects(one_by_one)
    pending = {job_id: added.token for job_id, added in together.replication.pending.items()}
    assert pending == {i: added.token for i, added in one_by_one.replication.pending.items()}
