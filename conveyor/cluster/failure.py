"""Failure detection: the cron's PINGs, PFAIL and FAIL by majority (Disque's clusterCron),
a mixin of Membership (sans-IO).

Ten times a second: handshakes that took too long are dropped, once a second the node
that answered longest ago (of five drawn) gets a PING, a link whose PING waits too long is
reset, a node silent for `cluster-node-timeout` is flagged PFAIL, and a PFAIL node that a
majority of nodes also report failing (reports valid FAIL_REPORT_VALIDITY node timeouts)
becomes FAIL, broadcast to all.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from conveyor.cluster.actions import Action, ResetLink
from conveyor.cluster.messages import (
    NODE_FAIL,
    NODE_HANDSHAKE,
    NODE_MYSELF,
    NODE_NOADDR,
    NODE_PFAIL,
    Fail,
    Header,
    Meet,
    Message,
    Ping,
    Pong,
)
from conveyor.cluster.nodes import ClusterNode

CRON_HZ = 10  # Disque's clusterCron runs at hz = 10
FAIL_REPORT_VALIDITY = 2  # failure reports last this many node timeouts


class FailureDetection:
    """Membership's cron and FAIL rule (fields and helpers are Membership's)."""

    nodes: dict[bytes, ClusterNode]
    actions: list[Action]
    blacklist: dict[bytes, int]
    iteration: int
    node_timeout_ms: int
    rand: random.Random

    if TYPE_CHECKING:  # Membership's

        def size(self) -> int: ...
        def header(self) -> Header: ...
        def broadcast(self, message: Message) -> None: ...
        def _changed(self, config: bool = True) -> None: ...
        def _delete(self, node: ClusterNode) -> None: ...
        def _ping(self, node: ClusterNode, kind: type[Ping | Meet | Pong], now_ms: int) -> None: ...

    def cron(self, now_ms: int) -> None:
        """Ten times a second: handshake timeouts, PINGs, PFAIL (clusterCron)."""
        self.iteration += 1
        if self.blacklist:  # FORGET entries end after a minute, looked up or not
            self.blacklist = {n: t for n, t in self.blacklist.items() if t >= now_ms}
        timeout = self.node_timeout_ms
        handshake_timeout = max(timeout, 1000)
        for node in list(self.nodes.values()):
            if node.in_handshake and now_ms - node.ctime_ms > handshake_timeout:
                self._delete(node)
        if self.iteration % CRON_HZ == 0:
            self._ping_oldest(now_ms)
        for node in self.nodes.values():
            if node.flags & (NODE_MYSELF | NODE_NOADDR | NODE_HANDSHAKE):
                continue
            if not node.link_up and not node.ping_sent_ms:
                node.ping_sent_ms = now_ms  # cannot connect: unanswered from now on
            waiting = node.ping_sent_ms and node.pong_received_ms < node.ping_sent_ms
            if (
                node.link_up
                and waiting
                and now_ms - node.link_since_ms > timeout
                and now_ms - node.ping_sent_ms > timeout // 2
            ):
                node.link_up = False  # the link looks stuck: a new one
                self.actions.append(ResetLink(node.name))
            if node.link_up and not node.ping_sent_ms:
                if now_ms - node.pong_received_ms > timeout // 2:
                    self._ping(node, Ping, now_ms)
                continue
            if node.ping_sent_ms and now_ms - node.ping_sent_ms > timeout:
                if not node.flags & (NODE_PFAIL | NODE_FAIL):
                    node.flags |= NODE_PFAIL
                    self._changed(config=False)
                self._mark_failing_if_needed(node, now_ms)

    def _ping_oldest(self, now_ms: int) -> None:
        """Once a second: PING the one of five random nodes that answered longest ago."""
        nodes = list(self.nodes.values())
        oldest: ClusterNode | None = None
        for _ in range(5):
            node = self.rand.choice(nodes)
            if not node.link_up or node.ping_sent_ms:
                continue
            if node.flags & (NODE_MYSELF | NODE_HANDSHAKE):
                continue
            if oldest is None or node.pong_received_ms < oldest.pong_received_ms:
                oldest = node
        if oldest is not None:
            self._ping(oldest, Ping, now_ms)

    def _mark_failing_if_needed(self, node: ClusterNode, now_ms: int) -> None:
        if not node.flags & NODE_PFAIL or node.flags & NODE_FAIL:
            return
        oldest = now_ms - self.node_timeout_ms * FAIL_REPORT_VALIDITY
        for reporter in [r for r, at in node.fail_reports.items() if at < oldest]:
            del node.fail_reports[reporter]
        if len(node.fail_reports) + 1 < self.size() // 2 + 1:
            return
        node.flags = (node.flags | NODE_FAIL) & ~NODE_PFAIL
        node.fail_time_ms = now_ms
        self.broadcast(Fail(self.header(), node.name))
        self._changed()
