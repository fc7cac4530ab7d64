"""The simulated network: a virtual clock, an event queue and TCP-like links (no sockets).

Every node keeps one outbound link per peer, as the bus transport does: messages it
sends go on its own link, and the PONG answering a PING comes back on the link the PING
came on (membership's `Reply` action). Faults, all drawn from the network's seeded
`random.Random`:
- delay: each message takes 1..`max_delay_ms` ms; a link is FIFO (TCP) except that with
  `reorder` probability a message ignores the queue ahead of it (exercises handlers
  that must tolerate reordering);
- loss: as on TCP, a message is lost only with its link: the owner sees the link go
  down (`link_down`), everything in flight on it is dropped, and it reconnects after a
  backoff (100 ms doubling to 1.6 s, as the transport's `Backoff` does, roughly), or
  early when the peer's own messages arrive (at most once per 100 ms, as the transport);
- duplication: with `dup` probability a message is delivered twice;
- partitions: pairs of nodes that cannot talk. A send across a cut, or a delivery that
  finds one, breaks the link; reconnecting fails until the cut heals;
- crashes: a crashed node's links die at once on both sides (the peer's kernel sends RST).

Every timer (membership cron, replication tick, the ack GC, the core's own deadline) is
an event on the virtual clock, so a run is a pure function of its seed. Messages go
through the bus codec (`encode`/`decode`) when `wire` is set, to exercise the format.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from conveyor.cluster import codec
from conveyor.cluster.actions import Action, Connect, Drop, Move, Rename, Reply, ResetLink, Send
from conveyor.cluster.messages import Message
from conveyor.cluster.transport import WAKE_INTERVAL_S

if TYPE_CHECKING:
    from tests.sim.node import SimNode

T0 = 1_700_000_000_000  # the virtual clock starts at a plausible unix time in ms
BASE_PORT = 7000
IP = "127.0.0.1"
WAKE_INTERVAL_MS = round(WAKE_INTERVAL_S * 1000)


@dataclass(slots=True, eq=False)
class Link:
    """`owner`'s outbound link to `target`, known to the owner's membership as `key`."""

    owner: int
    key: bytes
    target: int
    epoch: int = 0  # bumped on every break: what was in flight on the old one is lost
    up: bool = False
    target_incarnation: int = -1
    failures: int = 0
    last_out: int = 0  # arrival time of the last message each way (FIFO)
    last_back: int = 0
    closed: bool = False
    tried_at: int = -WAKE_INTERVAL_MS  # virtual time of the last connect attempt


@dataclass(slots=True)
class Faults:
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    max_delay_ms: int = 5


class SimNetwork:
    def __init__(self, rand: random.Random, wire: bool = True) -> None:
        self.rand = rand
        self.wire = wire
        self.now = T0
        self.nodes: list[SimNode] = []
        self.faults = Faults()
        self.cut: set[frozenset[int]] = set()
        self.links: list[dict[bytes, Link]] = []
        self._queue: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self.messages = 0
        self.link_breaks = 0
        # Every delivery's time and bytes: two runs of a seed must agree to the byte.
        self.digest = hashlib.sha1()

    def add_node(self, node: SimNode) -> None:
        self.nodes.append(node)
        self.links.append({})

    # -- the clock ----------------------------------------------------------------------------
    def at(self, when: int, callback: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (max(when, self.now), self._seq, callback, args))

    def run_until(self, until: int) -> None:
        """Deliver every event due up to `until`, in time order (ties: scheduling order)."""
        queue = self._queue
        while queue and queue[0][0] <= until:
            when, _, callback, args = heapq.heappop(queue)
            self.now = when
            callback(*args)
        self.now = max(self.now, until)

    def advance(self, ms: int) -> None:
        self.run_until(self.now + ms)

    # -- topology -----------------------------------------------------------------------------
    def blocked(self, a: int, b: int) -> bool:
        return not self.nodes[a].alive or not self.nodes[b].alive or frozenset((a, b)) in self.cut

    def node_crashed(self, index: int) -> None:
        """Its own links vanish; the links others keep to it break at once."""
        for link in self.links[index].values():
            link.closed = True
            link.epoch += 1
        self.links[index] = {}
        for links in self.links:
            for link in list(links.values()):
                if link.target == index and link.up:
                    self._break(link)

    # -- membership's actions -----------------------------------------------------------------
    def execute(self, owner: int, action: Action, via: Link | None) -> None:
        """Carry out one action of node `owner`; `via`: the link the message being handled
        came in on (where a `Reply` goes back)."""
        links = self.links[owner]
        if isinstance(action, Send):
            link = links.get(action.name)
            if link is not None and link.up:
                self._send(link, action.message, back=False)
        elif isinstance(action, Reply):
            if via is not None and via.up:
                self._send(via, action.message, back=True)
        elif isinstance(action, Connect | Move):
            link = links.get(action.name)
            target = action.port - BASE_PORT
            if link is None:
                link = links[action.name] = Link(owner, action.name, target)
            elif link.up:
                self._break(link, notify=False)
            link.target = target
            self._schedule_connect(link, 1)
        elif isinstance(action, Rename):
            link = links.pop(action.old, None)
            if link is not None:
                old = links.pop(action.new, None)
                if old is not None:
                    self._close(old)
                link.key = action.new
                links[action.new] = link
        elif isinstance(action, ResetLink):
            link = links.get(action.name)
            if link is not None and link.up:
                self._break(link)
        elif isinstance(action, Drop):
            link = links.pop(action.name, None)
            if link is not None:
                self._close(link)

    # -- links --------------------------------------------------------------------------------
    def _schedule_connect(self, link: Link, delay: int) -> None:
        self.at(self.now + delay, self._connect, link, link.epoch)

    def _connect(self, link: Link, epoch: int) -> None:
        if link.closed or link.epoch != epoch or link.up:
            return
        link.tried_at = self.now
        if self.blocked(link.owner, link.target):
            link.failures += 1
            link.epoch += 1
            self._schedule_connect(link, self._backoff(link))
            return
        link.up = True
        link.failures = 0
        link.target_incarnation = self.nodes[link.target].incarnation
        owner = self.nodes[link.owner]
        owner.membership.link_up(link.key, self.now)
        owner.after(None)

    def _wake(self, owner: int, sender: bytes) -> None:
        """`sender` spoke on its own link: `owner`'s link to it, if waiting out a backoff,
        connects now (the transport's `OutboundPeer.wake`, at most once per 100 ms)."""
        link = self.links[owner].get(sender)
        if link is None or link.up or link.closed:
            return
        if self.now - link.tried_at < WAKE_INTERVAL_MS:
            return
        link.tried_at = self.now
        link.epoch += 1  # the connect the backoff scheduled is superseded
        self._schedule_connect(link, 1)

    def _backoff(self, link: Link) -> int:
        base = min(100 << min(link.failures, 4), 1600)
        return base // 2 + self.rand.randrange(base)

    def _break(self, link: Link, notify: bool = True) -> None:
        """The link died (loss, RST, reset): the owner is told and reconnects later."""
        self.link_breaks += 1
        link.up = False
        link.epoch += 1
        link.failures += 1
        owner = self.nodes[link.owner]
        if notify and owner.alive:
            owner.membership.link_down(link.key, self.now)
            owner.after(None)
        if not link.closed:
            self._schedule_connect(link, self._backoff(link))

    def _close(self, link: Link) -> None:
        link.closed = True
        link.up = False
        link.epoch += 1

    def _send(self, link: Link, message: Message, back: bool) -> None:
        src, dst = (link.target, link.owner) if back else (link.owner, link.target)
        faults = self.faults
        rand = self.rand
        if self.blocked(src, dst) or (faults.loss and rand.random() < faults.loss):
            self._break(link)
            return
        self.messages += 1
        payload: Any = codec.encode(message) if self.wire else message
        arrival = self.now + 1 + rand.randrange(faults.max_delay_ms)
        last = link.last_back if back else link.last_out
        if not (faults.reorder and rand.random() < faults.reorder):
            arrival = max(arrival, last)
        if back:
            link.last_back = max(arrival, last)
        else:
            link.last_out = max(arrival, last)
        copies = 2 if faults.dup and rand.random() < faults.dup else 1
        for copy in range(copies):
            when = arrival + copy * rand.randrange(1, 20)
            self.at(when, self._arrive, link, link.epoch, payload, back)

    def _arrive(self, link: Link, epoch: int, payload: Any, back: bool) -> None:
        if link.epoch != epoch or not link.up:
            return  # lost with the link it was on
        src, dst = (link.target, link.owner) if back else (link.owner, link.target)
        if self.blocked(src, dst) or self.nodes[link.target].incarnation != link.target_incarnation:
            self._break(link)
            return
        if self.wire:
            self.digest.update(b"%d:%d:" % (self.now, dst) + payload)
        message = codec.decode(payload) if self.wire else payload
        if back:  # a PONG on our own outbound link
            self.nodes[dst].receive(message, link.key, None)
        else:
            self._wake(dst, message.header.sender)
            self.nodes[dst].receive(message, None, link)
