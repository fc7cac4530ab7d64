"""First-claim-wins on a node, with only Disque commands: the primitive under cron ticks,
blocking params and relay idempotency keys.

A claim ADDJOBs a marker job to a claim queue that nobody consumes, then QPEEKs that queue:
the claimant whose marker is the oldest job won. A node files jobs in creation-time order
from a clock that never goes backwards, so once a marker is at the head no later marker can
get in front of it; every claimant that peeks sees the same head until the winner removes
its marker (releasing a lock) or the marker's TTL runs out. Losers remove their markers.

Holds for claimants that talk to the same node (every worker configured with the same node
list reaches the same first node). Markers live in memory: a node restart forgets them.
"""

from __future__ import annotations

import contextlib
import hashlib

from conveyor.client import Client, ConveyorError

CLAIM_PREFIX = "conveyor.claim."


def claim_queue(*parts: str) -> str:
    """A short, safe queue name for a claim key made of arbitrary strings."""
    digest = hashlib.sha1("\x00".join(parts).encode()).hexdigest()[:24]
    return f"{CLAIM_PREFIX}{parts[0]}.{digest}"


def try_claim(client: Client, queue: str, owner: str, ttl: int) -> str | None:
    """The marker's job ID if this claimant won `queue`, else None (its marker removed)."""
    marker = client.add_job(queue, owner.encode(), ttl=max(ttl, 2), retry=max(ttl, 2) - 1)
    head = client.qpeek(queue, 1)
    if head and head[0].id == marker:
        return marker
    with contextlib.suppress(ConveyorError):
        client.ack(marker)
    return None


def claim_holder(client: Client, queue: str) -> str | None:
    """The body of the winning marker, if any."""
    head = client.qpeek(queue, 1)
    return head[0].body.decode("utf-8", "replace") if head else None


def release(client: Client, marker: str) -> None:
    with contextlib.suppress(ConveyorError):
        client.ack(marker)
