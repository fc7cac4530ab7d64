"""The caches on the replication hot path (sans-IO, in process): each must give what the
uncached computation gives, follow changes of the cluster view, and stay bounded.

- Replication.known_names: the last answer, until membership's epoch moves.
- Replication._pick: the reachable others, until membership's epoch moves.
- Replication._header: our header with NOREPLY, until our header changes.
- decode_job: the last node list decoded, shared by the next record naming the same nodes.
- parse_int: the last integers parsed, at most _RECENT_INTS_MAX of them.
- parse_addjob: the last valid option tails parsed, at most _RECENT_TAILS_MAX of them.
- Replication's holders: one tuple for the jobs added in one view.
- encode_job: the last node tuple it found well formed, and its bytes, for a run.
- NodeCore.replicates_externally: the memory warning's threshold, one sum below it.
- DeferredReplies.fill: the head slot's reply alone when nothing behind it is ready.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.cluster.actions import Send
from conveyor.cluster.codec import decode, encode
from conveyor.cluster.membership import Membership
from conveyor.cluster.messages import MFLAG_NOREPLY, NODE_PFAIL, Header, JobIdBatch, MessageType
from conveyor.cluster.messages import ReplJob as ReplJobMessage
from conveyor.cluster.nodes import ClusterNode
from conveyor.cluster.state import ClusterState
from conveyor.core.args import AddJobArgs
from conveyor.core.codec import CodecError, JobRecord, decode_jobs, encode_job
from conveyor.core.errors import CommandError
from conveyor.core.job import WAIT_REPL
from conveyor.core.node import NodeCore
from conveyor.core.queue import PAUSE_IN
from conveyor.node import cmd_jobs, parsing
from conveyor.node.cmd_jobs import parse_addjob
from conveyor.node.deferred import DeferredReplies, ReplySlot

NAMES = [b"%040x" % (0xC0FFEE + index) for index in range(4)]
NOW = 1_000_000


def node(index: int, others: int = 2) -> ClusterState:
    """Node `index` knowing nodes 0..others (all linked, all Conveyor nodes)."""
    rand = random.Random(index)
    core = NodeCore(NAMES[index][:8].decode(), rand.randbytes(20), rand)
    membership = Membership(NAMES[index], 7711 + index, 5000, rand, 0)
    state = ClusterState(core, membership, rand)
    state.load_nodes(
        [
            ClusterNode(name, "127.0.0.1", 7711 + peer, 0, link_up=True, batches=True)
            for peer, name in enumerate(NAMES[: others + 1])
            if peer != index
        ]
    )
    membership.take_actions()
    state.update_view()
    return state


def add(state: ClusterState, *options: bytes) -> bytes:
    args = parse_addjob([b"ADDJOB", b"q", b"body", b"5000", *options])
    job, _ = state.replication.add_job(args, object(), NOW)
    return job.id


def record(n: int, nodes: tuple[bytes, ...]) -> JobRecord:
    job_id = b"D-00000000-%024d-0005" % n
    return JobRecord(job_id, 1, 0, 0, 3, 60, 1, 0, 30, 0, 0, b"q", b"body", nodes)


def test_known_names_follow_a_forgotten_node() -> None:
    state = node(1)
    replication = state.replication
    asked = (NAMES[0], NAMES[1], NAMES[2])
    first = replication.known_names(asked)
    assert first == asked
    # The same names again (an equal tuple, not the same object): the same tuple back.
    assert replication.known_names(tuple(bytes(name) for name in asked)) is first
    state.membership.forget(NAMES[2], NOW)
    assert replication.known_names(asked) == (NAMES[0], NAMES[1])
    # Other names are not answered from the cache.
    assert replication.known_names((NAMES[0], NAMES[3])) == (NAMES[0],)


def test_copies_of_one_run_share_their_node_list() -> None:
    origin, replica = node(0), node(1)
    for _ in range(3):
        add(origin, b"REPLICATE", b"3")
    sends = [a for a in origin.membership.take_actions() if type(a) is Send]
    frame = next(encode(a.message) for a in sends if a.name == NAMES[1])
    replica.route_job_message(decode(frame), NOW)
    copies = list(replica.core.jobs.values())
    assert len(copies) == 3
    assert all(copy.nodes_delivered == (NAMES[0], NAMES[1], NAMES[2]) for copy in copies)
    assert len({id(copy.nodes_delivered) for copy in copies}) == 1


def test_jobs_of_one_view_share_their_holders_until_it_changes() -> None:
    state = node(0, others=3)
    jobs = state.core.jobs
    first, second = (jobs[add(state, b"REPLICATE", b"4")] for _ in range(2))
    assert first.nodes_delivered == (NAMES[0], NAMES[1], NAMES[2], NAMES[3])
    assert first.nodes_delivered is second.nodes_delivered
    # A node fails: the next job's holders leave it out (the view's epoch moved).
    state.membership.nodes[NAMES[3]].flags |= NODE_PFAIL
    state.membership._changed(config=False)
    third = jobs[add(state, b"REPLICATE", b"3")]
    assert third.nodes_delivered == (NAMES[0], NAMES[1], NAMES[2])
    assert first.nodes_delivered == (NAMES[0], NAMES[1], NAMES[2], NAMES[3])  # untouched
    # Fewer targets than reachable nodes: drawn at random, each job its own tuple.
    drawn = [jobs[add(state, b"REPLICATE", b"2")].nodes_delivered for _ in range(20)]
    assert all(len(holders) == 2 and holders[0] == NAMES[0] for holders in drawn)
    assert len({holders[1] for holders in drawn}) == 2


def test_encoded_node_lists_are_checked_even_when_one_passed_before() -> None:
    good = (NAMES[0], NAMES[1])
    encode_job(record(1, good))
    with pytest.raises(CodecError, match="node name 1 is 3 bytes"):
        encode_job(record(2, (NAMES[0], b"bad")))
    # A list is never trusted again: changed after a first encoding, it is refused.
    names = [NAMES[0], NAMES[1]]
    encode_job(record(3, names))  # type: ignore[arg-type]
    names[1] = b"short"
    with pytest.raises(CodecError, match="node name 1 is 5 bytes"):
        encode_job(record(4, names))  # type: ignore[arg-type]
    assert encode_job(record(5, good)) == encode_job(record(5, tuple(good)))


def test_encoded_node_lists_are_the_jobs_own_after_a_run() -> None:
    """The bytes of the last node tuple serve only that tuple: any other node list, equal
    or not, a list changed in place or no nodes at all, is encoded from its names."""
    run, other = (NAMES[0], NAMES[1]), (NAMES[2], NAMES[3], NAMES[0])
    for nodes in [run, run, other, (), run, (NAMES[1],), tuple(run)]:
        [decoded] = decode_jobs(encode_job(record(7, nodes)), 1)
        assert decoded.nodes == nodes
    names = [NAMES[0], NAMES[1]]
    encode_job(record(8, names))  # type: ignore[arg-type]
    names[1] = NAMES[2]
    [decoded] = decode_jobs(encode_job(record(8, names)), 1)  # type: ignore[arg-type]
    assert decoded.nodes == (NAMES[0], NAMES[2])


@settings(max_examples=300, deadline=None)
@given(
    maxmemory=st.integers(0, 10_000_000),
    baseline=st.integers(0, 5_000_000),
    client_bytes=st.integers(0, 2_000_000),
    jobs_bytes=st.integers(0, 10_000_000),
    queue_count=st.integers(0, 50),
    cluster_size=st.integers(0, 4),
    leaving=st.booleans(),
)
def test_replicating_externally_follows_the_memory_warning_exactly(
    maxmemory: int,
    baseline: int,
    client_bytes: int,
    jobs_bytes: int,
    queue_count: int,
    cluster_size: int,
    leaving: bool,
) -> None:
    """The guard decides below the warning's threshold without measuring; the answer is
    always Disque's rule: leaving, or other nodes around and a memory warning."""
    core = NodeCore("c0ffee00", b"s" * 20, random.Random(1))
    core.set_memory_limit(maxmemory, "acks", baseline, NOW)
    core.set_client_memory(client_bytes)
    core.set_cluster_view(cluster_size, max(cluster_size - 1, 0))
    core.leaving = leaving
    for n in range(queue_count):
        core.queue_for(b"q%d" % n, NOW)
    core.jobs_bytes = jobs_bytes
    expected = leaving or (cluster_size > 1 and core.memory_warning() > 0)
    assert core.replicates_externally() == expected


def test_deferred_replies_leave_in_request_order_however_they_are_filled() -> None:
    conn = object()
    deferred = DeferredReplies()
    slots = [ReplySlot(conn, b"job%d" % n) for n in range(5)]  # type: ignore[arg-type]
    for slot in slots:
        deferred.add_waiting(slot)
    assert deferred.fill(slots[0], b"+0\r\n") == b"+0\r\n"  # the head alone
    assert deferred.fill(slots[2], b"+2\r\n") == b""  # waits for the one before it
    deferred.add_ready(conn, b"+ready\r\n")  # type: ignore[arg-type]
    assert deferred.fill(slots[1], b"+1\r\n") == b"+1\r\n+2\r\n"
    assert deferred.fill(slots[4], b"+4\r\n") == b""
    assert deferred.fill(slots[3], b"+3\r\n") == b"+3\r\n+4\r\n+ready\r\n"
    assert not deferred.slots
    assert deferred.fill(slots[3], b"+again\r\n") == b""  # filled twice: nothing more


def test_decoded_records_share_equal_node_lists_only() -> None:
    ab, cd = (NAMES[0], NAMES[1]), (NAMES[2], NAMES[3])
    data = b"".join(encode_job(record(n, nodes)) for n, nodes in enumerate((ab, ab, cd, ab)))
    records = decode_jobs(data, 4)
    assert [r.nodes for r in records] == [ab, ab, cd, ab]
    assert records[0].nodes is records[1].nodes
    assert records[2].nodes is not records[1].nodes
    one = decode_jobs(encode_job(record(9, (NAMES[3],))) + encode_job(record(8, ())), 2)
    assert [r.nodes for r in one] == [(NAMES[3],), ()]


def test_picked_targets_follow_reachability() -> None:
    state = node(0, others=3)
    membership = state.membership
    assert set(state.replication._pick(3)) == {NAMES[1], NAMES[2], NAMES[3]}
    membership.nodes[NAMES[3]].flags |= NODE_PFAIL
    membership._changed(config=False)
    for _ in range(20):
        assert NAMES[3] not in state.replication._pick(2)
    assert sorted(state.replication._pick(5)) == [NAMES[1], NAMES[2]]


def test_the_noreply_header_follows_our_header() -> None:
    state = node(0)
    add(state, b"REPLICATE", b"3", b"ASYNC")
    [first, *_] = [a.message for a in state.membership.take_actions() if type(a) is Send]
    assert isinstance(first, ReplJobMessage) and first.header.mflags == MFLAG_NOREPLY
    # A new header (membership makes one when our name or flags change): a new NOREPLY one.
    state.membership.myself.port = 7799
    state.membership._header = None
    add(state, b"REPLICATE", b"2", b"ASYNC")
    sent = [a.message for a in state.membership.take_actions() if type(a) is Send]
    header = sent[-1].header
    assert header.mflags == MFLAG_NOREPLY and header.port == 7799
    assert header._replace(mflags=0) == state.membership.header()


def test_a_batch_of_gotjobs_confirms_each_job() -> None:
    state = node(0)
    ids = [add(state, b"REPLICATE", b"3") for _ in range(3)]
    jobs = state.core.jobs
    assert all(jobs[job_id].state == WAIT_REPL for job_id in ids)
    for sender in (NAMES[1], NAMES[2]):
        header: Header = state.membership.header()._replace(sender=sender)
        entries = tuple((job_id, 0) for job_id in ids[:2])
        state.route_job_message(JobIdBatch(header, MessageType.GOTJOB, entries), NOW)
    assert [jobs[job_id].state == WAIT_REPL for job_id in ids] == [False, False, True]
    assert len(state.core.take_replies()) == 2
    # From a node not known (or still in its handshake): ignored, as a single GOTJOB is.
    stranger = state.membership.header()._replace(sender=b"f" * 40)
    state.route_job_message(JobIdBatch(stranger, MessageType.GOTJOB, ((ids[2], 0),)), NOW)
    assert jobs[ids[2]].state == WAIT_REPL


def test_parsed_integers_are_right_and_their_cache_bounded() -> None:
    for value in range(3 * parsing._RECENT_INTS_MAX):
        raw = b"%d" % value
        assert parsing.parse_int(raw) == value
        assert parsing.parse_int(raw) == value  # from the cache
        assert len(parsing._recent_ints) <= parsing._RECENT_INTS_MAX
    for bad in (b"+1", b"01", b" 1", b"1_0", b"9" * 21, b"9223372036854775808"):
        assert parsing.parse_int(bad) is None
        assert bad not in parsing._recent_ints
    assert parsing.parse_int(bytearray(b"12")) == 12  # not hashable: parsed, not cached


_TAIL_WORDS = [b"REPLICATE", b"replicate", b"DELAY", b"RETRY", b"retry", b"TTL", b"MAXLEN"]
_TAIL_WORDS += [b"ASYNC", b"async", b"bogus", b"0", b"1", b"3", b"-1", b"x", b"65536", b"5000"]


def _parsed_or_error(args: list[bytes]) -> AddJobArgs | str:
    try:
        return parse_addjob(args)
    except CommandError as exc:
        return exc.message


@settings(max_examples=400, deadline=None)
@given(
    timeout=st.sampled_from([b"0", b"5000", b"100", b"-1", b"x"]),
    options=st.lists(st.sampled_from(_TAIL_WORDS), max_size=14),
)
def test_parsed_addjob_tails_are_right_and_their_cache_bounded(
    timeout: bytes, options: list[bytes]
) -> None:
    args = [b"ADDJOB", b"q", b"body", timeout, *options]
    try:
        fresh: AddJobArgs | str = AddJobArgs(b"q", b"body", *cmd_jobs._parse_options(args))
    except CommandError as exc:
        fresh = exc.message
    # Twice: the second from the cache when the tail was kept. Tails met in earlier
    # examples (other timeouts, other cases of the same options) are in it too.
    assert _parsed_or_error(args) == fresh
    assert _parsed_or_error(args) == fresh
    tail = tuple(args[3:])
    kept = tail in cmd_jobs._RECENT_TAILS
    # A timeout alone is parsed without the cache (the no-option path).
    cacheable = 1 < len(tail) <= cmd_jobs._TAIL_MAX_ARGS
    assert kept == (not isinstance(fresh, str) and cacheable)
    assert len(cmd_jobs._RECENT_TAILS) <= cmd_jobs._RECENT_TAILS_MAX
    assert all(len(key) <= cmd_jobs._TAIL_MAX_ARGS for key in cmd_jobs._RECENT_TAILS)


def test_the_tail_cache_is_cleared_when_full() -> None:
    for retry in range(3 * cmd_jobs._RECENT_TAILS_MAX):
        args = [b"ADDJOB", b"q", b"body", b"0", b"RETRY", b"%d" % retry]
        assert parse_addjob(args).retry_s == retry
        assert len(cmd_jobs._RECENT_TAILS) <= cmd_jobs._RECENT_TAILS_MAX


def sends_to(actions: list, name: bytes) -> list:
    return [a.message for a in actions if type(a) is Send and a.name == name]


def test_copies_of_consecutive_addjobs_leave_as_one_repljob_per_target() -> None:
    state = node(0)
    ids = [add(state, b"REPLICATE", b"3") for _ in range(3)]
    assert state.replication.outbox.extra_sends == 4  # 2 jobs beyond the first, 2 targets
    actions = state.membership.take_actions()
    assert state.replication.outbox.extra_sends == 0
    [to_1], [to_2] = sends_to(actions, NAMES[1]), sends_to(actions, NAMES[2])
    assert to_1 is to_2  # one message, serialized once for both
    assert [record.id for record in to_1.jobs] == ids
    assert decode(encode(to_1)) == to_1
    assert state.membership.take_actions() == []


def test_a_message_put_between_two_copies_keeps_its_place() -> None:
    state = node(0)
    first = add(state, b"REPLICATE", b"3")
    state.replication.client_gone(first, NOW)  # DELJOB to both targets, after its copy
    second, third = add(state, b"REPLICATE", b"3"), add(state, b"REPLICATE", b"3")
    kinds = [
        (type(m).__name__, [r.id for r in m.jobs] if isinstance(m, ReplJobMessage) else m.id)
        for m in sends_to(state.membership.take_actions(), NAMES[1])
    ]
    assert kinds == [("ReplJob", [first]), ("DelJob", first), ("ReplJob", [second, third])]


def test_a_c_disque_target_gets_one_job_per_repljob() -> None:
    state = node(0)
    state.membership.nodes[NAMES[2]].batches = False  # as a C Disque node's header says
    ids = [add(state, b"REPLICATE", b"3") for _ in range(3)]
    actions = state.membership.take_actions()
    assert [[r.id for r in m.jobs] for m in sends_to(actions, NAMES[2])] == [[i] for i in ids]
    assert [[r.id for r in m.jobs] for m in sends_to(actions, NAMES[1])] == [ids]


def test_noreply_and_synchronous_copies_are_not_gathered_together() -> None:
    state = node(0)
    add(state, b"REPLICATE", b"3", b"ASYNC")
    add(state, b"REPLICATE", b"3")
    flags = [m.header.mflags for m in sends_to(state.membership.take_actions(), NAMES[1])]
    assert flags == [MFLAG_NOREPLY, 0]


def copies_from(origin: ClusterState, to: bytes, *options: bytes) -> tuple[list[bytes], bytes]:
    ids = [add(origin, b"REPLICATE", b"3", *options) for _ in range(3)]
    [frame] = {encode(m) for m in sends_to(origin.membership.take_actions(), to)}
    return ids, frame


def test_the_copies_of_a_repljob_are_confirmed_in_one_gotjob_frame() -> None:
    origin, replica = node(0), node(1)
    ids, frame = copies_from(origin, NAMES[1])
    replica.route_job_message(decode(frame), NOW)
    [batch] = sends_to(replica.membership.take_actions(), NAMES[0])
    assert isinstance(batch, JobIdBatch) and batch.kind == MessageType.GOTJOB
    assert [job_id for job_id, _ in batch.entries] == ids
    origin.route_job_message(decode(encode(batch)), NOW)
    assert all(origin.core.jobs[job_id].nodes_confirmed == (NAMES[0], NAMES[1]) for job_id in ids)


def test_a_c_disque_sender_gets_one_gotjob_per_copy() -> None:
    origin, replica = node(0), node(1)
    replica.membership.nodes[NAMES[0]].batches = False
    ids, frame = copies_from(origin, NAMES[1])
    replica.route_job_message(decode(frame), NOW)
    confirmations = sends_to(replica.membership.take_actions(), NAMES[0])
    assert [type(m).__name__ for m in confirmations] == ["GotJob"] * 3
    assert [m.id for m in confirmations] == ids


def test_copies_not_taken_or_not_to_answer_are_not_confirmed() -> None:
    origin, replica = node(0), node(1)
    _, frame = copies_from(origin, NAMES[1], b"ASYNC")  # NOREPLY
    replica.route_job_message(decode(frame), NOW)
    assert len(replica.core.jobs) == 3 and replica.membership.take_actions() == []
    replica.core.pause(b"q", PAUSE_IN, NOW)  # a queue paused for input takes no copy
    _, frame = copies_from(origin, NAMES[1])
    replica.route_job_message(decode(frame), NOW)
    assert len(replica.core.jobs) == 3 and replica.membership.take_actions() == []
