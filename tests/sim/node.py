"""One simulated node: NodeCore + Membership + Replication + AckGC, driven like a real one.

The wiring copies `conveyor.node.cluster.ClusterDriver` without its asyncio: gossip and
FAIL go to membership, job messages (only from nodes past their handshake) to
replication, the ack GC and requeue coordination (the core's ClusterHooks); after every
input the actions are carried out on the simulated network, the core learns the
cluster's size and reachability when membership says the view changed, and the timers
are re-armed on the virtual clock (cron every 100 ms with the ack GC, replication every
50 ms while ADDJOBs wait, the core at its `next_deadline()`). Client commands take the
cluster path when the core sees more than one node, as the command handlers do.

Crash and restart: a crash loses every job and every timer; nodes.conf survives (Disque
writes it on every change), so the node comes back with its name and its peers. With
`aof`, the node keeps the product's append-only file: after every batch the core's job
events go through `persistence.records.RecordEncoder.from_events` (LOADJOB when a job is
added, replicated or imported, DELJOB when acked or freed), the bytes are appended as
with `appendfsync always` (before any reply or message of the batch can leave), and a
restart loads them with `persistence.loader.load`, as the node does at start.

Leaving: `set_leaving` is `CLUSTER LEAVING yes|no` (cmd_admin): the core's flag (it then
replicates new jobs externally, refuses REPLJOB and a blocking GETJOB with -LEAVING),
then membership's (every header carries it, a PONG to all says it at once), then the
actions, as `ClusterDriver.set_leaving` runs them. Federation hands the queued jobs over
from the cron. Like the real node (and Disque), a restart comes back leaving if it was:
nodes.conf keeps the flag, and `ClusterState.load_nodes` gives it to membership and the
core.
"""

from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING, Any, Protocol

from conveyor.cluster.membership import Membership
from conveyor.cluster.messages import (
    GOSSIP_CLASSES,
    NODE_HANDSHAKE,
    Enqueue,
    Fail,
    JobIdBatch,
    Message,
    MessageType,
    YourJobs,
)
from conveyor.cluster.nodes import parse_nodes_conf
from conveyor.cluster.replication import EXTRA_TARGET_MS
from conveyor.cluster.state import ClusterState
from conveyor.core.args import AddJobArgs, GetJobArgs
from conveyor.core.codec import JobRecord, decode_job
from conveyor.core.effects import JobEvent, Reply, WokenGetJob
from conveyor.core.errors import CommandError
from conveyor.core.node import NodeCore
from conveyor.persistence.loader import LoadStats, load
from conveyor.persistence.reader import read_records
from conveyor.persistence.records import RecordEncoder
from tests.sim.network import BASE_PORT, IP

if TYPE_CHECKING:
    from tests.sim.network import Link, SimNetwork

NODE_TIMEOUT_MS = 1000
CRON_MS = 100


class Observer(Protocol):
    """Who watches the nodes (the ledger): job events and late ADDJOB replies."""

    def job_events(self, node: SimNode, events: list[JobEvent]) -> None: ...
    def add_reply(self, node: SimNode, token: Any, value: Any) -> None: ...
    def moved(self, node: SimNode, jobs: tuple[JobRecord, ...]) -> None: ...
    def enqueue_sent(self, node: SimNode, job_id: bytes) -> None: ...
    def enqueued(self, node: SimNode, job_id: bytes) -> None: ...


def enqueue_ids(message: Message) -> list[bytes]:
    """The jobs an ENQUEUE names: membership merges those to one node (JobIdBatch)."""
    if type(message) is Enqueue:
        return [message.id]
    if type(message) is JobIdBatch and message.kind == MessageType.ENQUEUE:
        return [job_id for job_id, _ in message.entries]
    return []


def node_name(index: int) -> bytes:
    # Distinct 8-hex prefixes, as real node IDs have: job IDs carry them.
    return hashlib.sha1(b"sim-node-%d" % index).hexdigest().encode()


class SimNode:
    def __init__(
        self, index: int, net: SimNetwork, observer: Observer, seed: int, aof: bool
    ) -> None:
        self.index = index
        self.woken: list[bytes] = []  # jobs handed to blocked clients, not yet processed
        self.name = node_name(index)
        self.port = BASE_PORT + index
        self.net = net
        self.observer = observer
        self.seed = seed
        self.aof_on = aof
        self.alive = False
        self.incarnation = 0
        self.aof = bytearray()  # the file's bytes (kept only with AOF on)
        self.aof_ids: dict[bytes, None] = {}  # the jobs a load would bring back
        self.nodes_conf: str | None = None
        self._busy = False
        self._core_at: int | None = None
        self._repl_armed = False
        self.start()

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        now = self.net.now
        rand = random.Random(f"{self.seed}/{self.index}/{self.incarnation}")
        self.core = NodeCore(self.name.decode(), rand.randbytes(20), rand)
        self.core.record_job_events(True)
        self.membership = Membership(self.name, self.port, NODE_TIMEOUT_MS, rand, now)
        self.state = ClusterState(self.core, self.membership, rand)
        self.replication = self.state.replication
        self.acks = self.state.acks
        self.alive = True
        self._core_at = None
        self._repl_armed = False
        if self.nodes_conf is not None:
            self.state.load_nodes(parse_nodes_conf(self.nodes_conf, now))
        self.encoder = RecordEncoder(self.name)
        if self.aof_on:
            data = bytes(self.aof)
            for _ in load(data, self.core, lambda: now, enqueue=False, stats=LoadStats()):
                pass
        self.net.at(now + CRON_MS, self._cron, self.incarnation)
        self.after(None)

    def crash(self) -> None:
        self.nodes_conf = self.membership.describe(skip_flags=NODE_HANDSHAKE)
        self.alive = False
        self.incarnation += 1
        if not self.aof_on:
            self.aof.clear()
            self.aof_ids.clear()
        self.net.node_crashed(self.index)

    def restart(self) -> None:
        assert not self.alive
        self.start()

    # -- client commands ----------------------------------------------------------------------
    def add_job(self, args: AddJobArgs, token: Any) -> tuple[str, Any]:
        """("ok", id) answered now, ("wait", id) answered later by a Reply, or ("err", text)."""
        now = self.net.now
        try:
            if self.core.cluster_size > 1:
                job, answered = self.replication.add_job(args, token, now)
            else:
                job, answered = self.core.add_job(args, now), True
        except CommandError as exc:
            return "err", exc.message
        finally:
            self.after(None)
        return ("ok" if answered else "wait"), job.id

    def get_jobs(self, queue: bytes, count: int) -> list[bytes]:
        args = GetJobArgs([queue], count, nohang=True)
        jobs = self.core.get_job(args, None, self.net.now)
        assert isinstance(jobs, list)
        self.after(None)
        return [job.id for job in jobs]

    def block(self, queue: bytes, count: int, timeout_ms: int) -> list[bytes]:
        """A blocking GETJOB: the jobs at once, or [] and the client waits; what comes
        later (federation) lands in `woken` for the history to take. CommandError
        (-LEAVING) on a leaving node with nothing queued."""
        args = GetJobArgs([queue], count, timeout_ms)
        try:
            jobs = self.core.get_job(args, None, self.net.now)
        finally:
            self.after(None)
        return [job.id for job in jobs] if isinstance(jobs, list) else []

    def ack(self, ids: list[bytes]) -> int:
        if self.core.cluster_size > 1:
            done = self.acks.ack(ids, self.net.now)
        else:
            done = self.core.ack(ids, self.net.now)
        self.after(None)
        return done

    def fast_ack(self, ids: list[bytes]) -> int:
        if self.core.cluster_size > 1:
            done = self.acks.fast_ack(ids, self.net.now)
        else:
            done = self.core.fast_ack(ids, self.net.now)
        self.after(None)
        return done

    @property
    def leaving(self) -> bool:
        return self.alive and self.core.leaving

    def set_leaving(self, leaving: bool) -> None:
        """CLUSTER LEAVING yes|no: the core first, then membership, as cmd_admin does."""
        self.core.set_leaving(leaving)
        self.membership.set_leaving(leaving)
        self.after(None)

    def meet(self, index: int) -> None:
        self.membership.meet(IP, BASE_PORT + index, self.net.now)
        self.after(None)

    # -- inputs from the network and the clock ------------------------------------------------
    def receive(self, message: Message, outbound: bytes | None, via: Link | None) -> None:
        now = self.net.now
        if isinstance(message, (*GOSSIP_CLASSES, Fail)):
            self.membership.receive(message, outbound, IP, IP, now)
            self.after(via)
            return
        held = [job_id for job_id in enqueue_ids(message) if job_id in self.core.jobs]
        if self.state.route_job_message(message, now):
            # Only ENQUEUE queues an externally replicated at-most-once job: the ledger
            # must know whether one reached a holder.
            for job_id in held:
                self.observer.enqueued(self, job_id)
        self.after(None)

    def _cron(self, incarnation: int) -> None:
        if incarnation != self.incarnation or not self.alive:
            return
        now = self.net.now
        self.membership.cron(now)
        self.acks.tick(now)
        self.state.federation.tick(now)
        self.after(None)
        self.net.at(now + CRON_MS, self._cron, incarnation)

    def _replication_tick(self, incarnation: int) -> None:
        if incarnation != self.incarnation or not self.alive:
            return
        self._repl_armed = False
        self.replication.tick(self.net.now)
        self.after(None)

    def _core_tick(self, incarnation: int, deadline: int) -> None:
        if incarnation != self.incarnation or not self.alive or self._core_at != deadline:
            return
        self._core_at = None
        self.core.tick(self.net.now)
        self.after(None)

    # -- effects ------------------------------------------------------------------------------
    def after(self, via: Link | None) -> None:
        """Carry out what the last input left: actions, view, replies, events, timers."""
        if self._busy or not self.alive:
            return  # re-entered from a link break: the loop below takes the new actions
        self._busy = True
        try:
            membership = self.membership
            while membership.actions or membership.pending_sends:
                for action in membership.take_actions():
                    message = getattr(action, "message", None)
                    if type(message) is YourJobs:  # at-most-once jobs leave no copy
                        self.observer.moved(self, message.jobs)
                    elif message is not None:
                        for job_id in enqueue_ids(message):
                            self.observer.enqueue_sent(self, job_id)
                    self.net.execute(self.index, action, via)
            self.state.update_view()
            for effect in self.core.take_replies():
                if isinstance(effect, Reply):
                    self.observer.add_reply(self, effect.token, effect.value)
                elif isinstance(effect, WokenGetJob) and effect.jobs:
                    self.woken.extend(job.id for job in effect.jobs)
            events = self.core.take_job_events()
            if events:
                self._write_aof(events)
                self.observer.job_events(self, events)
            self._arm_timers()
        finally:
            self._busy = False

    def _write_aof(self, events: list[JobEvent]) -> None:
        if not self.aof_on:
            return
        data = b"".join(self.encoder.from_events(events))
        self.aof += data
        for command, argument, _ in read_records(data):
            if command == b"DELJOB":
                self.aof_ids.pop(bytes(argument), None)
            else:
                self.aof_ids[decode_job(argument)[0].id] = None

    def _arm_timers(self) -> None:
        net = self.net
        if self.replication.pending and not self._repl_armed:
            self._repl_armed = True
            net.at(net.now + EXTRA_TARGET_MS, self._replication_tick, self.incarnation)
        deadline = self.core.next_deadline()
        if deadline is not None and (self._core_at is None or deadline < self._core_at):
            self._core_at = deadline
            net.at(deadline, self._core_tick, self.incarnation, deadline)
