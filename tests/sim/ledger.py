"""What the clients and the nodes did to every job, and the invariants checked against it.

The ledger learns about copies from the cores' job events ("added", "imported": a node
now holds the job; which incarnation of the node) and about clients from the history
(ADDJOB answers, deliveries, acks). Crashes without AOF mark the copies they destroyed.
Copies also go away by design, and the ledger learns each such removal as it happens:
- federation moves an at-most-once job (YOURJOBS, seen as the message leaves): the
  sender keeps no copy, and the one in flight may be lost with its link, as in Disque;
- external replication (ADDJOB on a leaving node): the origin's copy is not among the
  job's own nodes ("added" with the origin missing from `nodes_delivered`), it is held
  only while the copies are made and its "deleted" event drops it from the holders.
  With ASYNC the client is answered before any copy exists elsewhere (Disque does the
  same): until a REPLJOB lands ("imported") no node holds it, and if none lands (their
  link broke) it is lost without a crash, counted in `lost_allowed`. An at-most-once
  job is queued on its holder only by the origin's ENQUEUE: one sent (`enqueue_sent`)
  that reached no holder (`enqueued`) leaves the job held, never delivered, until its
  TTL, as at-most-once allows;
- a leaving node's hand-over (YOURJOBS from its cron) keeps its copy of a job with
  retries, active until acked: nothing changes for the ledger; an at-most-once job is
  moved as above.

Invariants (a violation raises `Violation`, whose text names the seed to replay):
- `check_step`, after every step:
  * no-loss: a job whose ADDJOB was answered OK, and that no client acked, is still
    held by every holder that has not crashed since it got its copy, and by at least
    one node (live, or down with the job in its AOF) unless REPLICATE or more holders
    (for ASYNC and REPLICATE 1: one) lost their copy in a crash without AOF;
  * bounded: replication.pending holds only ADDJOBs still waiting, the membership
    tables stay within a few entries per node;
- `record_delivery`: an at-most-once job (RETRY 0) is delivered at most once;
  a job delivered more than once otherwise is counted as a duplicate, not a failure;
- `check_handed_over`, once healed and settled with nodes still leaving (consumers
  drain only the other nodes): a leaving node that sees another node reachable and not
  leaving holds no queued job: it handed them all over;
- `check_end`, once healed and settled:
  * acked-gone: a job some client acked (ACKJOB or FASTACK) is held by no live node;
  * delivered: every job answered OK that some copy survived was delivered and acked
    (an at-most-once job whose holder restarted from its AOF is never queued again, as
    in Disque: it may have been delivered; it is counted, not failed);
  * bounded: nothing pending, collecting or in dummy acks; no job left in any core;
    every node knows exactly the cluster's nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from conveyor.core.codec import JobRecord
from conveyor.core.effects import EV_ADDED, EV_ADDED_QUEUED, EV_DELETED, EV_IMPORTED, JobEvent
from conveyor.core.errors import CommandError

if TYPE_CHECKING:
    from tests.sim.node import SimNode


class Violation(AssertionError):
    """An invariant failed."""


@dataclass(slots=True)
class JobInfo:
    id: bytes
    repl: int
    retry: int
    origin: int
    sync: bool = False
    status: str = "wait"  # wait | ok | err | unknown (origin crashed while waiting)
    holders: dict[int, int] = field(default_factory=dict)  # node -> incarnation
    lost: set[int] = field(default_factory=set)  # nodes whose copy a crash destroyed
    crashed: set[int] = field(default_factory=set)  # holders that crashed, AOF or not
    acked: bool = False  # some client sent ACKJOB or FASTACK for it
    deliveries: int = 0
    moved: bool = False  # an at-most-once job sent to another node (YOURJOBS): no copy kept
    external: bool = False  # added on a leaving node: its copies are all on other nodes
    at_once: bool = False  # ADDJOB answered before its copies were confirmed (ASYNC, 1)
    landed: bool = False  # some node imported a copy (REPLJOB, YOURJOBS, its AOF)
    enqueue_sent: bool = False  # its origin sent ENQUEUE (maybe over a broken link)
    enqueued: bool = False  # an ENQUEUE reached a node holding it


@dataclass(slots=True)
class Totals:
    histories: int = 0
    jobs: int = 0
    answered_ok: int = 0
    deliveries: int = 0
    duplicates: int = 0  # jobs delivered more than once
    extra_deliveries: int = 0
    abandoned: int = 0  # deliveries never acked by their consumer: RETRY requeues them
    after_ack: int = 0  # deliveries of a job a client had already acked (another copy)
    after_norepl: int = 0  # deliveries of a job whose ADDJOB got -NOREPL (a partial copy)
    acks: int = 0
    faults: int = 0
    lost_allowed: int = 0  # jobs whose every copy was destroyed, as allowed
    moves: int = 0  # at-most-once jobs federation moved (YOURJOBS)
    woken: int = 0  # jobs that reached a blocked GETJOB (often by federation)
    leaves: int = 0  # CLUSTER LEAVING yes
    comebacks: int = 0  # CLUSTER LEAVING no on a leaving node
    external_adds: int = 0  # ADDJOBs a leaving node replicated externally
    handed_over: int = 0  # jobs a leaving node sent away (YOURJOBS)
    leaving_refused: int = 0  # blocking GETJOBs answered -LEAVING
    messages: int = 0
    link_breaks: int = 0
    virtual_s: int = 0
    digest: str = ""  # of every delivery (time, node, bytes): same seed, same digest

    def counters(self) -> list[str]:
        return [name for name in self.__slots__ if name != "digest"]  # type: ignore[attr-defined]

    def add(self, other: Totals) -> None:
        for name in self.counters():
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def line(self) -> str:
        return ", ".join(f"{name} {getattr(self, name)}" for name in self.counters())


class Ledger:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.nodes: list[SimNode] = []
        self.jobs: dict[bytes, JobInfo] = {}
        self.waiting: dict[Any, bytes | None] = {}  # ADDJOB token -> job id
        self.early: dict[Any, Any] = {}  # replies that came before add_job returned
        self.moved_early: set[tuple[bytes, int]] = set()  # see moved()
        self.totals = Totals(histories=1)

    def fail(self, text: str) -> None:
        raise Violation(f"seed {self.seed}: {text}")

    # -- from the nodes -----------------------------------------------------------------------
    def job_events(self, node: SimNode, events: list[JobEvent]) -> None:
        for event in events:
            kind, job = event[0], event[1]
            if kind == EV_DELETED:
                self._deleted(node, job.id, job.nodes_delivered)
                continue
            if kind != EV_ADDED and kind != EV_ADDED_QUEUED and kind != EV_IMPORTED:
                continue
            info = self.jobs.get(job.id)
            if info is None:
                info = self.jobs[job.id] = JobInfo(job.id, job.repl, job.retry, node.index)
                self.totals.jobs += 1
            if kind == EV_IMPORTED:
                info.landed = True
            elif job.nodes_delivered is not None and node.name not in job.nodes_delivered:
                # The events of a batch are taken after the ADDJOB returned: its nodes
                # are set by then, and a leaving origin is never among them.
                info.external = True
                self.totals.external_adds += 1
            if (job.id, node.index) in self.moved_early:
                self.moved_early.discard((job.id, node.index))
                info.moved = True
                continue
            info.holders[node.index] = node.incarnation

    def _deleted(self, node: SimNode, job_id: bytes, nodes: tuple[bytes, ...] | None) -> None:
        """The origin of an externally replicated job lets go of it (the copies are
        made, or with ASYNC sent): the only deletion of a job answered OK and never
        acked that the ledger accepts from a node that did not crash. A copy the origin
        got back later (a hand-over to it) names it among its nodes and stays a holder."""
        info = self.jobs.get(job_id)
        if (
            info is not None
            and info.external
            and info.origin == node.index
            and nodes is not None
            and node.name not in nodes
            and info.holders.get(node.index) == node.incarnation
        ):
            del info.holders[node.index]

    def enqueue_sent(self, node: SimNode, job_id: bytes) -> None:
        info = self.jobs.get(job_id)
        if info is not None:
            info.enqueue_sent = True

    def enqueued(self, node: SimNode, job_id: bytes) -> None:
        info = self.jobs.get(job_id)
        if info is not None:
            info.enqueued = True

    def moved(self, node: SimNode, jobs: tuple[JobRecord, ...]) -> None:
        """Federation sent these jobs away; an at-most-once one keeps no copy there, and
        may be lost with the message, as in Disque. From a leaving node, a hand-over."""
        if node.core.leaving:
            self.totals.handed_over += len(jobs)
        for record in jobs:
            if record.retry:
                continue  # the sender keeps its copy, requeued after RETRY if need be
            self.totals.moves += 1
            info = self.jobs.get(record.id)
            if info is not None:
                info.moved = True
            if info is None or node.index not in info.holders:
                # Moved in the same step it was added (its event is handled after).
                self.moved_early.add((record.id, node.index))
            else:
                del info.holders[node.index]

    def add_reply(self, node: SimNode, token: Any, value: Any) -> None:
        job_id = self.waiting.pop(token, None)
        if job_id is None:
            self.early[token] = value
            return
        self._answered(self.jobs[job_id], value)

    def _answered(self, info: JobInfo, value: Any) -> None:
        if isinstance(value, CommandError):
            info.status = "err"
        else:
            assert value == b"+%s\r\n" % info.id, value
            info.status = "ok"
            self.totals.answered_ok += 1

    # -- from the history ---------------------------------------------------------------------
    def added(self, token: Any, outcome: tuple[str, Any], sync: bool) -> None:
        kind, value = outcome
        if kind == "err":
            return
        info = self.jobs[value]
        info.sync = sync
        if kind == "ok":
            info.at_once = True
            info.status = "ok"
            self.totals.answered_ok += 1
        elif token in self.early:
            self._answered(info, self.early.pop(token))
        else:
            self.waiting[token] = value

    def crashed(self, node: SimNode, old_incarnation: int) -> None:
        for token, job_id in list(self.waiting.items()):
            if job_id is not None and self.jobs[job_id].origin == node.index:
                self.jobs[job_id].status = "unknown"  # the client's connection closed
                del self.waiting[token]
        for info in self.jobs.values():
            if info.holders.get(node.index) == old_incarnation:
                info.crashed.add(node.index)
                if not node.aof_on:
                    info.lost.add(node.index)

    def record_delivery(self, job_id: bytes) -> None:
        info = self.jobs[job_id]
        info.deliveries += 1
        self.totals.deliveries += 1
        if info.acked:
            self.totals.after_ack += 1
        if info.status == "err":
            self.totals.after_norepl += 1
        if info.deliveries > 1:
            if info.retry == 0:
                self.fail(f"at-most-once job {job_id.decode()} delivered twice")
            self.totals.extra_deliveries += 1
            if info.deliveries == 2:
                self.totals.duplicates += 1

    def record_ack(self, job_id: bytes) -> None:
        self.jobs[job_id].acked = True
        self.totals.acks += 1

    # -- invariants ---------------------------------------------------------------------------
    def _holds(self, index: int, incarnation: int | None, job_id: bytes) -> bool:
        node = self.nodes[index]
        if not node.alive:
            return node.aof_on and job_id in node.aof_ids
        if incarnation is not None and node.incarnation != incarnation:
            return False
        return job_id in node.core.jobs

    def check_step(self) -> None:
        for info in self.jobs.values():
            if info.status == "ok" and not info.acked:
                self._check_kept(info)
        size = len(self.nodes)
        for node in self.nodes:
            if not node.alive:
                continue
            waiting = sum(1 for t, j in self.waiting.items() if j and t[0] == node.index)
            if len(node.replication.pending) > waiting:
                self.fail(f"node {node.index}: {len(node.replication.pending)} pending adds")
            if len(node.membership.nodes) > 2 * size + 2:
                self.fail(f"node {node.index}: {len(node.membership.nodes)} nodes known")
            if len(node.membership.blacklist) > size:
                self.fail(f"node {node.index}: blacklist grows")

    def _check_kept(self, info: JobInfo) -> None:
        if info.moved:
            return  # an at-most-once job federation moved: one copy, which may be lost
        for index, incarnation in info.holders.items():
            node = self.nodes[index]
            if node.alive and node.incarnation == incarnation and info.id not in node.core.jobs:
                self.fail(
                    f"job {info.id.decode()} (answered OK, never acked) vanished from "
                    f"node {index}, which never crashed since it got its copy"
                )
        if len(info.lost) >= (info.repl if info.sync else 1) or self._in_flight(info):
            return
        if not any(self._holds(index, None, info.id) for index in range(len(self.nodes))):
            self.fail(
                f"job {info.id.decode()} lost: answered OK with REPLICATE {info.repl} "
                f"({'sync' if info.sync else 'async or 1'}), never acked, only "
                f"{len(info.lost)} holder(s) crashed without AOF"
            )

    def check_end(self) -> None:
        self.check_step()
        for info in self.jobs.values():
            held = [n.index for n in self.nodes if n.alive and info.id in n.core.jobs]
            if info.acked and held:
                self.fail(f"acked job {info.id.decode()} still on nodes {held} after healing")
            if info.status != "ok" or info.acked or self._amo_done(info.id):
                continue
            need = info.repl if info.sync else 1
            if held or (len(info.lost) < need and not info.moved and not self._in_flight(info)):
                self.fail(
                    f"job {info.id.decode()} answered OK was never acked "
                    f"(held by {held}, {len(info.lost)} copies destroyed)"
                )
            self.totals.lost_allowed += 1
        self._check_bounded_end()

    def check_handed_over(self) -> None:
        for node in self.nodes:
            if not node.leaving or not node.membership.reachable():
                continue  # reachable(): up, past the handshake, and not leaving
            queued = sum(queue.count for queue in node.core.queues.values())
            if queued:
                self.fail(
                    f"node {node.index} is leaving and settled, yet holds {queued} queued "
                    f"job(s) with {len(node.membership.reachable())} node(s) to take them"
                )

    def _check_bounded_end(self) -> None:
        names = {node.name for node in self.nodes}
        for node in self.nodes:
            where = f"node {node.index} after settling"
            if node.replication.pending or node.acks.collecting or node.acks.dummies:
                self.fail(
                    f"{where}: pending {len(node.replication.pending)}, collecting "
                    f"{len(node.acks.collecting)}, dummies {len(node.acks.dummies)}"
                )
            left = [job for job in node.core.jobs.values() if not self._amo_done(job.id)]
            if left:
                self.fail(f"{where}: {len(left)} jobs left, e.g. {left[0]!r}")
            if set(node.membership.nodes) != names:
                self.fail(f"{where}: knows {len(node.membership.nodes)} nodes, not the cluster")

    @staticmethod
    def _in_flight(info: JobInfo) -> bool:
        """An ASYNC job of a leaving node whose copies have not landed (yet, or ever)."""
        return info.external and info.at_once and not info.landed

    def _amo_done(self, job_id: bytes) -> bool:
        """An at-most-once job held until its TTL by design: delivered and not acked,
        restarted from the AOF (never queued again: it may have been delivered), or
        replicated externally and never told to queue (its ENQUEUE was sent and lost)."""
        info = self.jobs.get(job_id)
        return (
            info is not None
            and info.retry == 0
            and not info.acked
            and (
                info.deliveries > 0
                or bool(info.crashed)
                or (info.external and info.enqueue_sent and not info.enqueued)
            )
        )
