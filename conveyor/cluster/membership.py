"""Membership and failure detection: who is in the cluster and who answers (sans-IO).

The part of Disque's cluster.c that handles PING, PONG, MEET and FAIL, as a state
machine: messages, link events and the 10 Hz cron come in with the time (unix ms); what
the driver must do comes back as a list of actions (send a message, open, rename, move or
drop the link to a peer). The asyncio driver (conveyor.node.cluster) carries them out on
a BusTransport; the simulator on its simulated network. No socket, no clock, no asyncio;
randomness comes from the `random.Random` given.

The rules, as Disque 1.0-rc1 has them (see also the transport's docstring for links):
- CLUSTER MEET adds a HANDSHAKE node with a random name; its first PONG (on our outbound
  link) renames it to the sender's name. A MEET from an unknown sender adds the sender
  as a HANDSHAKE node that we then PING. Handshakes that do not finish in
  max(node timeout, 1 s) are dropped.
- Gossip: every PING/PONG/MEET carries max(3, nodes/10) entries about other known
  nodes, failing ones first; an unknown node in the gossip of a known sender starts a
  handshake (meet one node, learn all), unless it was forgotten in the last minute.
- A node whose PING waits for its PONG longer than the node timeout is PFAIL. Gossip
  entries flagging it PFAIL/FAIL are failure reports, valid for twice the timeout; with
  reports from a majority (size/2 + 1, counting ourselves) it becomes FAIL, and FAIL is
  broadcast. FAIL (and PFAIL) clear as soon as the node answers a PING again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from conveyor.cluster.actions import (
    Action,
    Connect,
    Drop,
    Move,
    Rename,
    Reply,
    Send,
)
from conveyor.cluster.batching import coalesce
from conveyor.cluster.failure import FailureDetection
from conveyor.cluster.messages import (
    CLUSTER_OK,
    CONVEYOR_MARK,
    NODE_FAIL,
    NODE_HANDSHAKE,
    NODE_LEAVING,
    NODE_MEET,
    NODE_MYSELF,
    NODE_NOADDR,
    NODE_PFAIL,
    Fail,
    GossipEntry,
    Header,
    Meet,
    Message,
    Ping,
    Pong,
)
from conveyor.cluster.nodes import ClusterNode, gossip_sample, random_name, valid_name

BLACKLIST_TTL_MS = 60_000  # a forgotten node is not re-added from gossip for this long
# A NOADDR node is the old identity of a node that came back at its address under a new
# name (its nodes.conf lost): kept until FORGET, as Disque keeps it, but no longer counted
# in the cluster's size nor reachable (Disque counts it in both, so every such restart
# raised the FAIL majority and the default REPLICATE for good, and ADDJOB sent copies to
# nobody). Should that node talk to us again, its PING gives it an address back.
_GHOST = NODE_HANDSHAKE | NODE_NOADDR
_UNREACHABLE = NODE_MYSELF | _GHOST | NODE_LEAVING | NODE_PFAIL | NODE_FAIL


class Membership(FailureDetection):
    def __init__(
        self, name: bytes, port: int, node_timeout_ms: int, rand: random.Random, now_ms: int
    ) -> None:
        self.myself = ClusterNode(name, "", port, NODE_MYSELF, ctime_ms=now_ms)
        self.nodes: dict[bytes, ClusterNode] = {name: self.myself}
        self.node_timeout_ms = node_timeout_ms
        self.rand = rand
        self.blacklist: dict[bytes, int] = {}  # name -> until when (ms)
        self.iteration = 0
        self.config_dirty = False  # nodes.conf should be written
        self.view_dirty = True  # size or reachability may have changed
        self.epoch = 0  # counts changes of the node set or its flags: for caches of the view
        self._reachable: list[ClusterNode] | None = None  # reachable()'s, until a change
        self.actions: list[Action] = []
        # Parts whose sends are made once per batch, when the actions are taken (a
        # federation push of every job queued in the batch): one-shot, in order.
        self.pending_sends: list[Callable[[], None]] = []
        # Runs on the actions taken, before they are merged: messages gathered in place
        # are completed there (replication's CopyOutbox.seal).
        self.before_take: Callable[[list[Action]], None] | None = None
        self._header: Header | None = None

    # -- the view the rest of the node reads ----------------------------------------------
    @property
    def name(self) -> bytes:
        return self.myself.name

    def size(self) -> int:
        """Nodes in the cluster, ourselves included (handshakes are not in it yet, nor
        the NOADDR identities left by nodes that came back under a new name)."""
        return len(self.members())

    def members(self) -> list[bytes]:
        """The names of the cluster's nodes, as size() counts them: those that can answer
        a message (a dummy ack waits for each of them)."""
        return [name for name, node in self.nodes.items() if not node.flags & _GHOST]

    def reachable(self) -> list[ClusterNode]:
        """Other nodes believed up and not leaving: replication targets. Kept until the
        view changes (every ADDJOB asks); not to be modified by the caller."""
        reachable = self._reachable
        if reachable is None:
            reachable = self._reachable = [
                node for node in self.nodes.values() if not node.flags & _UNREACHABLE
            ]
        return reachable

    def known(self, name: bytes) -> ClusterNode | None:
        """A node that may send us job messages: known, handshake done."""
        node = self.nodes.get(name)
        if node is None or node.flags & NODE_HANDSHAKE:
            return None
        return node

    def describe(self, skip_flags: int = 0) -> str:
        lines = [n.describe() for n in self.nodes.values() if not n.flags & skip_flags]
        return "".join(line + "\n" for line in lines)

    def take_actions(self) -> list[Action]:
        """What to carry out, jobs sent to another Conveyor node merged (batching.py)."""
        if self.pending_sends:
            pending, self.pending_sends = self.pending_sends, []
            for make_sends in pending:
                make_sends()
        actions, self.actions = self.actions, []
        if self.before_take is not None:
            self.before_take(actions)
        return coalesce(actions, self.takes_batches) if len(actions) > 1 else actions

    def takes_batches(self, name: bytes) -> bool:
        node = self.nodes.get(name)
        return node is not None and node.batches

    def _changed(self, config: bool = True) -> None:
        self.epoch += 1
        self.view_dirty = True
        self._reachable = None
        self.config_dirty = self.config_dirty or config

    # -- commands -------------------------------------------------------------------------
    def load(self, nodes: list[ClusterNode]) -> None:
        """Nodes from nodes.conf (parse_nodes_conf): connect to each again. Our own line
        gives our address and whether we are leaving (kept across restarts, as Disque)."""
        for node in nodes:
            if node.flags & NODE_MYSELF:
                self.myself.ip = node.ip
                self.myself.flags |= node.flags & NODE_LEAVING
                continue
            self.nodes[node.name] = node
            if not node.flags & NODE_NOADDR:
                self.actions.append(Connect(node.name, node.ip, node.port))
        self._changed(config=False)

    def meet(
        self, ip: str, port: int, now_ms: int, flags: int = NODE_HANDSHAKE | NODE_MEET
    ) -> bool:
        """Start a handshake with ip:port (False: one is already in progress)."""
        for node in self.nodes.values():
            if node.flags & NODE_HANDSHAKE and node.ip == ip and node.port == port:
                return False
        node = ClusterNode(random_name(), ip, port, flags, ctime_ms=now_ms)
        self.nodes[node.name] = node
        self.actions.append(Connect(node.name, ip, port))
        self._changed()
        return True

    def forget(self, name: bytes, now_ms: int) -> None:
        self._delete(self.nodes[name])
        self.blacklist[name] = now_ms + BLACKLIST_TTL_MS

    def reset(self, new_name: bytes | None) -> None:
        """CLUSTER RESET: forget every other node; HARD also takes a new name."""
        for node in [node for node in self.nodes.values() if node is not self.myself]:
            self._delete(node)
        self.blacklist.clear()
        if new_name is not None:
            del self.nodes[self.myself.name]
            self.myself.name = new_name
            self.nodes[new_name] = self.myself
        self._changed()

    def set_leaving(self, leaving: bool) -> None:
        before = self.myself.flags
        if leaving:
            self.myself.flags |= NODE_LEAVING
        else:
            self.myself.flags &= ~NODE_LEAVING
        self._changed()
        if self.myself.flags != before:
            # Every header carries the flag; a PONG to all tells them now, not at the
            # next PING, so their HELLO ranks this node 100 at once (Disque waits).
            gossip = gossip_sample(list(self.nodes.values()), self.myself, self.rand)
            self.broadcast(Pong(self.header(), gossip))

    def _delete(self, node: ClusterNode) -> None:
        del self.nodes[node.name]
        for other in self.nodes.values():
            other.fail_reports.pop(node.name, None)
        self.actions.append(Drop(node.name))
        self._changed()

    # -- links ----------------------------------------------------------------------------
    def link_up(self, name: bytes, now_ms: int) -> None:
        """Our outbound link to `name` connected: MEET or PING first on it."""
        node = self.nodes.get(name)
        if node is None:
            return
        node.link_up = True
        node.link_since_ms = now_ms
        pending = node.ping_sent_ms
        kind = Meet if node.flags & NODE_MEET else Ping
        self._ping(node, kind, now_ms)
        if pending:  # a PING still unanswered on the old link keeps its age
            node.ping_sent_ms = pending
        node.flags &= ~NODE_MEET
        self._changed(config=False)

    def link_down(self, name: bytes, now_ms: int) -> None:
        node = self.nodes.get(name)
        if node is None:
            return
        node.link_up = False
        if node.ping_sent_ms == 0:  # unreachable counts from now towards PFAIL
            node.ping_sent_ms = now_ms
        self._changed(config=False)

    # -- messages -------------------------------------------------------------------------
    def header(self) -> Header:
        # Every message carries it: made again only when the name or our flags change.
        myself = self.myself
        header = self._header
        if header is None or header.sender != myself.name or header.flags != myself.flags:
            header = self._header = Header(
                myself.name, myself.port, myself.flags, CLUSTER_OK, notused0=CONVEYOR_MARK
            )
        return header

    def _ping(self, node: ClusterNode, kind: type[Ping | Meet | Pong], now_ms: int) -> None:
        gossip = gossip_sample(list(self.nodes.values()), self.myself, self.rand)
        message = kind(self.header(), gossip)
        if kind is not Pong:
            if kind is Ping:
                node.ping_sent_ms = now_ms
            self.actions.append(Send(node.name, message))
        else:
            self.actions.append(Reply(message))

    def receive(
        self,
        message: Message,
        outbound: bytes | None,
        remote_ip: str,
        local_ip: str,
        now_ms: int,
    ) -> None:
        """A PING/PONG/MEET/FAIL read on a link: `outbound` names the peer whose outbound
        link it came on (None: an inbound link); `remote_ip`/`local_ip` are that socket's."""
        if isinstance(message, Fail):
            self._receive_fail(message, now_ms)
        elif isinstance(message, (Ping, Pong, Meet)):
            self._receive_gossip(message, outbound, remote_ip, local_ip, now_ms)

    def _receive_fail(self, message: Fail, now_ms: int) -> None:
        if self.known(message.header.sender) is None:
            return
        failing = self.nodes.get(message.nodename)
        if failing is not None and not failing.flags & (NODE_FAIL | NODE_MYSELF):
            failing.flags = (failing.flags | NODE_FAIL) & ~NODE_PFAIL
            failing.fail_time_ms = now_ms
            self._changed()

    def _receive_gossip(
        self,
        message: Ping | Pong | Meet,
        outbound: bytes | None,
        remote_ip: str,
        local_ip: str,
        now_ms: int,
    ) -> None:
        header = message.header
        sender = self.nodes.get(header.sender)
        if sender is self.myself:
            return  # our own name: a link to ourselves, or a clash; nothing to learn
        if not isinstance(message, Pong):
            is_meet = isinstance(message, Meet)
            if (is_meet or not self.myself.ip) and local_ip and local_ip != self.myself.ip:
                self.myself.ip = local_ip  # how peers reach us, learned from their MEET
                self._changed()
            if sender is None and is_meet:
                # One handshake per address, however many MEETs (each was a node and a
                # connection until the handshake timeout); PINGed, not MEETed (Disque).
                self.meet(remote_ip, header.port, now_ms, NODE_HANDSHAKE)
            self._ping(self.myself, Pong, now_ms)
        if outbound is not None:
            link_node = self.nodes.get(outbound)
            if link_node is not None:
                sender = self._check_link_node(link_node, sender, header, remote_ip)
                if sender is None and link_node.name not in self.nodes:
                    return
                if link_node.flags & NODE_NOADDR:
                    return
                if isinstance(message, Pong):
                    self._pong(link_node, now_ms)
        elif sender is not None and isinstance(message, Ping) and not sender.in_handshake:
            self._update_address(sender, remote_ip, header.port)
        if sender is None or sender.in_handshake:
            return
        sender.batches = header.notused0 == CONVEYOR_MARK
        leaving = header.flags & NODE_LEAVING
        if sender.flags & NODE_LEAVING != leaving:
            sender.flags = (sender.flags & ~NODE_LEAVING) | leaving
            self._changed()
        self._process_gossip(sender, message.gossip, now_ms)

    def _check_link_node(
        self, link_node: ClusterNode, sender: ClusterNode | None, header: Header, remote_ip: str
    ) -> ClusterNode | None:
        """The node our outbound link belongs to answered: finish its handshake, or find
        that someone else answers at that address. Returns the sender as now known."""
        if link_node.in_handshake:
            if sender is not None:  # we knew it already, under its real name
                self._update_address(sender, remote_ip, header.port)
                self._delete(link_node)
                return None
            if not valid_name(header.sender):
                # Every node names itself with 40 hex digits; any other bytes would make
                # CLUSTER NODES and nodes.conf unwritable or unreadable: not a node.
                self._delete(link_node)
                return None
            del self.nodes[link_node.name]
            self.actions.append(Rename(link_node.name, header.sender))
            link_node.name = header.sender
            link_node.flags &= ~NODE_HANDSHAKE
            self.nodes[header.sender] = link_node
            self._changed()
            return link_node
        if link_node.name != header.sender:
            link_node.flags |= NODE_NOADDR
            link_node.ip, link_node.port, link_node.link_up = "", 0, False
            self.actions.append(Drop(link_node.name))
            self._changed()
        return sender

    def _update_address(self, node: ClusterNode, ip: str, port: int) -> None:
        if node.ip == ip and node.port == port:
            return
        was_noaddr = node.flags & NODE_NOADDR
        node.ip, node.port = ip, port
        node.flags &= ~NODE_NOADDR
        node.link_up = False
        self.actions.append((Connect if was_noaddr else Move)(node.name, ip, port))
        self._changed()

    def _pong(self, node: ClusterNode, now_ms: int) -> None:
        node.pong_received_ms = now_ms
        node.ping_sent_ms = 0
        if node.flags & (NODE_PFAIL | NODE_FAIL):
            node.flags &= ~(NODE_PFAIL | NODE_FAIL)
            self._changed()

    def _process_gossip(
        self, sender: ClusterNode, gossip: tuple[GossipEntry, ...], now_ms: int
    ) -> None:
        for entry in gossip:
            node = self.nodes.get(entry.nodename)
            if node is None:
                if not entry.flags & NODE_NOADDR and not self._blacklisted(entry.nodename, now_ms):
                    self.meet(entry.address, entry.port, now_ms)
                continue
            if node is not self.myself:
                if entry.flags & (NODE_FAIL | NODE_PFAIL):
                    node.fail_reports[sender.name] = now_ms
                    self._mark_failing_if_needed(node, now_ms)
                else:
                    node.fail_reports.pop(sender.name, None)
            if node.flags & (NODE_FAIL | NODE_PFAIL) and (
                node.ip != entry.address or node.port != entry.port
            ):
                self.meet(entry.address, entry.port, now_ms)

    def _blacklisted(self, name: bytes, now_ms: int) -> bool:
        until = self.blacklist.get(name)
        if until is not None and until < now_ms:
            del self.blacklist[name]
            return False
        return until is not None

    def send_to(self, names: Iterable[bytes], message: Message) -> None:
        """Queue `message` for each of these nodes that is known (past its handshake),
        ourselves excepted: how every job message to a job's holders goes out."""
        me = self.myself.name
        for name in names:
            if name != me and self.known(name) is not None:
                self.actions.append(Send(name, message))

    def broadcast(self, message: Message) -> None:
        """To every node with a link, handshakes excepted (clusterBroadcastMessage)."""
        for node in self.nodes.values():
            if node.link_up and not node.flags & (NODE_MYSELF | NODE_HANDSHAKE):
                self.actions.append(Send(node.name, message))
