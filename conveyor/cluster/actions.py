"""What membership asks its driver to do after a call: the actions (sans-IO).

The asyncio driver (conveyor.node.cluster) carries them out on a BusTransport, the tests'
simulated networks on theirs. Names are 40-byte node names; a handshake node's is random
until its first PONG tells the real one (`Rename`).
"""

from __future__ import annotations

from typing import NamedTuple

from conveyor.cluster.messages import Message

__all__ = ["Action", "Connect", "Drop", "Move", "Rename", "Reply", "ResetLink", "Send"]


class Connect(NamedTuple):
    """Keep an outbound link to this node (bus port = port + 10000), reconnecting."""

    name: bytes
    ip: str
    port: int


class Rename(NamedTuple):
    """The peer known as `old` (a handshake name) is now `new`."""

    old: bytes
    new: bytes


class Move(NamedTuple):
    """The node's address changed: reconnect there."""

    name: bytes
    ip: str
    port: int


class ResetLink(NamedTuple):
    """Drop the outbound link and reconnect (it looks stuck)."""

    name: bytes


class Drop(NamedTuple):
    """No outbound link to this node any more (deleted, forgotten, no address)."""

    name: bytes


class Send(NamedTuple):
    """A message on our outbound link to `name` (not sent if that link is down)."""

    name: bytes
    message: Message


class Reply(NamedTuple):
    """A message back on the link the message being handled came on (PONG)."""

    message: Message


Action = Connect | Rename | Move | ResetLink | Drop | Send | Reply
