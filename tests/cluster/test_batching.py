"""Several jobs per frame between Conveyor nodes (conveyor/cluster/batching.py), and only
between them: runs of REPLJOB/GOTJOB sends merged per node, frames on real processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor.cluster.actions import Action, Connect, Send
from conveyor.cluster.batching import coalesce
from conveyor.cluster.codec import decode, encode
from conveyor.cluster.messages import (
    CONVEYOR_MARK,
    MFLAG_NOREPLY,
    DelJob,
    GotJob,
    Header,
    JobIdBatch,
    MessageType,
    ReplJob,
    SetAck,
)
from conveyor.core.codec import JobRecord
from conveyor.node.send_policy import MID_READ_ACTIONS
from tests.cluster.test_cluster_nodes import form, wait_for
from tests.cluster.test_replication import holders
from tests.servers import NodeProcess

ME, CONVEYOR, DISQUE = b"m" * 40, b"c" * 40, b"d" * 40
HEADER = Header(ME, 7711, 4, notused0=CONVEYOR_MARK)


def job(n: int) -> JobRecord:
    job_id = b"D-00000000-%024d-0005" % n
    return JobRecord(job_id, 0, 0, 0, 3, 60, 1, 0, 30, 0, 0, b"q", b"body", (ME, CONVEYOR))


def takes_batches(name: bytes) -> bool:
    return name == CONVEYOR


def repl(n: int, mflags: int = 0) -> ReplJob:
    return ReplJob(HEADER._replace(mflags=mflags), (job(n),))


def test_a_run_of_repljobs_goes_as_one_frame_to_a_conveyor_node_only() -> None:
    copies = [repl(1), repl(2), repl(3)]
    actions: list[Action] = [Send(name, copy) for copy in copies for name in (CONVEYOR, DISQUE)]
    out = coalesce(actions, takes_batches)
    # Disque gets its three REPLJOBs one by one, as they were; Conveyor one of three.
    assert [a for a in out if a.name == DISQUE] == [Send(DISQUE, c) for c in copies]  # type: ignore[union-attr]
    [batch] = [a for a in out if a.name == CONVEYOR]  # type: ignore[union-attr]
    assert batch.message == ReplJob(HEADER, (job(1), job(2), job(3)))  # type: ignore[union-attr]
    assert decode(encode(batch.message)) == batch.message  # type: ignore[union-attr]


def test_targets_given_the_same_jobs_share_one_message_serialized_once() -> None:
    other = b"o" * 40
    copies = [repl(1), repl(2)]
    # REPLICATE 3 of 3: each job goes to both other nodes; the transport encodes a message
    # sent to consecutive targets once, so the two batches must be the same object.
    actions: list[Action] = [Send(name, copy) for copy in copies for name in (CONVEYOR, other)]
    out = coalesce(actions, lambda name: name in (CONVEYOR, other))
    assert [a.name for a in out] == [CONVEYOR, other]  # type: ignore[union-attr]
    assert out[0].message is out[1].message  # type: ignore[union-attr]
    assert out[0].message.jobs == (job(1), job(2))  # type: ignore[union-attr]
    # Different jobs per target (REPLICATE 2 drawing different nodes): messages of their own.
    actions = [Send(CONVEYOR, copies[0]), Send(other, copies[1])]
    out = coalesce(actions, lambda name: name in (CONVEYOR, other))
    assert out[0].message is not out[1].message  # type: ignore[union-attr]
    assert [a.message.jobs for a in out] == [(job(1),), (job(2),)]  # type: ignore[union-attr]


def test_noreply_copies_are_not_mixed_with_those_to_answer() -> None:
    out = coalesce(
        [Send(CONVEYOR, repl(1)), Send(CONVEYOR, repl(2, MFLAG_NOREPLY)), Send(CONVEYOR, repl(3))],
        takes_batches,
    )
    assert [(a.message.header.mflags, len(a.message.jobs)) for a in out] == [(0, 2), (1, 1)]  # type: ignore[union-attr]


def test_gotjobs_merge_and_other_messages_keep_their_place() -> None:
    ids = [job(n).id for n in range(4)]
    actions: list[Action] = [
        Send(CONVEYOR, GotJob(HEADER, ids[0])),
        Send(CONVEYOR, GotJob(HEADER, ids[1])),
        Send(CONVEYOR, DelJob(HEADER, ids[0])),  # ends the run: nothing crosses it
        Send(CONVEYOR, GotJob(HEADER, ids[2])),
        Connect(DISQUE, "127.0.0.1", 7712),
        Send(CONVEYOR, GotJob(HEADER, ids[3])),
        Send(DISQUE, GotJob(HEADER, ids[3])),
    ]
    out = coalesce(actions, takes_batches)
    assert out == [
        Send(CONVEYOR, JobIdBatch(HEADER, MessageType.GOTJOB, ((ids[0], 0), (ids[1], 0)))),
        Send(CONVEYOR, DelJob(HEADER, ids[0])),
        Send(CONVEYOR, GotJob(HEADER, ids[2])),
        Connect(DISQUE, "127.0.0.1", 7712),
        Send(DISQUE, GotJob(HEADER, ids[3])),
        Send(CONVEYOR, GotJob(HEADER, ids[3])),  # a run of one per node stays a GOTJOB
    ]
    assert decode(encode(out[0].message)) == out[0].message  # type: ignore[union-attr]


def cluster_info(node: NodeProcess, field: str) -> int:
    info = node.client().execute_command("CLUSTER", "INFO").decode()
    return int(info.split(f"{field}:")[1].split()[0])


def messages_sent(node: NodeProcess) -> int:
    return cluster_info(node, "cluster_stats_messages_sent")


def reachable(node: NodeProcess) -> int:
    return cluster_info(node, "cluster_reachable_nodes")


@pytest.mark.parametrize("async_", [False, True])
def test_pipelined_adds_travel_in_few_frames(
    tmp_path: Path, cluster: list[NodeProcess], async_: bool
) -> None:
    form(tmp_path, cluster, 3)
    # ASYNC copies are best effort: wait until the links are up, or some go nowhere.
    wait_for(lambda: reachable(cluster[0]) == 2, "links from the first node up")
    before = messages_sent(cluster[0])
    pipe = cluster[0].client().pipeline(transaction=False)
    for n in range(200):
        pipe.execute_command("ADDJOB", "q", f"job {n}", "5000", "REPLICATE", "3",
                             *(["ASYNC"] if async_ else []))  # fmt: skip
    job_ids = pipe.execute()
    sent = messages_sent(cluster[0]) - before
    print(f"200 ADDJOBs, REPLICATE 3, in one pipeline: {sent} bus messages sent")
    assert sent < 200  # one REPLJOB per job and node would be 400 (PINGs are a few)
    for job_id in job_ids[::20]:
        assert holders(cluster, job_id) == 3


def test_a_long_pipeline_of_synchronous_adds_is_copied_while_it_is_read(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    """The copies of the first jobs leave before the rest of the read is parsed (every
    MID_READ_ACTIONS copies: 128 jobs to two nodes), so the other nodes work alongside
    this one: in one read, 300 ADDJOBs once went as one REPLJOB per node (2 messages)."""
    form(tmp_path, cluster, 3)
    wait_for(lambda: reachable(cluster[0]) == 2, "links from the first node up")
    before = messages_sent(cluster[0])
    pipe = cluster[0].client().pipeline(transaction=False)
    for n in range(300):
        pipe.execute_command("ADDJOB", "q", f"job {n}", "5000", "REPLICATE", "3")
    job_ids = pipe.execute()
    sent = messages_sent(cluster[0]) - before
    every = MID_READ_ACTIONS // 2  # jobs: their copies to two nodes
    assert 2 * (300 // every + 1) <= sent < 300, sent  # to each node: every `every`, the rest
    for job_id in job_ids[::20]:
        assert holders(cluster, job_id) == 3


def test_a_batch_keeps_each_entrys_aux_and_comes_back_one_by_one() -> None:
    ids = [job(n).id for n in range(3)]
    actions: list[Action] = [
        Send(CONVEYOR, SetAck(HEADER, job_id, n)) for n, job_id in enumerate(ids)
    ]
    [merged] = coalesce(actions, takes_batches)
    batch = merged.message  # type: ignore[union-attr]
    assert batch == JobIdBatch(HEADER, MessageType.SETACK, tuple((i, n) for n, i in enumerate(ids)))
    decoded = decode(encode(batch))
    assert decoded == batch
    assert decoded.messages() == [a.message for a in actions]  # type: ignore[union-attr]
