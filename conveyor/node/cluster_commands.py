"""The cluster's client commands other than ADDJOB: a mixin of `ClusterDriver`.

CLUSTER MEET / FORGET / RESET, CLUSTER LEAVING, ACKJOB and FASTACK, PAUSE ... BCAST and
INFO's cluster section each hand their work to the sans-IO state (membership, acks)
and carry out the actions it leaves at once. ADDJOB, the hot path, stays in
node/cluster.py beside the replication timer it arms.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from conveyor.cluster.messages import Pause
from conveyor.node.connection import now_ms

if TYPE_CHECKING:
    from conveyor.cluster.acks import AckGC
    from conveyor.cluster.link import BusLink
    from conveyor.cluster.membership import Membership
    from conveyor.cluster.replication import Replication
    from conveyor.cluster.transport import BusTransport
    from conveyor.node.server import Server

BUS_PORT_OFFSET = 10000
MAX_CLIENT_PORT = 65535 - BUS_PORT_OFFSET


class ClusterCommands:
    """What the commands need of ClusterDriver (fields it sets)."""

    if TYPE_CHECKING:
        server: Server
        membership: Membership
        replication: Replication
        acks: AckGC
        bus: BusTransport | None
        bus_error: str | None
        messages_sent: int
        messages_received: int

        def _run_actions(self, link: BusLink | None) -> None: ...

    def meet(self, ip_text: str, port: int) -> str | None:
        """CLUSTER MEET: None, or the error text."""
        try:
            address = ipaddress.ip_address(ip_text)
        except ValueError:
            address = None
        # No IPv6 zone (::1%eth0): Disque's inet_pton refuses it, and the bus cannot use it.
        if address is None or getattr(address, "scope_id", None) or not 0 < port <= MAX_CLIENT_PORT:
            return f"Invalid node address specified: {ip_text}:{port}"
        if self.bus is None:
            return f"the cluster bus is not running: {self.bus_error or 'node stopping'}"
        self.membership.meet(str(address), port, now_ms())
        self._run_actions(None)
        return None

    def ack(self, ids: list[bytes]) -> int:
        known = self.acks.ack(ids, self.server.now)
        self._run_actions(None)
        return known

    def fast_ack(self, ids: list[bytes]) -> int:
        freed = self.acks.fast_ack(ids, self.server.now)
        self._run_actions(None)
        return freed

    def client_gone(self, job_ids: list[bytes]) -> None:
        """A client left before its ADDJOBs were answered: forget those jobs (Disque)."""
        now = now_ms()
        for job_id in job_ids:
            self.replication.client_gone(job_id, now)
        self._run_actions(None)

    def broadcast_pause(self, queue: bytes, flags: int) -> None:
        """PAUSE ... BCAST: the queue's pause flags to every node."""
        self.membership.broadcast(Pause(self.membership.header(), queue, flags))
        self._run_actions(None)

    def forget(self, name: bytes) -> None:
        self.membership.forget(name, now_ms())
        self._run_actions(None)

    def reset(self, new_name: bytes | None) -> None:
        self.membership.reset(new_name)
        self._run_actions(None)

    def set_leaving(self, leaving: bool) -> None:
        self.membership.set_leaving(leaving)
        self._run_actions(None)

    def info_text(self) -> str:
        membership = self.membership
        return (
            "cluster_state:ok\r\n"
            f"cluster_known_nodes:{len(membership.nodes)}\r\n"
            f"cluster_reachable_nodes:{len(membership.reachable())}\r\n"
            f"cluster_size:{membership.size()}\r\n"
            f"cluster_stats_messages_sent:{self.messages_sent}\r\n"
            f"cluster_stats_messages_received:{self.messages_received}\r\n"
        )
