"""A random history per seed: a cluster forms, clients work while faults strike, it heals.

`run_history(seed)` is a pure function of the seed (the replay command in a failure
message is all it takes to see it again):
1. 3-5 nodes, some with an AOF, each MEETs an earlier one; the cluster must form;
2. the network gets a random fault profile (loss, duplication, reordering, delay);
   60-200 steps of: producers (mostly synchronous ADDJOB REPLICATE 2-3 with a timeout,
   some ASYNC, some RETRY 0 REPLICATE 1), consumers (GETJOB NOHANG on one node, or a
   blocking GETJOB that federation serves from other nodes; then ACKJOB there, ACKJOB on
   another node, FASTACK, or nothing so that RETRY requeues it), and faults (crash,
   restart, partitions, healing, loss changes). In two histories of three, a few steps
   also set a node leaving (CLUSTER LEAVING yes; never every node at once) or back (no):
   producers there get external replication or -NOREPL, a blocking GETJOB there gets
   -LEAVING (counted; the consumer moves on), NOHANG still takes its queued jobs, and it
   hands its queued jobs to the others. A restarted node is not leaving (as a real one);
3. everything heals (crashed nodes restart, cuts and loss go) and consumers drain every
   node that is not leaving until nothing is left to deliver or collect: the jobs of the
   nodes still leaving get drained only if they hand them over. Those nodes must then
   hold no queued job (`Ledger.check_handed_over`); then they stop leaving;
4. liveness: on a network that only loses messages, synchronous ADDJOBs all succeed;
   then the consumers drain everything again.
The ledger checks its invariants after every step and at the end (tests/sim/ledger.py).
The leaving steps draw from their own random stream: a history that never leaves plays
exactly as it did before leaving was simulated, so older failing seeds still replay.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from conveyor.cluster import membership as membership_module
from conveyor.cluster.messages import NODE_FAIL, NODE_HANDSHAKE, NODE_PFAIL
from conveyor.core.args import AddJobArgs
from conveyor.core.errors import LEAVING, CommandError
from tests.sim.ledger import Ledger, Totals, Violation
from tests.sim.network import T0, Faults, SimNetwork
from tests.sim.node import SimNode

QUEUE = b"q"
TTL_S = 3600  # longer than any history: no job expires, so every copy gone is explained
_TOO_FEW = "NOREPL Not enough reachable nodes"
SETTLE_ROUNDS = 600  # of 500 ms: the ack GC backs off up to minutes after long faults
LEAVING_HISTORIES = 2 / 3  # the share of histories with leaving steps
LEAVE_STEP = 0.03  # per workload step of such a history: a few leaves in 60-200 steps


@contextmanager
def deterministic_names(rand: random.Random) -> Iterator[None]:
    """Handshake names come from os.urandom in membership: from the seed here instead."""
    with mock.patch.object(
        membership_module, "random_name", lambda: b"%040x" % rand.getrandbits(160)
    ):
        yield


def replay_command(seed: int) -> str:
    return (
        f"SIM_SEED={seed} .venv/bin/pytest tests/sim -q"
        f"  (or: .venv/bin/python -m tests.sim.run --seed {seed})"
    )


class History:
    def __init__(self, seed: int, wire: bool = True) -> None:
        self.seed = seed
        self.rand = random.Random(seed)
        self.net = SimNetwork(random.Random(self.rand.getrandbits(64)), wire)
        self.ledger = Ledger(seed)
        self.tokens = 0
        # Its own stream (see the module's docstring): self.rand draws the same as before.
        self.leave_rand = random.Random(f"{seed}/leaving")
        self.leaves = self.leave_rand.random() < LEAVING_HISTORIES
        count = self.rand.randint(3, 5)
        for index in range(count):
            aof = self.rand.random() < 0.3
            node = SimNode(index, self.net, self.ledger, seed, aof)
            self.net.add_node(node)
            self.ledger.nodes.append(node)

    @property
    def nodes(self) -> list[SimNode]:
        return self.net.nodes

    def alive(self) -> list[SimNode]:
        return [node for node in self.nodes if node.alive]

    # -- phases -------------------------------------------------------------------------------
    def form(self) -> None:
        for node in self.nodes[1:]:
            node.meet(self.rand.randrange(node.index))
        for _ in range(20):
            self.net.advance(500)
            if self.converged():
                return
        self.ledger.fail("the cluster did not form in 10 s")

    def converged(self) -> bool:
        names = {node.name for node in self.nodes}
        bad = NODE_PFAIL | NODE_FAIL | NODE_HANDSHAKE
        return all(
            node.alive
            and set(node.membership.nodes) == names
            and not any(n.flags & bad for n in node.membership.nodes.values())
            for node in self.nodes
        )

    def workload(self) -> None:
        rand = self.rand
        self.net.faults = Faults(
            loss=rand.choice((0.0, 0.001, 0.005, 0.02)),
            dup=rand.choice((0.0, 0.0, 0.02, 0.1)),
            reorder=rand.choice((0.0, 0.0, 0.05)),
            max_delay_ms=rand.choice((2, 5, 20)),
        )
        for _ in range(rand.randint(60, 200)):
            if self.leaves and self.leave_rand.random() < LEAVE_STEP:
                self.leave_step()
            roll = rand.random()
            if roll < 0.45:
                self.produce()
            elif roll < 0.75:
                self.consume(rand.choice(self.alive()), rand.randint(1, 3), final=False)
            elif roll < 0.85:
                self.block(rand.choice(self.alive()), rand.randint(1, 3))
            else:
                self.fault()
            self.net.advance(rand.randrange(1, 400))
            self.take_woken(final=False)
            self.ledger.check_step()

    def heal(self) -> None:
        for node in self.nodes:
            if not node.alive:
                node.restart()
        self.net.cut.clear()
        self.net.faults = Faults(max_delay_ms=self.net.faults.max_delay_ms)

    def settle(self) -> None:
        for _ in range(SETTLE_ROUNDS):
            self.net.advance(500)
            self.take_woken(final=True)
            for node in self.nodes:
                if not node.leaving:  # what a leaving node holds must be handed over
                    self.consume(node, 100, final=True)
            self.ledger.check_step()
            if self.quiet():
                return
        # Not quiet after SETTLE_ROUNDS: check_end says what is left.

    def stop_leaving(self) -> None:
        """Once the nodes still leaving are checked: CLUSTER LEAVING no on each, so that
        the liveness phase may pick any node."""
        for node in self.nodes:
            if node.leaving:
                node.set_leaving(False)

    def lossy_adds(self) -> None:
        """Liveness, once settled: on a network that only loses messages (2%, each loss
        breaking a link), synchronous ADDJOBs with a 5 s timeout are all answered OK:
        replication resends REPLJOB to the unconfirmed targets every 50 ms."""
        rand = self.rand
        self.net.faults.loss = 0.02
        added = []
        for _ in range(10):
            node = rand.choice(self.nodes)
            repl = rand.randint(2, min(3, len(self.nodes)))
            for _attempt in range(10):
                args = AddJobArgs(QUEUE, b"calm", repl, 0, 30, TTL_S, None, False, 5000)
                self.tokens += 1
                token = (node.index, self.tokens)
                outcome = node.add_job(args, token)
                self.ledger.added(token, outcome, sync=True)
                # Losses can make a node look failing for a while (PFAIL): "not enough
                # reachable nodes" is an answer a client retries, not a lost liveness.
                if outcome[0] != "err" or not str(outcome[1]).startswith(_TOO_FEW):
                    break
                self.net.advance(500)
            added.append(outcome)
            self.net.advance(100)
        self.net.advance(6000)
        self.net.faults.loss = 0.0
        for kind, value in added:
            if kind == "err" or self.ledger.jobs[value].status != "ok":
                self.ledger.fail(f"liveness: ADDJOB on a lossy network not answered OK: {value}")

    def quiet(self) -> bool:
        if not self.converged():
            return False
        for node in self.nodes:
            if node.replication.pending or node.acks.pending():
                return False
            if any(not self.ledger._amo_done(job_id) for job_id in node.core.jobs):
                return False
        return True

    # -- clients ------------------------------------------------------------------------------
    def produce(self) -> None:
        rand = self.rand
        node = rand.choice(self.alive())
        roll = rand.random()
        args = AddJobArgs(QUEUE, b"body", None, 0, rand.randint(1, 3), TTL_S, None, False)
        if roll < 0.6:
            args.repl = rand.randint(2, 3)
            args.timeout_ms = rand.randrange(200, 3000)
        elif roll < 0.8:
            args.repl = rand.randint(2, 3)
            args.asynchronous = True
        else:
            args.repl, args.retry_s = 1, 0
        self.tokens += 1
        token = (node.index, self.tokens)
        sync = args.repl > 1 and not args.asynchronous
        self.ledger.added(token, node.add_job(args, token), sync)

    def consume(self, node: SimNode, count: int, final: bool) -> None:
        self.deliver(node, node.get_jobs(QUEUE, count), final)

    def block(self, node: SimNode, count: int) -> None:
        """A consumer blocks on an empty queue: federation brings it jobs from the other
        nodes (NEEDJOBS/YOURJOBS), which arrive while the network runs (take_woken). A
        leaving node answers -LEAVING instead: the consumer goes elsewhere later."""
        try:
            job_ids = node.block(QUEUE, count, self.rand.randrange(100, 3000))
        except CommandError as exc:
            if exc.message != LEAVING or not node.leaving:
                raise
            self.ledger.totals.leaving_refused += 1
            return
        self.deliver(node, job_ids, False)

    def take_woken(self, final: bool) -> None:
        for node in self.nodes:
            if node.woken:
                job_ids, node.woken = node.woken, []
                self.ledger.totals.woken += len(job_ids)
                self.deliver(node, job_ids, final)

    def deliver(self, node: SimNode, job_ids: list[bytes], final: bool) -> None:
        """A client got these jobs from `node`: it acks them (there, elsewhere, FASTACK)
        or dies without acking, as it rolls."""
        rand = self.rand
        if not node.alive:  # crashed after answering: its client acks elsewhere
            node = rand.choice(self.alive())
        for job_id in job_ids:
            self.ledger.record_delivery(job_id)
            at_most_once = self.ledger.jobs[job_id].retry == 0
            roll = 0.0 if final else rand.random()
            if at_most_once and roll >= 0.6:
                # Taken and never acked (the worker died): held until its TTL, never again.
                roll = 1.0 if roll >= 0.8 else 0.0
            if roll < 0.6:
                node.ack([job_id])
            elif roll < 0.7:
                rand.choice(self.alive()).ack([job_id])  # a non-owner, maybe a dummy ack
            elif roll < 0.8:
                node.fast_ack([job_id])
            else:
                self.ledger.totals.abandoned += 1
                continue  # the worker died: RETRY requeues it
            self.ledger.record_ack(job_id)

    # -- faults -------------------------------------------------------------------------------
    def leave_step(self) -> None:
        """CLUSTER LEAVING yes on a node (one node at least stays out of it), or no on
        a leaving one half the time."""
        rand = self.leave_rand
        node = rand.choice(self.alive())
        if node.leaving:
            if rand.random() < 0.5:
                node.set_leaving(False)
                self.ledger.totals.comebacks += 1
        elif sum(n.leaving for n in self.nodes) < len(self.nodes) - 1:
            node.set_leaving(True)
            self.ledger.totals.leaves += 1

    def fault(self) -> None:
        rand = self.rand
        alive = self.alive()
        down = [node for node in self.nodes if not node.alive]
        roll = rand.random()
        if roll < 0.3 and len(alive) > 1:
            node = rand.choice(alive)
            old = node.incarnation
            node.crash()
            self.ledger.crashed(node, old)
        elif roll < 0.5 and down:
            rand.choice(down).restart()
        elif roll < 0.7:
            a, b = rand.sample(range(len(self.nodes)), 2)
            self.net.cut.add(frozenset((a, b)))
        elif roll < 0.8:
            side = set(rand.sample(range(len(self.nodes)), rand.randint(1, len(self.nodes) // 2)))
            for a in sorted(side):
                for b in range(len(self.nodes)):
                    if b not in side:
                        self.net.cut.add(frozenset((a, b)))
        elif roll < 0.9:
            self.net.cut.clear()
        else:
            self.net.faults.loss = rand.choice((0.0, 0.005, 0.05))
        self.ledger.totals.faults += 1


def run_history(seed: int, wire: bool = True) -> Totals:
    """One seeded history, its invariants checked; raises Violation with a replay line."""
    history = History(seed, wire)
    with deterministic_names(random.Random(seed * 7919 + 1)):
        try:
            history.form()
            history.workload()
            history.heal()
            history.settle()
            history.ledger.check_handed_over()
            history.stop_leaving()
            history.lossy_adds()
            history.settle()
            history.ledger.check_end()
        except Violation as exc:
            raise Violation(f"{exc}\n  replay: {replay_command(seed)}") from None
    totals = history.ledger.totals
    totals.messages = history.net.messages
    totals.link_breaks = history.net.link_breaks
    totals.virtual_s = (history.net.now - T0) // 1000
    totals.digest = history.net.digest.hexdigest()
    return totals
