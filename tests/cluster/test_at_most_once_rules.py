"""At-most-once jobs (RETRY 0) in replication, on the sans-IO objects: one copy at most,
whatever is lost or sent twice. Found by the simulator once nodes could leave (seeds
1519, 1757, 3438 and others): a leaving node replicates such a job externally."""

from __future__ import annotations

import random

from conveyor.cluster.actions import Send
from conveyor.cluster.messages import GotJob, ReplJob, YourJobs
from conveyor.cluster.replication import EXTRA_TARGET_MS
from conveyor.cluster.state import ClusterState
from conveyor.core.args import AddJobArgs
from conveyor.core.node import NodeCore
from conveyor.core.records import job_record
from tests.cluster.test_membership import formed, name


def states(count: int) -> tuple[list[ClusterState], int]:
    net = formed(count)
    result = []
    for index, member in enumerate(net.members):
        member.take_actions()
        core = NodeCore(name(index + 1).decode(), b"s" * 20, random.Random(index))
        state = ClusterState(core, member, random.Random(index))
        state.update_view()  # cluster size and reachable nodes, as the drivers do
        result.append(state)
    return result, net.now


def sends(state: ClusterState, kind: type) -> list[Send]:
    return [
        a
        for a in state.membership.take_actions()
        if isinstance(a, Send) and isinstance(a.message, kind)
    ]


def test_an_at_most_once_job_keeps_its_one_target_while_unconfirmed() -> None:
    [leaving, *_], now = states(3)
    leaving.core.set_leaving(True)
    args = AddJobArgs(b"q", b"x", 1, 0, 0, None, None, False, timeout_ms=5000)
    job, answered = leaving.replication.add_job(args, object(), now)
    assert not answered
    [first] = sends(leaving, ReplJob)
    for step in range(1, 6):  # GOTJOB lost: REPLJOB again, to the same node only
        leaving.replication.tick(now + step * EXTRA_TARGET_MS)
        assert [s.name for s in sends(leaving, ReplJob)] == [first.name]
    assert job.nodes_delivered == (first.name,)


def test_an_at_least_once_job_gains_targets_while_unconfirmed() -> None:
    [leaving, *_], now = states(3)
    leaving.core.set_leaving(True)
    args = AddJobArgs(b"q", b"x", 1, 0, 5, None, None, False, timeout_ms=5000)
    job, _ = leaving.replication.add_job(args, object(), now)
    sends(leaving, ReplJob)
    leaving.replication.tick(now + EXTRA_TARGET_MS)
    assert len(set(s.name for s in sends(leaving, ReplJob))) == 2  # Disque's rule
    assert len(job.nodes_delivered or ()) == 2


def test_an_at_most_once_copy_sent_again_is_not_taken_again() -> None:
    [origin, holder, _], now = states(3)
    job = origin.core.add_job(AddJobArgs(b"q", b"x", 1, 0, 0, None, None, False), now)
    record = job_record(job, origin.membership.name, now, for_bus=True)
    repljob = ReplJob(origin.membership.header(), (record,))
    holder.replication.receive_repljob(repljob, now)
    assert record.id in holder.core.jobs
    assert [s.name for s in sends(holder, GotJob)] == [name(1)]
    holder.core.del_jobs([record.id], now)  # moved on (YOURJOBS), or acked and let go
    holder.replication.receive_repljob(repljob, now + 60)  # the origin's resend
    assert record.id not in holder.core.jobs
    assert [s.name for s in sends(holder, GotJob)] == [name(1)]  # answered all the same


def test_an_at_most_once_job_moved_on_may_come_back_from_another_node() -> None:
    """YOURJOBS: the same message again is refused, but a node that got the job from
    this one and gives it back moves it for real (refusing it would lose it)."""
    [a, b, c], now = states(3)
    job = c.core.add_job(AddJobArgs(b"q", b"x", 1, 0, 0, None, None, False), now)
    record = job_record(job, c.membership.name, now, for_bus=True)
    from_c = YourJobs(c.membership.header(), (record,))
    a.federation.receive_yourjobs(from_c, now)
    assert a.core.qlen(b"q") == 1
    a.core.del_jobs([record.id], now)  # moved on to b (at-most-once: no copy kept)
    a.federation.receive_yourjobs(from_c, now + 10)  # a copy of c's message
    assert a.core.qlen(b"q") == 0
    a.federation.receive_yourjobs(YourJobs(b.membership.header(), (record,)), now + 20)
    assert a.core.qlen(b"q") == 1  # b gave it back
