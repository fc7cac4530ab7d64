"""Membership as a pure state machine: handshakes, gossip, PFAIL/FAIL, nodes.conf text.

Several Membership objects exchange messages by hand here (a tiny network of our own):
what goes on the wire is the actions' messages, unchanged.
"""

from __future__ import annotations

import random

import pytest

from conveyor.cluster.actions import Connect, Drop, Rename, Reply, Send
from conveyor.cluster.membership import BLACKLIST_TTL_MS, Membership
from conveyor.cluster.messages import (
    NODE_FAIL,
    NODE_HANDSHAKE,
    NODE_MYSELF,
    NODE_NOADDR,
    NODE_PFAIL,
    Fail,
    GossipEntry,
    JobIdBatch,
    Meet,
    Ping,
    Pong,
)
from conveyor.cluster.nodes import NodesConfError, parse_nodes_conf

TIMEOUT = 1000
T0 = 1_700_000_000_000


def name(index: int) -> bytes:
    return f"{index:040x}".encode()


class Net:
    """Nodes 127.0.0.1:7000+i; every outbound link is up as soon as it is asked for."""

    def __init__(self, count: int) -> None:
        self.now = T0
        self.members = [
            Membership(name(i + 1), 7000 + i, TIMEOUT, random.Random(i), self.now)
            for i in range(count)
        ]
        self.down: set[int] = set()
        self.by_port = {7000 + i: i for i in range(count)}
        # (owner index, peer name) -> target index of each outbound link
        self.links: dict[tuple[int, bytes], int] = {}

    def run(self, index: int, rounds: int = 50) -> None:
        """Carry out node `index`'s actions, and everything they cause, until quiet."""
        pending = [index]
        while pending and rounds:
            rounds -= 1
            current = pending.pop(0)
            for action in self.members[current].take_actions():
                pending.extend(self._do(current, action))

    def _do(self, owner: int, action: object) -> list[int]:
        member = self.members[owner]
        if isinstance(action, Connect):
            target = self.by_port[action.port]
            self.links[(owner, action.name)] = target
            if target not in self.down:
                member.link_up(action.name, self.now)
            return [owner]
        if isinstance(action, Rename):
            self.links[(owner, action.new)] = self.links.pop((owner, action.old))
        elif isinstance(action, Drop):
            self.links.pop((owner, action.name), None)
        elif isinstance(action, Send):
            target = self.links.get((owner, action.name))
            if target is None or target in self.down:
                return []
            self.members[target].receive(action.message, None, "127.0.0.1", "127.0.0.1", self.now)
            # PONGs come back on the same link: to the owner, as its outbound peer.
            for reply in self.members[target].take_actions():
                if isinstance(reply, Reply):
                    member.receive(reply.message, action.name, "127.0.0.1", "127.0.0.1", self.now)
                else:
                    self.members[target].actions.append(reply)
            return [owner, target]
        return []

    def tick(self, ms: int, step: int = 100) -> None:
        for _ in range(ms // step):
            self.now += step
            for index, member in enumerate(self.members):
                if index in self.down:
                    member.take_actions()
                    continue
                member.cron(self.now)
                self.run(index)

    def kill(self, index: int) -> None:
        self.down.add(index)
        for (owner, peer), target in self.links.items():
            if target == index and owner not in self.down:
                self.members[owner].link_down(peer, self.now)

    def flags(self, index: int, of: int) -> int:
        return self.members[index].nodes[name(of + 1)].flags


def formed(count: int, settle_ms: int = 2000) -> Net:
    """`count` nodes, each MEETing node 0, settled for `settle_ms`."""
    net = Net(count)
    for index in range(1, count):
        assert net.members[index].meet("127.0.0.1", 7000, net.now)
        net.run(index)
    net.tick(settle_ms)
    return net


def test_meet_renames_the_handshake_node_and_gossip_teaches_the_rest() -> None:
    net = formed(4, 3000)
    for member in net.members:
        assert sorted(member.nodes) == [name(i) for i in range(1, 5)]
        assert member.size() == 4
        assert len(member.reachable()) == 3
        assert not any(n.flags & NODE_HANDSHAKE for n in member.nodes.values())


def test_meet_twice_to_the_same_address_is_one_handshake() -> None:
    member = Membership(name(1), 7000, TIMEOUT, random.Random(1), T0)
    assert member.meet("127.0.0.1", 7001, T0)
    assert not member.meet("127.0.0.1", 7001, T0)
    assert len(member.nodes) == 2
    assert member.size() == 1  # handshakes are not members yet


def test_an_unanswered_handshake_is_dropped_after_the_timeout() -> None:
    member = Membership(name(1), 7000, TIMEOUT, random.Random(1), T0)
    member.meet("127.0.0.1", 7001, T0)
    member.take_actions()
    member.cron(T0 + 900)
    assert len(member.nodes) == 2
    member.cron(T0 + 1100)
    assert list(member.nodes) == [name(1)]
    assert any(isinstance(a, Drop) for a in member.take_actions())


def test_meet_from_an_unknown_sender_adds_it_and_answers_pong() -> None:
    a = Membership(name(1), 7000, TIMEOUT, random.Random(1), T0)
    b = Membership(name(2), 7001, TIMEOUT, random.Random(2), T0)
    a.receive(Meet(b.header()), None, "127.0.0.9", "127.0.0.1", T0)
    actions = a.take_actions()
    assert isinstance(actions[-1], Reply) and isinstance(actions[-1].message, Pong)
    connect = next(act for act in actions if isinstance(act, Connect))
    assert (connect.ip, connect.port) == ("127.0.0.9", 7001)
    assert a.myself.ip == "127.0.0.1"  # learned from the socket the MEET came in on
    # A PING from an unknown sender is answered but adds nobody.
    c = Membership(name(3), 7002, TIMEOUT, random.Random(3), T0)
    a.receive(Ping(c.header()), None, "127.0.0.3", "127.0.0.1", T0)
    assert isinstance(a.take_actions()[-1], Reply)
    assert name(3) not in a.nodes and len(a.nodes) == 2


def test_pfail_after_the_timeout_then_fail_by_majority_then_cleared() -> None:
    net = formed(5, 3000)
    net.kill(3)
    net.kill(4)
    net.tick(900)
    assert not net.flags(0, 3) & (NODE_PFAIL | NODE_FAIL)
    net.tick(5000)
    for index in (0, 1, 2):
        assert net.flags(index, 3) & NODE_FAIL and net.flags(index, 4) & NODE_FAIL
        assert len(net.members[index].reachable()) == 2
    net.down.clear()
    for (owner, peer), target in net.links.items():
        if target in (3, 4):
            net.members[owner].link_up(peer, net.now)
    net.tick(3000)
    for index in range(5):
        for other in range(5):
            if other != index:
                assert not net.flags(index, other) & (NODE_PFAIL | NODE_FAIL)


def test_pfail_alone_is_not_fail_without_reports() -> None:
    member = Membership(name(1), 7000, TIMEOUT, random.Random(1), T0)
    for index, port in ((2, 7001), (3, 7002)):
        member.receive(Meet(Membership(name(index), port, TIMEOUT, random.Random(), T0).header()),
                       None, "127.0.0.1", "127.0.0.1", T0)  # fmt: skip
    # Finish both handshakes by hand: PONGs on the outbound links.
    for action in member.take_actions():
        if isinstance(action, Connect):
            member.link_up(action.name, T0)
            sender = name(2) if action.port == 7001 else name(3)
            header = Membership(sender, action.port, TIMEOUT, random.Random(), T0).header()
            member.receive(Pong(header), action.name, "127.0.0.1", "127.0.0.1", T0)
    assert member.size() == 3
    member.link_down(name(2), T0 + 10)
    member.cron(T0 + 1200)
    flags = member.nodes[name(2)].flags
    assert flags & NODE_PFAIL and not flags & NODE_FAIL  # needs 2 of 3: only our own view
    report = GossipEntry(name(2), 0, 0, b"127.0.0.1", 7001, NODE_PFAIL)
    header = Membership(name(3), 7002, TIMEOUT, random.Random(), T0).header()
    member.receive(Ping(header, (report,)), None, "127.0.0.1", "127.0.0.1", T0 + 1300)
    assert member.nodes[name(2)].flags & NODE_FAIL
    sent = [a.message for a in member.take_actions() if isinstance(a, Send)]
    assert any(isinstance(m, Fail) and m.nodename == name(2) for m in sent)


def test_fail_message_from_a_known_node_marks_the_node() -> None:
    net = formed(3)
    fail = Fail(net.members[1].header(), name(3))
    net.members[0].receive(fail, None, "127.0.0.1", "127.0.0.1", net.now)
    assert net.flags(0, 2) & NODE_FAIL
    stranger = Membership(name(9), 7009, TIMEOUT, random.Random(), T0)
    net.members[1].receive(Fail(stranger.header(), name(3)), None, "", "", net.now)
    assert not net.flags(1, 2) & NODE_FAIL  # from an unknown sender: ignored


def test_forgotten_nodes_are_not_relearned_from_gossip_for_a_minute() -> None:
    net = formed(3)
    net.members[0].forget(name(3), net.now)
    net.run(0)
    net.tick(5000)
    assert name(3) not in net.members[0].nodes
    net.tick(BLACKLIST_TTL_MS)
    assert name(3) in net.members[0].nodes


def test_a_link_answered_by_another_name_flags_the_node_noaddr() -> None:
    member = Membership(name(1), 7000, TIMEOUT, random.Random(1), T0)
    member.load(parse_nodes_conf(f"{name(1).decode()} :7000 myself 0 0 connected\n"
                                 f"{name(2).decode()} 127.0.0.1:7001 noflags 0 0 connected\n",
                                 T0))  # fmt: skip
    member.link_up(name(2), T0)
    impostor = Membership(name(5), 7001, TIMEOUT, random.Random(), T0).header()
    member.receive(Pong(impostor), name(2), "127.0.0.1", "127.0.0.1", T0)
    node = member.nodes[name(2)]
    assert node.flags & NODE_NOADDR and node.port == 0
    assert Drop(name(2)) in member.take_actions()


def test_nodes_conf_round_trip_and_errors() -> None:
    net = formed(3)
    text = net.members[0].describe(skip_flags=NODE_HANDSHAKE)
    nodes = parse_nodes_conf(text, T0)
    assert sorted(n.name for n in nodes) == [name(1), name(2), name(3)]
    assert [n.flags for n in nodes if n.name == name(1)] == [NODE_MYSELF]
    with pytest.raises(NodesConfError, match="1 expected"):
        parse_nodes_conf(f"{name(2).decode()} 127.0.0.1:7001 noflags 0 0 connected\n", T0)
    with pytest.raises(NodesConfError, match="unknown flag"):
        parse_nodes_conf(f"{name(1).decode()} :7000 myself,bogus 0 0 connected\n", T0)
    with pytest.raises(NodesConfError, match="bad address"):
        parse_nodes_conf(f"{name(1).decode()} 7000 myself 0 0 connected\n", T0)
    with pytest.raises(NodesConfError, match="bad address"):
        parse_nodes_conf(f"{name(1).decode()} :7²00 myself 0 0 connected\n", T0)
    with pytest.raises(NodesConfError, match="fields"):
        parse_nodes_conf(f"{name(1).decode()} :7000 myself 0 0\n", T0)


def test_dummy_acks_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """ACKJOB of unknown IDs leaves dummy acks; their number has a ceiling."""
    from conveyor.cluster import acks as acks_module
    from conveyor.cluster.state import ClusterState
    from conveyor.core.node import NodeCore

    monkeypatch.setattr(acks_module, "MAX_DUMMY_ACKS", 5)
    net = formed(3)
    member = net.members[0]
    state = ClusterState(NodeCore(name(1).decode(), b"s" * 20, random.Random(1)), member,
                         random.Random(1))  # fmt: skip
    ids = [b"D-00000001-%s-05a1" % (b"%024d" % index) for index in range(20)]
    assert state.acks.ack(ids, net.now) == 0  # none known here
    assert len(state.acks.dummies) == 5
    sent = [a.message for a in member.take_actions() if isinstance(a, Send)]
    # Merged per node (batching.py): the IDs of every frame, one by one.
    singles = [
        m for msg in sent for m in (msg.messages() if isinstance(msg, JobIdBatch) else [msg])
    ]
    assert {m.id for m in singles} == set(ids[:5])  # type: ignore[union-attr]


@pytest.mark.parametrize("sender", [b"\xff" * 40, b"a b\n" + b"0" * 36, b"A" * 40])
def test_a_handshake_answered_by_a_name_that_is_not_hex_is_dropped(sender: bytes) -> None:
    member = Membership(name(1), 7000, TIMEOUT, random.Random(1), T0)
    member.meet("127.0.0.1", 7001, T0)
    connect = next(a for a in member.take_actions() if isinstance(a, Connect))
    member.link_up(connect.name, T0)
    member.take_actions()
    header = Membership(sender, 7001, TIMEOUT, random.Random(), T0).header()
    member.receive(Pong(header), connect.name, "127.0.0.1", "127.0.0.1", T0)
    assert list(member.nodes) == [name(1)]
    assert Drop(connect.name) in member.take_actions()
    assert len(parse_nodes_conf(member.describe(), T0)) == 1


def test_meets_repeated_by_an_unknown_sender_make_one_handshake() -> None:
    a = Membership(name(1), 7000, TIMEOUT, random.Random(1), T0)
    b = Membership(name(2), 7001, TIMEOUT, random.Random(2), T0)
    for _ in range(100):
        a.receive(Meet(b.header()), None, "127.0.0.9", "127.0.0.1", T0)
    actions = a.take_actions()
    assert len(a.nodes) == 2  # ourselves and one handshake: not a hundred
    assert sum(isinstance(act, Connect) for act in actions) == 1
    assert sum(isinstance(act, Reply) for act in actions) == 100  # each MEET answered
