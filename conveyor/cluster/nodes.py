"""What one node knows of every node of its cluster: the table, its text forms.

`ClusterNode` is one entry (cluster.h `clusterNode`: name, address, flags, ping times,
failure reports). The text forms are Disque's: `describe` writes a `CLUSTER NODES` line,
which is also the nodes.conf line (clusterGenNodeDescription), `parse_nodes_conf` reads
such a file back (clusterLoadConfig), and `hello_priority` ranks a node for HELLO.

Pure data: no sockets, no clock (times are passed in, in unix ms).
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field

from conveyor.cluster.messages import (
    NODE_FAIL,
    NODE_HANDSHAKE,
    NODE_LEAVING,
    NODE_MEET,
    NODE_MYSELF,
    NODE_NOADDR,
    NODE_PFAIL,
    GossipEntry,
)

NAME_LEN = 40
_NAME_RE = re.compile(rb"[0-9a-f]{40}")
_MASK32 = 0xFFFFFFFF  # gossip times are the low 32 bits of unix ms

# CLUSTER NODES flag words, in the order Disque writes them (representClusterNodeFlags).
FLAG_WORDS: tuple[tuple[int, str], ...] = (
    (NODE_MYSELF, "myself"),
    (NODE_PFAIL, "fail?"),
    (NODE_FAIL, "fail"),
    (NODE_HANDSHAKE, "handshake"),
    (NODE_NOADDR, "noaddr"),
    (NODE_LEAVING, "leaving"),
)
_FLAG_OF_WORD = {word: flag for flag, word in FLAG_WORDS} | {"noflags": 0}

# HELLO priorities: clients prefer the lowest.
PRIORITY_OK = 1
PRIORITY_NO_LINK = 5
PRIORITY_PFAIL = 10
PRIORITY_FAIL = 100


def random_name() -> bytes:
    """A fresh 40-hex node name (a handshake node's until it tells its own)."""
    return os.urandom(NAME_LEN // 2).hex().encode()


def valid_name(name: bytes) -> bool:
    return _NAME_RE.fullmatch(name) is not None


@dataclass(slots=True, eq=False)
class ClusterNode:
    name: bytes
    ip: str
    port: int
    flags: int = 0
    ctime_ms: int = 0  # when this entry was made (handshake timeout)
    ping_sent_ms: int = 0  # 0: no PING waits for its PONG
    pong_received_ms: int = 0
    fail_time_ms: int = 0
    link_up: bool = False  # our outbound link to it is connected
    link_since_ms: int = 0
    batches: bool = False  # a Conveyor node: several jobs per REPLJOB/GOTJOB (CONVEYOR_MARK)
    # Who reported it PFAIL/FAIL in gossip, and when (clusterNodeFailReport).
    fail_reports: dict[bytes, int] = field(default_factory=dict)

    @property
    def in_handshake(self) -> bool:
        return bool(self.flags & NODE_HANDSHAKE)

    @property
    def is_myself(self) -> bool:
        return bool(self.flags & NODE_MYSELF)

    def flag_text(self) -> str:
        words = [word for flag, word in FLAG_WORDS if self.flags & flag]
        return ",".join(words) if words else "noflags"

    def describe(self) -> str:
        """The CLUSTER NODES / nodes.conf line, without its newline."""
        connected = self.link_up or self.is_myself
        return (
            f"{self.name.decode()} {self.ip}:{self.port} {self.flag_text()} "
            f"{self.ping_sent_ms} {self.pong_received_ms} "
            f"{'connected' if connected else 'disconnected'}"
        )

    def hello_priority(self) -> int:
        # A noaddr name (a node back under a new name) has no address to connect to:
        # Disque ranks it 5, before failing nodes; a client should never pick it.
        if self.flags & (NODE_FAIL | NODE_LEAVING | NODE_NOADDR):
            return PRIORITY_FAIL
        if self.flags & NODE_PFAIL:
            return PRIORITY_PFAIL
        if not self.link_up and not self.is_myself:
            return PRIORITY_NO_LINK
        return PRIORITY_OK


class NodesConfError(ValueError):
    """nodes.conf cannot be read back: which line, and why."""


def parse_nodes_conf(text: str, now_ms: int) -> list[ClusterNode]:
    """The nodes a nodes.conf lists, `myself` among them (NodesConfError otherwise).

    As Disque: blank lines and a `vars` line are skipped; ping/pong times only say
    whether one was pending (they become now); MEET is never kept, so nodes learned
    before a restart are PINGed, not MEETed, again.
    """
    nodes: dict[bytes, ClusterNode] = {}
    myself = 0
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].lower() == "vars":
            continue
        if len(words) != 6:
            raise NodesConfError(f"line {number}: {len(words)} fields, 6 expected")
        name = words[0].encode()
        if not valid_name(name):
            raise NodesConfError(f"line {number}: bad node name {words[0]!r}")
        ip, colon, port_text = words[1].rpartition(":")
        # isdigit() alone takes "²", which int() refuses: a traceback at start-up.
        digits = port_text.isascii() and port_text.isdigit()
        if not colon or not digits or int(port_text) > 65535:
            raise NodesConfError(f"line {number}: bad address {words[1]!r}")
        flags = 0
        for word in words[2].lower().split(","):
            if word not in _FLAG_OF_WORD:
                raise NodesConfError(f"line {number}: unknown flag {word!r}")
            flags |= _FLAG_OF_WORD[word]
        node = ClusterNode(name, ip, int(port_text), flags & ~NODE_MEET, ctime_ms=now_ms)
        if flags & NODE_FAIL:
            node.fail_time_ms = now_ms
        if words[3] != "0":
            node.ping_sent_ms = now_ms
        if words[4] != "0":
            node.pong_received_ms = now_ms
        myself += bool(flags & NODE_MYSELF)
        nodes[name] = node
    if myself != 1:
        raise NodesConfError(f"{myself} nodes flagged myself, 1 expected")
    return list(nodes.values())


def gossip_sample(
    nodes: list[ClusterNode], myself: ClusterNode, rand: random.Random
) -> tuple[GossipEntry, ...]:
    """The gossip section of a PING: about a tenth of the nodes (at least 3), failing
    ones looked for first, as Disque's clusterSendPing picks them."""
    fresh = len(nodes) - 2
    wanted = min(max(3, len(nodes) // 10), fresh)
    chosen: dict[bytes, GossipEntry] = {}
    tries = wanted * 3
    while fresh > 0 and len(chosen) < wanted and tries > 0:
        tries -= 1
        node = rand.choice(nodes)
        if node is myself or node.name in chosen:
            continue
        if tries >= wanted * 2 and not node.flags & (NODE_PFAIL | NODE_FAIL):
            continue  # the first third looks for failing nodes only
        # Disque also skips nodes without a link, but its link exists while a connect
        # is in flight (every 100 ms); ours waits out a backoff, and a node that is
        # down must still be gossiped: that is how failure reports travel.
        if node.flags & (NODE_HANDSHAKE | NODE_NOADDR):
            fresh -= 1
            continue
        fresh -= 1
        chosen[node.name] = GossipEntry(
            node.name,
            node.ping_sent_ms & _MASK32,
            node.pong_received_ms & _MASK32,
            node.ip.encode(),
            node.port,
            node.flags,
        )
    return tuple(chosen.values())
