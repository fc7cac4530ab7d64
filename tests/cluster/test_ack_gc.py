"""The ack GC's cron tick on a backlog: a holder that never answers (down for hours) keeps
thousands of acked jobs collecting. A tick must cost what is due, not the whole backlog
ten times a second, and still run every round when due and drop the jobs that went."""

from __future__ import annotations

import random
from typing import Any

from conveyor.cluster import acks as acks_module
from conveyor.cluster.actions import Send
from conveyor.cluster.messages import JobIdBatch, SetAck
from conveyor.cluster.state import ClusterState
from conveyor.core.args import AddJobArgs
from conveyor.core.node import NodeCore

from .test_membership import formed, name

BACKLOG = 5000


class CountingJobs(dict[bytes, Any]):
    """The core's job table, counting the lookups made in it."""

    lookups = 0

    def get(self, key: bytes, default: Any = None) -> Any:
        CountingJobs.lookups += 1
        return super().get(key, default)


def backlog() -> tuple[Any, NodeCore, ClusterState, list[bytes]]:
    net = formed(3)
    core = NodeCore(name(1).decode(), b"s" * 20, random.Random(1))
    state = ClusterState(core, net.members[0], random.Random(1))
    ids = []
    for _ in range(BACKLOG):
        job = core.add_job(AddJobArgs(b"q", b"x", 1, 0, 30, 3600, None, False), net.now)
        job.nodes_delivered = (name(1), name(2), name(3))
        ids.append(job.id)
    state.acks.ack(ids, net.now)  # first rounds: SETACK to nodes 2 and 3, never answered
    net.members[0].take_actions()
    core.jobs = CountingJobs(core.jobs)
    return net, core, state, ids


def setacks(state: ClusterState) -> list[bytes]:
    sent = [a.message for a in state.membership.take_actions() if isinstance(a, Send)]
    singles = [m for s in sent for m in (s.messages() if isinstance(s, JobIdBatch) else [s])]
    return [m.id for m in singles if isinstance(m, SetAck)]


def test_a_tick_looks_at_a_bounded_part_of_a_backlog_that_is_not_due() -> None:
    net, _, state, _ = backlog()
    CountingJobs.lookups = 0
    state.acks.tick(net.now + 100)
    assert CountingJobs.lookups <= acks_module.SWEEP_PER_TICK < BACKLOG
    assert setacks(state) == [] and len(state.acks.collecting) == BACKLOG


def test_rounds_run_when_due_and_jobs_that_went_are_dropped() -> None:
    net, core, state, ids = backlog()
    gone = ids[:: BACKLOG // 10]
    core.del_jobs(gone, net.now)  # a DELJOB, say: no longer this node's to collect
    for step in range(1, BACKLOG // acks_module.SWEEP_PER_TICK + 1):
        state.acks.tick(net.now + 100 * step)
    assert len(state.acks.collecting) == BACKLOG - len(gone)
    assert setacks(state) == []
    # The second round is due 1 s +- 250 ms after the first: every job left gets one
    # SETACK to each of the two silent holders, and none twice.
    state.acks.tick(net.now + acks_module.GC_MIN_MS + acks_module.GC_JITTER_MS)
    left = [job_id for job_id in ids if job_id not in set(gone)]
    assert sorted(setacks(state)) == sorted(left * 2)
