"""The driver side of the streaming reader: leases, prefetch, acks and the journal.

Owns `DriverState`, which lives in the one long-lived Python process beside Spark's
driver (see `stream_reader`): it leases jobs from the nodes for each batch (with one
batch prefetched), keeps the leases alive while Spark works (WORKING), spools rows to
files for the executors, acks a batch's jobs once Spark committed it and hands jobs back
when the query stops. It holds threads and sockets, so it is never pickled.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from conveyor.client._address import parse_address
from conveyor.spark import rows
from conveyor.spark.journal import Journal
from conveyor.spark.link import NodeError, NodeLink
from conveyor.spark.options import ReadOptions, address_text
from conveyor.spark.spool import Spool

log = logging.getLogger("conveyor.spark")

_JOB_ID = itemgetter(1)

# How long a failed ack round waits before trying again on its own (commits also retry).
ACK_RETRY_S = 1.0
ACK_RETRY_LIMIT_S = 60.0
# How long stop() lets an ack round or a prefetch already on the wire finish.
STOP_WAIT_S = 10.0


@dataclass
class LeasedBatch:
    seq: int
    # Per node ("host:port"): its rows, and the IDs still to ack there.
    batches_by_node: dict[str, list[pa.RecordBatch]] = field(default_factory=dict)
    ids_by_node: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(b.num_rows for batches in self.batches_by_node.values() for b in batches)

    def all_batches(self) -> list[pa.RecordBatch]:
        return [b for batches in self.batches_by_node.values() for b in batches]

    @classmethod
    def from_batches(cls, seq: int, batches: list[pa.RecordBatch]) -> LeasedBatch:
        """A batch read back from the journal, regrouped by its node column."""
        batch = cls(seq)
        if not any(b.num_rows for b in batches):
            return batch
        table = pa.Table.from_batches(batches, rows.ARROW_SCHEMA)
        for node in pc.unique(table.column("node")).to_pylist():
            chosen = table.filter(pc.equal(table.column("node"), node))
            batch.batches_by_node[node] = chosen.to_batches()
            batch.ids_by_node[node] = chosen.column("id").to_pylist()
        return batch


class DriverState:
    """Leases, journal and background threads of one query, in the driver's process."""

    def __init__(self, options: ReadOptions, run: str) -> None:
        self.options = options
        self.run = run
        self.journal = Journal(options.journal, run) if options.journal else None
        self.lock = threading.Lock()
        self.pending: dict[int, LeasedBatch] = {}  # leased and not yet acked
        self.committed_seq = 0
        self._local = threading.local()  # a NodeLink per thread and node
        self._links: list[NodeLink] = []  # every one of them, for stop() to close
        self._closed = False
        self._ack_future: Future[None] | None = None
        self._rotation = 0
        self._prefetch: tuple[int, int, Future[LeasedBatch]] | None = None
        self._prefetcher = ThreadPoolExecutor(1, thread_name_prefix="conveyor-prefetch")
        self._acker = ThreadPoolExecutor(1, thread_name_prefix="conveyor-ack")
        self._stopping = threading.Event()
        self._warned: set[str] = set()
        self._spool = Spool(run)
        if options.lease_s > 0:
            threading.Thread(target=self._keep_leases, name="conveyor-lease", daemon=True).start()

    # -- spool files (exchange=file) ---------------------------------------------------
    def spool(self, seq: int, index: int, payload: bytes) -> str:
        """Write one partition's rows where the executors will read them."""
        return self._spool.write(seq, index, payload)

    # -- connections ------------------------------------------------------------------
    def link(self, node: tuple[str, int]) -> NodeLink:
        links: dict[tuple[str, int], NodeLink] | None = getattr(self._local, "links", None)
        if links is None:
            links = self._local.links = {}
        link = links.get(node)
        if link is None:
            connection = self.options.connection
            link = NodeLink(node, connection.password, connection.timeout_s)
            with self.lock:
                if self._closed:
                    host, port = node
                    raise NodeError(f"node {host}:{port}: the stream reader is stopped")
                self._links.append(link)
            links[node] = link
        return link

    def _warn_once(self, key: str, message: str) -> None:
        if self._stopping.is_set():
            return  # failures of work cut short by stop() are expected
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message)

    # -- leasing ----------------------------------------------------------------------
    def lease(self, seq: int, max_rows: int) -> LeasedBatch:
        """Lease up to `max_rows` jobs for batch `seq`, journal them, and keep them pending
        (a batch the journal holds already is taken from it instead)."""
        journaled = self._from_journal(seq)
        if journaled is not None:
            # Leased before a restart and never planned by Spark (a prefetch, say): leasing
            # again would overwrite it in the journal and leave its jobs leased to no one.
            return journaled
        nodes = self.options.connection.nodes
        start = self._rotation % len(nodes)
        self._rotation += 1
        batch = LeasedBatch(seq)
        remaining = max_rows
        for node in nodes[start:] + nodes[:start]:
            if remaining <= 0:
                break
            name = address_text(node)
            fetched_at = time.time_ns() // 1000
            node_batches: list[pa.RecordBatch] = []
            ids: list[Any] = []
            try:
                for jobs in self.link(node).lease(self.options.queues, remaining):
                    node_batches.append(rows.leased_batch(jobs, name, fetched_at))
                    ids.extend(map(_JOB_ID, jobs))
            except NodeError as error:
                # A node that is down must not kill the query: the others keep feeding it.
                # Jobs it handed out before failing stay leased: they are kept in the batch.
                self._warn_once(f"lease:{name}", f"leasing from {name} failed: {error}")
            else:
                self._warned.discard(f"lease:{name}")
            if not ids:
                continue
            batch.batches_by_node[name] = node_batches
            batch.ids_by_node[name] = ids
            remaining -= len(ids)
        if batch.rows and self.journal is not None:
            try:
                self.journal.write(seq, batch.all_batches())
            except OSError as error:
                # Neither journaled nor handed to Spark, the jobs would wait out their RETRY
                # (or, with RETRY 0, never come back): return them before failing the batch.
                self._enqueue(batch)
                raise OSError(
                    f"cannot journal batch {seq} under {self.journal.directory} ({error}); "
                    f"its {batch.rows} leased jobs were handed back to their queues"
                ) from None
        with self.lock:
            self.pending[seq] = batch
        return batch

    def take(self, seq: int, max_rows: int) -> LeasedBatch:
        """The batch `seq`: already planned, prefetched, journaled before a restart, or
        leased now."""
        with self.lock:
            known = self.pending.get(seq)
        if known is not None:
            return known  # Spark asked twice for the same start: same answer
        prefetched = self._take_prefetch(seq)
        if prefetched is not None:
            if prefetched.rows <= max_rows and prefetched.rows:
                return prefetched
            self._hand_back(prefetched)
        journaled = self._from_journal(seq)
        if journaled is not None:
            return journaled
        return self.lease(seq, max_rows)

    def prefetch(self, seq: int, max_rows: int) -> None:
        """Lease batch `seq` in the background while Spark runs the current one."""
        if not self.options.prefetch or self._stopping.is_set():
            return
        future = self._prefetcher.submit(self.lease, seq, max_rows)
        self._prefetch = (seq, max_rows, future)

    def _take_prefetch(self, seq: int) -> LeasedBatch | None:
        prefetch, self._prefetch = self._prefetch, None
        if prefetch is None:
            return None
        prefetch_seq, _, future = prefetch
        try:
            batch = future.result()
        except Exception as error:  # a failed prefetch only costs a synchronous lease
            log.warning("prefetching batch %d failed: %s", prefetch_seq, error)
            return None
        if prefetch_seq == seq:
            return batch
        self._hand_back(batch)
        return None

    def _hand_back(self, batch: LeasedBatch) -> None:
        """Return a batch Spark will never see to its queues (ENQUEUE: no NACK counted)."""
        with self.lock:
            self.pending.pop(batch.seq, None)
        self._enqueue(batch)
        if self.journal is not None:
            self.journal.delete(batch.seq)

    def _enqueue(self, batch: LeasedBatch) -> None:
        for name, ids in batch.ids_by_node.items():
            try:
                self.link(parse_address(name)).enqueue(ids)
            except NodeError as error:
                log.warning("handing back %d jobs to %s failed: %s", len(ids), name, error)

    def batch_for_replay(self, seq: int) -> LeasedBatch | None:
        with self.lock:
            batch = self.pending.get(seq)
        return batch if batch is not None else self._from_journal(seq)

    def _from_journal(self, seq: int) -> LeasedBatch | None:
        """Batch `seq` as journaled (by this process or one before a restart), now pending."""
        replay = self.journal.load(seq) if self.journal is not None else None
        if replay is None:
            return None
        with self.lock:
            return self.pending.setdefault(seq, LeasedBatch.from_batches(seq, replay))

    def holds_uncommitted_rows(self, seq: int) -> bool:
        """Whether batch `seq` has jobs that Spark has not committed yet."""
        if seq <= self.committed_seq or seq <= 0:
            return False
        batch = self.batch_for_replay(seq)
        return batch is not None and batch.rows > 0

    # -- acknowledging ----------------------------------------------------------------
    def commit(self, end_seq: int) -> None:
        """Ack every batch up to `end_seq` in the background; never raises, since an
        exception in commit() kills the query, and a failed ack is simply retried."""
        self.committed_seq = max(self.committed_seq, end_seq)
        # Now, not after the acks: Spark reads a committed batch's files no more, and a
        # node that stays down would otherwise keep them for as long as the query runs.
        self._spool.drop_through(end_seq)
        if self.journal is not None:
            for seq in self.journal.pending():
                if seq <= end_seq:
                    self.batch_for_replay(seq)
        if self._stopping.is_set():
            return
        queued = self._ack_future
        # A round that has not started yet acks up to the new committed_seq as well: another
        # one per commit would pile up behind a round retrying a node that is down.
        if queued is None or queued.running() or queued.done():
            self._ack_future = self._acker.submit(self._ack_committed)

    def _ack_committed(self) -> None:
        # Bounded: the executor's thread is joined when the process exits, and a node that
        # stays down must not hold the process. Whatever is left is retried by the next
        # commit, or comes back through the node's RETRY.
        deadline = time.monotonic() + ACK_RETRY_LIMIT_S
        while not self._stopping.is_set():
            with self.lock:
                due = [b for s, b in sorted(self.pending.items()) if s <= self.committed_seq]
            failed = False
            for batch in due:
                if not self._ack_batch(batch):
                    failed = True
            if not failed or time.monotonic() >= deadline:
                return
            self._stopping.wait(ACK_RETRY_S)

    def _ack_batch(self, batch: LeasedBatch) -> bool:
        fast = self.options.ack == "fastack"
        acked = True
        for name in list(batch.ids_by_node):
            # The address journaled with the rows: a restarted query may list other nodes.
            try:
                self.link(parse_address(name)).ack(batch.ids_by_node[name], fast)
            except NodeError as error:
                self._warn_once(f"ack:{name}", f"acking batch {batch.seq} on {name}: {error}")
                # On to the other nodes: held back, their jobs would outlive their RETRY.
                acked = False
                continue
            del batch.ids_by_node[name]
        if not acked:
            return False
        if self.journal is not None:
            self.journal.delete(batch.seq)
        with self.lock:
            self.pending.pop(batch.seq, None)
        return True

    def idle(self) -> bool:
        """No leased job is waiting for its ack (for tests and benchmarks)."""
        with self.lock:
            return not any(batch.ids_by_node for batch in self.pending.values())

    # -- leases -----------------------------------------------------------------------
    def _keep_leases(self) -> None:
        """Send WORKING for every job leased and not acked yet, every `lease_s` seconds,
        so jobs of a long batch are not handed to another consumer by their RETRY."""
        while not self._stopping.wait(self.options.lease_s):
            with self.lock:
                held: dict[str, list[Any]] = {}
                for batch in self.pending.values():
                    for name, ids in batch.ids_by_node.items():
                        held.setdefault(name, []).extend(ids)
            for name, ids in held.items():
                try:
                    self.link(parse_address(name)).working(ids)
                except NodeError as error:
                    self._warn_once(f"working:{name}", f"WORKING on {name}: {error}")

    def stop(self) -> None:
        """Stop the background work and close every connection this query opened."""
        self._stopping.set()
        self._prefetcher.shutdown(wait=False, cancel_futures=True)
        self._acker.shutdown(wait=False, cancel_futures=True)
        # An ack round or a lease already on the wire finishes (bounded): cutting it off
        # would leave jobs leased until their RETRY. Without a journal, a prefetched batch
        # Spark never asked for goes back to its queues (with one, a restarted query takes
        # it from the journal, counters unchanged).
        prefetch, self._prefetch = self._prefetch, None
        # Not the ones shutdown() cancelled: they never run, and wait() would count them as
        # pending until its timeout.
        running = [
            f
            for f in (self._ack_future, prefetch and prefetch[2])
            if f is not None and not f.cancelled()
        ]
        wait(running, timeout=STOP_WAIT_S)
        if (
            prefetch is not None
            and self.journal is None
            and prefetch[2].done()
            and not prefetch[2].cancelled()
        ):
            try:
                batch = prefetch[2].result()
            except Exception:  # a failed prefetch leased nothing it kept
                batch = None
            if batch is not None and batch.rows:
                self._hand_back(batch)
        with self.lock:
            self._closed = True
            links, self._links = self._links, []
        for link in links:
            link.shutdown()
        # Spark reads no more of them once the query stops; a batch it had not committed
        # is spooled again when a restarted query plans it.
        self._spool.remove()
