"""One node's cluster machinery wired together, and where each bus message goes (sans-IO).

`ClusterState` joins membership, replication, the ack GC, requeue coordination and
federation over one NodeCore, and is the core's ClusterHooks: requeue events go to
requeue, blocked and drained queues to federation, and the node names of the records the
core imports are filtered by replication.
`route_job_message` is the one place that says which part handles which job message.
The asyncio driver
(conveyor.node.cluster) and the simulator (tests/sim) both drive this object, so they
cannot disagree on the wiring.
"""

from __future__ import annotations

import random

from conveyor.cluster.acks import AckGC
from conveyor.cluster.federation import Federation
from conveyor.cluster.membership import Membership
from conveyor.cluster.messages import (
    NODE_LEAVING,
    DelJob,
    Enqueue,
    GotAck,
    GotJob,
    JobIdBatch,
    Message,
    MessageType,
    NeedJobs,
    Pause,
    Queued,
    ReplJob,
    SetAck,
    WillQueue,
    Working,
    YourJobs,
)
from conveyor.cluster.nodes import ClusterNode
from conveyor.cluster.replication import Replication
from conveyor.cluster.requeue import Requeue
from conveyor.core.node import NodeCore
from conveyor.core.queue import PAUSE_ALL


class ClusterState:
    def __init__(self, core: NodeCore, membership: Membership, rand: random.Random) -> None:
        self.core = core
        self.membership = membership
        self.replication = Replication(core, membership, rand)
        self.acks = AckGC(core, membership, self.replication, rand)
        self.requeue = Requeue(core, membership)
        self.will_queue = self.requeue.will_queue
        self.queued = self.requeue.queued
        self.working = self.requeue.working
        self.known_nodes = self.replication.known_names
        self.federation = Federation(core, membership)
        self.blocked = self.federation.blocked
        self.drained = self.federation.drained
        self.jobs_available = self.federation.jobs_available
        core.cluster_hooks = self  # the core's ClusterHooks

    def load_nodes(self, nodes: list[ClusterNode]) -> None:
        """nodes.conf read at start: the nodes, and the core leaving if we were."""
        self.membership.load(nodes)
        if self.membership.myself.flags & NODE_LEAVING:
            self.core.set_leaving(True)

    def route_job_message(self, message: Message, now_ms: int) -> bool:
        """Hand a job message to its part; False when it is not one (or its sender is
        not past its handshake, whose job messages Disque ignores too)."""
        if self.membership.known(message.header.sender) is None:
            return False
        if not isinstance(message, JobIdBatch):
            return self._route(message, now_ms)
        # From a Conveyor node, one sender for all: its entries one by one.
        if message.kind == MessageType.GOTJOB:  # the copies of a pipeline's ADDJOBs
            self.replication.got_copies(message.header.sender, message.entries, now_ms)
        else:
            for single in message.messages():
                self._route(single, now_ms)
        return True

    def _route(self, message: Message, now_ms: int) -> bool:
        if isinstance(message, ReplJob):
            self.replication.receive_repljob(message, now_ms)
        elif isinstance(message, GotJob):
            self.replication.receive_gotjob(message, now_ms)
        elif isinstance(message, DelJob):
            self.replication.receive_deljob(message, now_ms)
        elif isinstance(message, SetAck):
            self.acks.receive_setack(message, now_ms)
        elif isinstance(message, GotAck):
            self.acks.receive_gotack(message, now_ms)
        elif isinstance(message, (Queued, Working)):
            self.requeue.receive_queued(message, now_ms)
        elif isinstance(message, WillQueue):
            self.requeue.receive_willqueue(message, now_ms)
        elif isinstance(message, Enqueue):
            self.requeue.receive_enqueue(message, now_ms)
        elif isinstance(message, NeedJobs):
            self.federation.receive_needjobs(message, now_ms)
        elif isinstance(message, YourJobs):
            self.federation.receive_yourjobs(message, now_ms)
        elif isinstance(message, Pause):
            # PAUSE ... BCAST on the sender: the same flags here (a queue is made only
            # for flags to keep, as Disque does).
            if message.pause_flags or message.qname in self.core.queues:
                self.core.pause(message.qname, message.pause_flags & PAUSE_ALL, now_ms)
        else:
            return False
        return True

    def update_view(self) -> None:
        """Tell the core the cluster's size and reachability when membership changed."""
        membership = self.membership
        if membership.view_dirty:
            membership.view_dirty = False
            self.core.set_cluster_view(membership.size(), len(membership.reachable()))
