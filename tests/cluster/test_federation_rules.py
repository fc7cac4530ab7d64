"""Federation's rules on the sans-IO objects (conveyor/cluster/federation.py): what is
sent for which NEEDJOBS, and that what it remembers stays bounded."""

from __future__ import annotations

import itertools
import random

import pytest

from conveyor.cluster import federation as federation_module
from conveyor.cluster.actions import Send
from conveyor.cluster.messages import NeedJobs, YourJobs
from conveyor.cluster.state import ClusterState
from conveyor.core.args import GetJobArgs
from conveyor.core.imports import ImportStats
from conveyor.core.job import ACTIVE
from conveyor.core.node import NodeCore
from tests.cluster.test_membership import formed, name


def node_a() -> tuple[ClusterState, int]:
    """Node 1 of a formed 2-node membership, with a core; and the current time."""
    net = formed(2)
    member = net.members[0]
    member.take_actions()
    core = NodeCore(name(1).decode(), b"s" * 20, random.Random(1))
    return ClusterState(core, member, random.Random(1)), net.now


def needjobs(state: ClusterState, queue: bytes, count: int) -> NeedJobs:
    return NeedJobs(state.membership.header()._replace(sender=name(2)), queue, count)


def sent(state: ClusterState) -> list[Send]:
    return [a for a in state.membership.take_actions() if isinstance(a, Send)]


def test_an_asking_node_gets_at_most_half_a_short_queue() -> None:
    state, now = node_a()
    for n in range(6):
        state.core.add_default_job(b"q", b"job %d" % n, now)
    state.federation.receive_needjobs(needjobs(state, b"q", 5), now)
    [send] = sent(state)
    assert send.name == name(2) and isinstance(send.message, YourJobs)
    assert len(send.message.jobs) == 3  # 6 < 2 x 5: half of them
    assert state.core.qlen(b"q") == 3
    # Moved jobs stay here, active (they requeue after RETRY if never acknowledged).
    assert all(state.core.jobs[r.id].state == ACTIVE for r in send.message.jobs)


def test_no_jobs_given_while_paused_out_or_importing() -> None:
    state, now = node_a()
    state.core.add_default_job(b"q", b"x", now)
    state.core.pause(b"q", 2, now)  # out
    state.federation.receive_needjobs(needjobs(state, b"q", 5), now)
    assert sent(state) == [] and b"q" not in state.federation.wanted
    state.core.pause(b"q", 0, now)
    queue = state.core.queues[b"q"]
    queue.imports = ImportStats()
    queue.imports.imported(name(2), now)  # a consumer node itself
    state.federation.receive_needjobs(needjobs(state, b"q", 5), now)
    assert sent(state) == [] and b"q" not in state.federation.wanted


def test_who_asked_gets_the_next_job_at_once() -> None:
    state, now = node_a()
    state.federation.receive_needjobs(needjobs(state, b"q", 5), now)
    assert sent(state) == []  # nothing here yet
    job = state.core.add_default_job(b"q", b"x", now)
    [send] = sent(state)
    assert isinstance(send.message, YourJobs) and send.message.jobs[0].id == job.id


def test_jobs_queued_in_one_batch_go_in_one_message() -> None:
    """A pipeline of 250 ADDJOBs read at once: moved when the batch's actions are taken,
    in frames of 100 that batching.py merges into one YOURJOBS (not a message per job);
    none left behind."""
    state, now = node_a()
    state.federation.receive_needjobs(needjobs(state, b"q", 5), now)
    assert sent(state) == []
    added = [state.core.add_default_job(b"q", b"job %d" % n, now).id for n in range(250)]
    assert state.membership.actions == [] and state.membership.pending_sends
    sends = sent(state)
    [send] = sends
    assert send.name == name(2) and isinstance(send.message, YourJobs)
    assert [r.id for r in send.message.jobs] == added and state.core.qlen(b"q") == 0
    assert sent(state) == [] and not state.membership.pending_sends  # one-shot


def test_a_job_consumed_here_before_the_push_stays_here() -> None:
    state, now = node_a()
    state.federation.receive_needjobs(needjobs(state, b"q", 5), now)
    state.core.add_default_job(b"q", b"x", now)
    state.core.get_jobs([b"q"], 1, now)  # a local consumer in the same batch
    assert sent(state) == []


def test_wants_are_bounded_and_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(federation_module, "MAX_WANTED", 3)
    state, now = node_a()
    for n in range(10):
        state.federation.receive_needjobs(needjobs(state, b"q%d" % n, 5), now)
    assert list(state.federation.wanted) == [b"q7", b"q8", b"q9"]  # the latest ones
    state.federation.tick(now + federation_module.WANTED_TTL_MS + 1)
    assert not state.federation.wanted


def test_a_leaving_node_asks_for_nothing() -> None:
    state, now = node_a()
    state.core.set_leaving(True)
    state.federation.blocked([b"q"], now)
    assert sent(state) == []
    state.core.set_leaving(False)
    state.core.queue_for(b"q", now)
    state.federation.blocked([b"q"], now)
    [send] = sent(state)  # the cluster-wide ask for one job, to find sources
    assert send.message == NeedJobs(state.membership.header(), b"q", 1)


def test_cluster_wide_asks_back_off_to_at_most_30_s() -> None:
    """A consumer blocked on an empty queue: the cluster-wide NEEDJOBS go at once, then 4, 8,
    16 s apart, then every 30 s however long it waits (Disque's cap), so jobs queued elsewhere
    after a quiet spell are found within half a minute."""
    state, now = node_a()
    state.core.get_job(GetJobArgs([b"q"], timeout_ms=0), "consumer", now)
    asks = [now] if sent(state) else []
    for step in range(1, 10 * 60 * 10):  # ten virtual minutes, 100 ms apart
        state.federation.tick(now + step * 100)
        if any(isinstance(send.message, NeedJobs) for send in sent(state)):
            asks.append(now + step * 100)
    gaps = [later - earlier for earlier, later in itertools.pairwise(asks)]
    assert asks[0] == now  # at once, when the consumer blocks
    assert gaps[:3] == [4100, 8100, 16100]  # (+100: the cron's 100 ms steps)
    assert len(gaps) > 10 and all(gap == 30100 for gap in gaps[3:]), gaps
