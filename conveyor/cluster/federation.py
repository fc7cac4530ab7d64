"""Federation: jobs move to the nodes where consumers wait (NEEDJOBS/YOURJOBS, sans-IO).

Disque's rules (queue.c), on Disque's wire messages, so mixed clusters keep working:
- A node needs jobs for a queue when a client blocks on it empty, while clients stay
  blocked (the cron), and when a GETJOB empties a queue that imports jobs. It then sends
  NEEDJOBS to the queue's sources (nodes that sent it jobs in the last 5 s) asking for
  import-rate / sources jobs (5 to 100), and from time to time a cluster-wide NEEDJOBS
  for 1 job to find sources: 2 s x 2^attempt apart, up to 30 s, starting over when a new
  source appears. Requests to the sources are paced 25 ms x 2^attempt (up to 2 s).
- A node asked for jobs sends up to that many in one YOURJOBS (never more than half its
  queue when it holds fewer than twice as many), unless its queue is empty, paused for
  output, or importing itself. Jobs moved keep a copy here, active, that requeues after
  RETRY should the other node lose them; at-most-once jobs are deleted here.
- YOURJOBS received: each job is queued here (a move, not a requeue), its sender noted
  as a source, and the queue's import counters updated.
- A leaving node asks for nothing, and (beyond Disque, which waits to be asked) hands
  its queued jobs to the other nodes from the cron.

Driven by events rather than by the cron (beyond Disque): a client that blocks sends
NEEDJOBS at once, not at the next tick; and a node asked for jobs remembers who asked
(WANTED_TTL_MS, longer than the longest broadcast interval) and sends the next jobs
queued there with no consumer of its own at once (YOURJOBS, which Disque takes whether
it asked or not). The cold case is then one message, not a broadcast
backing off to seconds, and a steady flow from producers on one node to consumers on
another needs no request per batch.
"""

from __future__ import annotations

from collections import OrderedDict

from conveyor.cluster.membership import Membership
from conveyor.cluster.messages import Header, NeedJobs, YourJobs
from conveyor.cluster.replication import TakenOnce
from conveyor.core.codec import JobRecord
from conveyor.core.imports import ImportStats
from conveyor.core.node import NodeCore
from conveyor.core.queue import PAUSE_OUT, JobQueue
from conveyor.core.records import job_record

MIN_REQUEST, MAX_REQUEST = 5, 100
BCAST_MIN_MS, BCAST_MAX_MS = 2000, 30000
ADHOC_MIN_MS, ADHOC_MAX_MS = 25, 2000
WANTED_TTL_MS = 70_000  # beyond the 30 s broadcast interval, twice
MAX_WANTED = 10_000  # (queue, node) pairs remembered; the oldest go first
_MAX_SHIFT = 10  # 2^10 x the minimum is past every cap
HANDOVER_FRAMES = 10  # per cron tick while leaving: up to 10,000 jobs a second


class Federation:
    def __init__(self, core: NodeCore, membership: Membership) -> None:
        self.core = core
        self.membership = membership
        # queue -> {node -> ms until which it wants jobs of that queue}
        self.wanted: OrderedDict[bytes, dict[bytes, int]] = OrderedDict()
        self.waiting: set[bytes] = set()  # queues with clients blocked here
        self._turn = 0  # round robin over the targets of a hand-over
        self._receiving = False  # taking YOURJOBS: what is queued now stays here
        self.taken_once = TakenOnce()  # at-most-once jobs taken by YOURJOBS, per sender
        self._ready: dict[bytes, JobQueue] = {}  # queues to push when actions are taken
        self._ready_ms = 0  # the batch's clock
        core.wanted_queues = self.wanted

    # -- needing jobs -----------------------------------------------------------------------
    def blocked(self, queue_names: list[bytes], now_ms: int) -> None:
        for name in queue_names:
            queue = self.core.queues.get(name)
            if queue is not None and not queue.count:
                self.waiting.add(name)
                self._need(queue, now_ms, at_once=True)

    def drained(self, queue: JobQueue, now_ms: int) -> None:
        stats = queue.imports
        if stats is not None and stats.rate(now_ms):
            self._need(queue, now_ms, at_once=True)

    def tick(self, now_ms: int) -> None:
        """The cron: keep asking for the queues clients still wait on; forget old wants;
        while leaving, hand the queued jobs over."""
        if self.core.leaving:
            self._hand_over(now_ms)
        queues = self.core.queues
        for name in list(self.waiting):
            queue = queues.get(name)
            if queue is None or not queue.blocked:
                self.waiting.discard(name)
            elif not queue.count:
                self._need(queue, now_ms, at_once=False)
        while self.wanted:
            name, nodes = next(iter(self.wanted.items()))
            if any(until > now_ms for until in nodes.values()):
                break
            del self.wanted[name]

    def _need(self, queue: JobQueue, now_ms: int, at_once: bool) -> None:
        if self.core.leaving:
            return
        stats = queue.imports
        if stats is None:
            stats = queue.imports = ImportStats()
        sources = stats.valid_sources(now_ms)
        wanted = stats.rate(now_ms) // len(sources) if sources else MIN_REQUEST
        wanted = min(max(wanted, MIN_REQUEST), MAX_REQUEST)
        header = self.membership.header()
        # Exponential, capped at 30 s as in Disque: a consumer that waited through a quiet
        # spell still finds the nodes that got jobs since within half a minute.
        bcast_delay = min(BCAST_MIN_MS << min(stats.bcast_attempt, _MAX_SHIFT), BCAST_MAX_MS)
        if now_ms - stats.bcast_ms > bcast_delay or not stats.bcast_ms:
            stats.bcast_ms = now_ms
            stats.bcast_attempt = min(stats.bcast_attempt + 1, _MAX_SHIFT)
            # Only to discover sources: one job is enough.
            self.membership.broadcast(NeedJobs(header, queue.name, 1))
        if not sources:
            return
        adhoc_delay = min(ADHOC_MIN_MS << min(stats.adhoc_attempt, _MAX_SHIFT), ADHOC_MAX_MS)
        if (at_once and now_ms - stats.adhoc_ms >= ADHOC_MIN_MS) or (
            now_ms - stats.adhoc_ms > adhoc_delay
        ):
            stats.adhoc_ms = now_ms
            stats.adhoc_attempt = min(stats.adhoc_attempt + 1, _MAX_SHIFT)
            self.membership.send_to(sources, NeedJobs(header, queue.name, wanted))

    # -- giving jobs ------------------------------------------------------------------------
    def receive_needjobs(self, message: NeedJobs, now_ms: int) -> None:
        sender = message.header.sender
        queue = self.core.queues.get(message.qname)
        if queue is not None and (
            queue.pause & PAUSE_OUT or (queue.imports is not None and queue.imports.rate(now_ms))
        ):
            return  # not giving jobs away, nor remembering: a consumer node itself
        # Whoever asks gets the jobs queued here later too, as they come (jobs_available).
        self._remember(message.qname, sender, now_ms)
        if queue is None or not queue.count:
            return
        count = message.wanted
        if queue.count < 2 * count:
            count = max(queue.count // 2, 1)
        self._send_jobs(queue, sender, count, now_ms)

    def _remember(self, name: bytes, node: bytes, now_ms: int) -> None:
        nodes = self.wanted.get(name)
        if nodes is None:
            if len(self.wanted) >= MAX_WANTED:
                self.wanted.popitem(last=False)
            nodes = self.wanted[name] = {}
        nodes[node] = now_ms + WANTED_TTL_MS
        self.wanted.move_to_end(name)

    def jobs_available(self, queue: JobQueue, now_ms: int) -> None:
        """A job was queued here with no consumer here, in a queue others asked for: it
        goes with every other job queued in the same batch (a pipeline of ADDJOBs), in
        one YOURJOBS made when the batch's actions are taken (push_ready). Its messages
        go before the push, as if the jobs were all queued at the end of the batch.

        Not for a job that just came with YOURJOBS: two nodes that once asked each
        other would pass jobs back and forth."""
        if self._receiving or queue.name not in self.wanted:
            return
        ready = self._ready
        if not ready:
            self.membership.pending_sends.append(self._push_ready)
            self._ready_ms = now_ms
        ready[queue.name] = queue

    def _push_ready(self) -> None:
        ready, self._ready = self._ready, {}
        for queue in ready.values():
            self._push(queue, self._ready_ms)

    def _push(self, queue: JobQueue, now_ms: int) -> None:
        """Every job queued, in frames of MAX_REQUEST, each to the next node that asked for
        the queue. Not while this node imports the queue itself."""
        if not queue.count or queue.pause & PAUSE_OUT:
            return
        if queue.imports is not None and queue.imports.rate(now_ms):
            return
        for _ in range(-(-queue.count // MAX_REQUEST)):
            node = self._next_wanting(queue.name, now_ms)
            if node is None:
                return
            self._send_jobs(queue, node, MAX_REQUEST, now_ms)

    def _next_wanting(self, name: bytes, now_ms: int) -> bytes | None:
        """The next node, in turn, that asked for the queue and can get jobs now: not one
        down or cut off, as what it would get could be lost."""
        nodes = self.wanted.get(name)
        if nodes is None:
            return None
        reachable = self.membership.reachable()
        for node, until in list(nodes.items()):
            info = self.membership.known(node)
            if until <= now_ms or info is None:
                del nodes[node]
                continue
            if info.link_up and info in reachable:
                del nodes[node]  # round robin: the node served goes last
                nodes[node] = until
                return node
        if not nodes:
            del self.wanted[name]
        return None

    def _hand_over(self, now_ms: int) -> None:
        """A leaving node sends its queued jobs to the others, HANDOVER_FRAMES frames of
        up to MAX_REQUEST jobs per tick: to nodes that asked for that queue first, else
        to the reachable nodes in turn. Each keeps its copy here, active, until acked."""
        targets = [node.name for node in self.membership.reachable()]
        frames = 0
        for queue in list(self.core.queues.values()):
            if frames >= HANDOVER_FRAMES or not targets:
                return
            if not queue.count or queue.pause & PAUSE_OUT:
                continue
            wanting = [n for n in self.wanted.get(queue.name, ()) if n in targets]
            self._turn = (self._turn + 1) % len(targets)
            target = wanting[0] if wanting else targets[self._turn]
            self._send_jobs(queue, target, MAX_REQUEST, now_ms)
            frames += 1

    def _send_jobs(self, queue: JobQueue, node: bytes, count: int, now_ms: int) -> None:
        core = self.core
        me = self.membership.name
        jobs = core.take_for_transfer(queue, min(count, MAX_REQUEST), now_ms)
        if not jobs:
            return
        records = tuple(job_record(job, me, now_ms, for_bus=True) for job in jobs)
        self.membership.send_to((node,), YourJobs(self.membership.header(), records))
        # At-most-once jobs keep no copy: one node holds them at a time.
        core.del_jobs([job.id for job in jobs if not job.retry], now_ms)

    # -- receiving jobs ---------------------------------------------------------------------
    def receive_yourjobs(self, message: YourJobs, now_ms: int) -> None:
        self._receiving = True
        try:
            for record in message.jobs:
                self._take(record, message.header, now_ms)
        finally:
            self._receiving = False

    def _take(self, record: JobRecord, header: Header, now_ms: int) -> None:
        core = self.core
        job = core.jobs.get(record.id)
        # A second copy of a YOURJOBS must not bring back an at-most-once job delivered
        # and acked meanwhile; but the job may come back for real, moved on and returned
        # by another node: what was taken is remembered per sender.
        if (
            job is None
            and not record.retry
            and not self.taken_once.first_time(record.id + header.sender)
        ):
            return
        if job is None:
            holders = tuple(n for n in record.nodes if n in self.membership.nodes)
            me = self.membership.name
            job = core.import_job(
                record,
                now_ms,
                etime_relative=True,
                holders=holders if me in holders else (*holders, me),
            )
            if job is None:
                return  # expired on the way
        if not core.enqueue_moved(job, now_ms):
            return
        queue = core.queues.get(job.queue)
        if queue is not None:
            if queue.imports is None:
                queue.imports = ImportStats()
            queue.imports.imported(header.sender, now_ms)
