"""Membership under seeded faults: message loss, nodes killed and brought back, partitions.

Each seed builds a 5-node cluster in the pure `Net` of test_membership (virtual clock,
synchronous delivery), then runs a random history of faults. Invariants checked after
every step: no node flags itself, failure reports only name known nodes and are bounded
by the cluster size, the blacklist and the handshakes stay bounded. Once every fault is
healed: every node knows exactly every other, none flagged, within 10 node timeouts.

A failing seed replays alone: MEMBERSHIP_SEED=<seed> pytest tests/cluster/test_membership_sim.py
"""

from __future__ import annotations

import os
import random

from conveyor.cluster.actions import Send
from conveyor.cluster.messages import NODE_FAIL, NODE_HANDSHAKE, NODE_PFAIL
from tests.cluster.test_membership import TIMEOUT, Net, name

NODES = 5
SEEDS = range(int(os.environ.get("MEMBERSHIP_SEEDS", "200")))


class LossyNet(Net):
    """Links behave like TCP: a message is lost only with its link, which the owner sees
    go down and reconnects on a later tick (as the transport's backoff does), unless the
    target is down or cut off by a partition."""

    def __init__(self, count: int, rand: random.Random) -> None:
        super().__init__(count)
        self.rand = rand
        self.loss = 0.0
        self.cut: set[frozenset[int]] = set()  # pairs that cannot talk

    def _blocked(self, owner: int, target: int) -> bool:
        return target in self.down or frozenset((owner, target)) in self.cut

    def _do(self, owner: int, action: object) -> list[int]:
        if isinstance(action, Send):
            target = self.links.get((owner, action.name))
            if target is not None and (
                self._blocked(owner, target) or self.rand.random() < self.loss
            ):
                self.members[owner].link_down(action.name, self.now)
                return []
        return super()._do(owner, action)

    def tick(self, ms: int, step: int = 100) -> None:
        for _ in range(ms // step):
            for (owner, peer), target in list(self.links.items()):
                member = self.members[owner]
                node = member.nodes.get(peer)
                if owner in self.down or node is None or node.link_up:
                    continue
                if not self._blocked(owner, target):
                    member.link_up(peer, self.now)
                    self.run(owner)
            super().tick(step, step)


def check_bounds(net: Net, seed: int) -> None:
    names = {name(i + 1) for i in range(NODES)}
    for index, member in enumerate(net.members):
        if index in net.down:
            continue
        assert not member.myself.flags & (NODE_PFAIL | NODE_FAIL), f"seed {seed}: self flagged"
        handshakes = sum(1 for n in member.nodes.values() if n.flags & NODE_HANDSHAKE)
        assert handshakes <= NODES, f"seed {seed}: {handshakes} handshakes pile up"
        assert len(member.blacklist) <= NODES, f"seed {seed}: blacklist grows"
        for node in member.nodes.values():
            assert set(node.fail_reports) <= names, f"seed {seed}: report from a stranger"
            assert len(node.fail_reports) < NODES, f"seed {seed}: reports unbounded"


def heal(net: LossyNet) -> None:
    net.cut.clear()
    net.loss = 0.0
    net.down.clear()


def converged(net: Net) -> bool:
    names = {name(i + 1) for i in range(NODES)}
    return all(
        set(member.nodes) == names
        and not any(
            n.flags & (NODE_PFAIL | NODE_FAIL | NODE_HANDSHAKE) for n in member.nodes.values()
        )
        for member in net.members
    )


def run_seed(seed: int) -> None:
    rand = random.Random(seed)
    net = LossyNet(NODES, rand)
    for index in range(1, NODES):
        net.members[index].meet("127.0.0.1", 7000 + rand.randrange(index), net.now)
        net.run(index)
    net.tick(3000)  # MEET is best effort, as in Disque: the faults start once formed
    assert converged(net), f"seed {seed}: the cluster did not form"
    net.loss = rand.choice((0.0, 0.01, 0.05))
    for _ in range(rand.randrange(5, 15)):
        fault = rand.random()
        if fault < 0.3 and len(net.down) < NODES - 1:
            net.kill(rand.choice([i for i in range(NODES) if i not in net.down]))
        elif fault < 0.5 and net.down:
            net.down.discard(rand.choice(sorted(net.down)))
        elif fault < 0.7:
            a, b = rand.sample(range(NODES), 2)
            net.cut.add(frozenset((a, b)))
        net.tick(rand.randrange(1, 30) * 100)
        check_bounds(net, seed)
    heal(net)
    for _ in range(10):
        net.tick(TIMEOUT)
        check_bounds(net, seed)
        if converged(net):
            return
    raise AssertionError(
        f"seed {seed}: not converged 10 node timeouts after healing; replay: "
        f"MEMBERSHIP_SEED={seed} pytest tests/cluster/test_membership_sim.py"
    )


def test_membership_converges_after_seeded_faults() -> None:
    only = os.environ.get("MEMBERSHIP_SEED")
    for seed in [int(only)] if only else SEEDS:
        run_seed(seed)
