"""When the cluster's messages leave: the send policy of `ClusterDriver` (a mixin).

The messages a read leaves (copies, GOTJOBs, acks...) wait for the other reads of the
loop's turn, so that they travel in the same frames (cluster/batching.py): one write per
peer per turn, and fewer, fuller frames for the peers to read. They go sooner when they
are many (a bound on a frame), when one read's copies are many (a long pipeline, whose
first jobs the other nodes copy while this one parses the next), when many synchronous
ADDJOBs wait for theirs, and at the end of a turn's ADDJOBs (node/turn_adds.py).
Measured in docs/performance.md; tested in tests/cluster/test_send_policy.py.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conveyor.cluster.link import BusLink
    from conveyor.cluster.membership import Membership
    from conveyor.cluster.replication import Replication
    from conveyor.cluster.transport import BusTransport
    from conveyor.node.server import Server

# Copies one read left that are written in the middle of it, after a synchronous ADDJOB
# (send_if_many): 128 ADDJOBs' REPLJOBs to two nodes. A -P 16 read (32 copies) waits for
# the end of the turn: sending it mid-read cost 20 % more CPU for the same jobs/s
# (docs/performance.md, 2026-11-27). Each mid-read send wakes the other nodes, which
# costs the sender 19-40 us and the woken node more on a VM (sixteenth look): from 64
# (32 jobs) to 256, one pipelined connection's three nodes spent 21-24 us a job
# instead of 31-32, and it added 33.7k-35.9k jobs/s instead of 29.2k-32.1k.
MID_READ_ACTIONS = 256
# Pending messages (copies counted one per job and node) written at the end of a read
# rather than of the loop's turn: bounds a frame when thousands of clients add jobs in
# one turn (~1 MB of 100-byte jobs to each of two nodes).
FLUSH_ACTIONS = 8192
# Synchronous ADDJOBs whose copies are written at the end of a read rather than of the
# turn. At sync -P 16 a turn reads hundreds of jobs: sent all at once, the replicas wait
# for the origin's whole turn and the origin then waits for theirs. Writing every 64
# lets them copy the first jobs while the origin reads the next (+12 % jobs/s for ~10 %
# more CPU per job, docs/performance.md). ASYNC copies answer nobody: they wait.
EARLY_SYNC_JOBS = 64


class SendPolicy:
    """When the pending messages are written (fields set by ClusterDriver)."""

    if TYPE_CHECKING:
        server: Server
        membership: Membership
        replication: Replication
        bus: BusTransport | None
        _flush_soon: asyncio.Handle | None
        sync_unsent: int

        def _run_actions(self, link: BusLink | None) -> None: ...

    def flush(self) -> None:
        """At the end of a read (Server.after_io): the messages the commands and bus
        messages of the read left wait for the other reads of this turn of the loop, to
        travel in the same frames (batching.py): one write per peer per turn, and fewer,
        fuller frames for the peers to read. A long pipeline's copies left mid-read
        already (send_if_many); past FLUSH_ACTIONS they go now, which bounds a frame, and
        so do the copies of EARLY_SYNC_JOBS synchronous ADDJOBs, whose clients wait.
        Writing at the end of every read of 8 jobs or more, as before 2026-11-27, cost
        more CPU on every node than it saved in waiting: see docs/performance.md."""
        if (
            self.membership.pending_sends
            or self.sync_unsent >= EARLY_SYNC_JOBS
            or self.pending_actions() >= FLUSH_ACTIONS
        ):
            self._send_now()  # a federation push moves a batch: the other node may start
        elif self._flush_soon is None:
            loop = self.server.loop or asyncio.get_running_loop()
            self._flush_soon = loop.call_soon(self._send_now)

    def send_pending(self) -> None:
        """What flush() left for the end of the turn goes now (the turn's ADDJOBs ran)."""
        if self._flush_soon is not None:
            self._send_now()

    def pending_actions(self) -> int:
        """Messages waiting to be sent, the gathered copies counted one per job and node."""
        return len(self.membership.actions) + self.replication.outbox.extra_sends

    def send_if_many(self, at_read_start: int) -> int:
        """Mid-read, after an ADDJOB that waits for its copies: once this read's copies
        are many (a long pipeline's), they go before the rest of the read runs, so the
        other nodes copy these jobs while this one parses the next ones. The reads of
        many clients with a few jobs each wait for the end of the turn instead, to share
        frames. `at_read_start`: pending_actions() when the read started; returns what
        the caller passes next time."""
        if self.pending_actions() - at_read_start >= MID_READ_ACTIONS:
            self._send_now()
            return self.pending_actions()
        return at_read_start

    def _send_now(self) -> None:
        self.sync_unsent = 0
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        if self.membership.actions or self.membership.pending_sends:
            self._run_actions(None)
        if self.bus is not None and self.bus.unflushed:
            self.bus.flush()
