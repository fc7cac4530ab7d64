"""Which node to talk to (seed 000's client section), shared by `Client` and `AsyncClient`.

No I/O: the twins ask these questions and do the connecting.
- First contact: the configured nodes in random order (clients spread over the cluster,
  and a dead first entry does not cost every client a timeout), then HELLO; if HELLO
  ranks another node better than the one answering (priority 1 against 5, 10 or 100),
  the client moves there.
- A job ID names the node that made it (`D-<first 8 hex of its ID>-...`): ACKJOB, NACK,
  WORKING and SHOW go to that node when HELLO listed it, where the job is known for sure.
  A maker that could not be reached is skipped for a while (PeerHealth), and HELLO is
  asked again so the client learns what the cluster knows about it.
- A consumer whose jobs mostly come from one other node (federation moved them) moves to
  that node: MOVE_AFTER jobs seen, MOVE_SHARE of them from there.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from conveyor.client._address import Address
from conveyor.client._commands import Call
from conveyor.client.errors import ConnectionError
from conveyor.client.job import Hello, NodeInfo

MOVE_AFTER = 64  # jobs counted before a consumer considers moving
MOVE_SHARE = 0.75  # share of them made by one other node that makes it move
# A job maker that failed is skipped this long, doubled at each failure in a row, up to
# the cap: long enough that a dead or hung node costs one connect or timeout now and then,
# short enough that a restarted one is used again soon (acks elsewhere work meanwhile).
PEER_DOWN_S = 2.0
PEER_DOWN_MAX_S = 30.0
HELLO_REFRESH_S = 1.0  # at most one HELLO asked again after peer failures per this long

T = TypeVar("T")


@dataclass(slots=True)
class Write(Generic[T]):
    """A command never sent twice (ADDJOB), and whether it may have reached the node:
    `sent` is set just before its first byte goes out, so a failure before (no node
    reachable, a connect refused) is known to have sent nothing."""

    call: Call[T]
    sent: bool = False


def write_failed(exc: ConnectionError, write: Write[T]) -> ConnectionError:
    """The error of an ADDJOB whose reply never came. Sent (whole or in part), the job
    may exist (a timeout after the node added it) or not: it is never sent again. Not
    sent, the caller may safely send it again, and the error says so."""
    if write.sent:
        text = f"{exc} (the ADDJOB may or may not have been added: it is not sent again)"
    else:
        text = f"{exc} (the ADDJOB was not sent)"
    error = type(exc)(text)
    error.address = exc.address
    return error


def shuffled(addresses: list[Address], rand: random.Random) -> list[Address]:
    order = list(addresses)
    rand.shuffle(order)
    return order


def better_node(hello: Hello, connected: Address) -> Address | None:
    """A node HELLO ranks better than the one answering it, or None."""
    mine = next((n for n in hello.nodes if n.id == hello.node_id), None)
    best = min(hello.nodes, key=lambda n: n.priority, default=None)
    if best is None or mine is None or best.priority >= mine.priority:
        return None
    address = (best.host, best.port)
    return None if address == connected else address


def owner_of(job_id: str, hello: Hello | None) -> NodeInfo | None:
    """The node that made the job, if HELLO listed it (by the ID's 8-hex prefix)."""
    if hello is None or len(job_id) != 40 or not job_id.startswith("D-"):
        return None
    prefix = job_id[2:10]
    for node in hello.nodes:
        if node.id.startswith(prefix) and node.priority < 100:
            return node
    return None


def route(job_ids: Iterable[str], hello: Hello | None) -> Address | None:
    """The one node every job of a command belongs to, when it is not the one connected
    (None: send it where the client is)."""
    owners = {owner_of(job_id, hello) for job_id in job_ids}
    if len(owners) != 1:
        return None
    [owner] = owners
    if owner is None or hello is None or owner.id == hello.node_id:
        return None
    return (owner.host, owner.port)


class PeerHealth:
    """Job makers that could not be reached lately, skipped until their time is up.

    Times are passed in (monotonic seconds). Entries are kept for the nodes HELLO lists
    only, so there are never more than the cluster's nodes."""

    def __init__(self) -> None:
        self._down: dict[Address, tuple[float, int]] = {}  # until, failures in a row

    def __len__(self) -> int:
        return len(self._down)

    def is_down(self, address: Address, now: float) -> bool:
        entry = self._down.get(address)
        return entry is not None and now < entry[0]

    def failed(self, address: Address, now: float, listed: Iterable[Address]) -> float:
        """Count a failure of `address`; how long it is skipped from `now`."""
        self.keep_only(listed)
        # The count stops growing at the cap, so the power stays small.
        failures = min(self._down.get(address, (0.0, 0))[1] + 1, 16)
        skip = min(PEER_DOWN_S * 2 ** (failures - 1), PEER_DOWN_MAX_S)
        self._down[address] = (now + skip, failures)
        return skip

    def answered(self, address: Address) -> None:
        self._down.pop(address, None)

    def keep_only(self, listed: Iterable[Address]) -> None:
        """Forget the nodes HELLO no longer lists (they left, or were forgotten)."""
        keep = set(listed)
        # list() copies the keys in one step: `answered` may pop from another thread.
        for known in list(self._down):
            if known not in keep:
                self._down.pop(known, None)


class JobSources:
    """Counts who made the jobs a consumer receives; says when to move.

    Threads sharing a `Client` observe at once: the count, the decision and its reset
    are one step under a lock, or one thread's reset between another's check and its
    `most_common` ended that thread's GETJOB in IndexError, its jobs taken and lost."""

    def __init__(self) -> None:
        self.prefixes: Counter[str] = Counter()
        self.seen = 0
        self._lock = threading.Lock()  # never held across an await: the twin shares it

    def _reset(self) -> None:
        self.prefixes.clear()
        self.seen = 0

    def observe(self, job_ids: Iterable[str], hello: Hello | None) -> Address | None:
        """Count these jobs; the address to move to once one other node made most."""
        with self._lock:
            for job_id in job_ids:
                self.prefixes[job_id[2:10]] += 1
                self.seen += 1
            if self.seen < MOVE_AFTER or hello is None:
                return None
            prefix, count = self.prefixes.most_common(1)[0]
            seen = self.seen
            self._reset()  # the next decision looks at the next jobs only
        if count < MOVE_SHARE * seen or hello.node_id.startswith(prefix):
            return None
        owner = next((n for n in hello.nodes if n.id.startswith(prefix)), None)
        if owner is None or owner.priority > 1:
            return None
        return (owner.host, owner.port)
