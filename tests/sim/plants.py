"""Bugs planted by hand (monkeypatched, never edited in) to show the invariants catch them.

Each entry: the class, the attribute replaced, the buggy replacement, and how many seeds
from 0 the test may run before one must fail. Dropping REPLJOB retries costs no safety
(ADDJOBs time out with NOREPL): the liveness phase of each history catches it. The last
three are in graceful leave: the hand-over (never made, or keeping no copy) and external
replication (the origin forgets the job without its ENQUEUE).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from conveyor.cluster.acks import AckGC
from conveyor.cluster.federation import MAX_REQUEST, Federation
from conveyor.cluster.messages import GotJob, YourJobs
from conveyor.cluster.replication import Replication
from conveyor.core.codec import JobRecord
from conveyor.core.job import ACTIVE, DELIVERED, WAIT_REPL, Job
from conveyor.core.node import NodeCore
from conveyor.core.queue import JobQueue
from conveyor.core.records import job_record

_add_job = Replication.add_job
_import_job = NodeCore.import_job
_send_jobs = Federation._send_jobs


def answer_before_gotjob(self: Replication, args: Any, token: Any, now_ms: int) -> tuple[Job, bool]:
    """ADDJOB answers OK at once, as if every copy were confirmed (no retries follow)."""
    job, answered = _add_job(self, args, token, now_ms)
    if not answered:
        self.achieved(job, now_ms)
    return job, answered


def drop_repljob_retries(self: Replication, job: Job, now_ms: int) -> None:
    """The 50 ms tick neither adds a target nor resends REPLJOB: a lost copy stays lost."""


def ack_without_propagation(self: AckGC, ids: list[bytes], now_ms: int) -> int:
    """ACKJOB acks the local copy only: no SETACK rounds, the other copies never learn."""
    return self.core.ack(ids, now_ms)


def count_duplicate_gotjobs(self: Replication, message: GotJob, now_ms: int) -> None:
    """Every GOTJOB counts, even a second one from the same node (a duplicated REPLJOB
    is answered twice): a job can be answered OK with fewer copies than REPLICATE."""
    job = self.core.jobs.get(message.id)
    if job is None or job.state != WAIT_REPL:
        return
    job.nodes_confirmed = (*(job.nodes_confirmed or ()), message.header.sender)
    if len(job.nodes_confirmed) >= job.repl:
        self.achieved(job, now_ms)


def aof_requeues_at_most_once(
    self: NodeCore, record: JobRecord, now_ms: int, **options: bool
) -> Job | None:
    """Loading (the AOF at restart) queues at-most-once jobs again a second later, as if
    they had retries: one delivered before the crash can be delivered twice."""
    job = _import_job(self, record, now_ms, **options)
    if job is not None and job.retry == 0 and job.state == ACTIVE:
        job.flags &= ~DELIVERED
        self._amo_delivered.pop(job.id, None)
        job.qtime = now_ms + 1000
        self.timers.file_job(job, job.awake_at(), now_ms)
    return job


def hand_over_nothing(self: Federation, now_ms: int) -> None:
    """A leaving node never hands its queued jobs over from its cron."""


def hand_over_without_copies(
    self: Federation, queue: JobQueue, node: bytes, count: int, now_ms: int
) -> None:
    """A leaving node's YOURJOBS keeps no copy of jobs with retries either: a message
    lost with its link loses them."""
    if not self.core.leaving:
        return _send_jobs(self, queue, node, count, now_ms)
    me = self.membership.name
    jobs = self.core.take_for_transfer(queue, min(count, MAX_REQUEST), now_ms)
    records = tuple(job_record(job, me, now_ms, for_bus=True) for job in jobs)
    self.membership.send_to((node,), YourJobs(self.membership.header(), records))
    self.core.del_jobs([job.id for job in jobs], now_ms)
    return None


def external_without_enqueue(
    self: Replication, job: Job, holders: tuple[bytes, ...], now_ms: int
) -> None:
    """A leaving node forgets the job it replicated externally without telling a holder
    to queue it: an at-most-once one is never delivered."""
    self.core.del_jobs([job.id], now_ms)


class Plant(NamedTuple):
    owner: type
    attribute: str
    replacement: Callable[..., Any]
    max_seeds: int


PLANTS: dict[str, Plant] = {
    "answer_before_gotjob": Plant(Replication, "add_job", answer_before_gotjob, 100),
    "drop_repljob_retries": Plant(Replication, "_add_target", drop_repljob_retries, 50),
    "ack_without_propagation": Plant(AckGC, "ack", ack_without_propagation, 20),
    "count_duplicate_gotjobs": Plant(Replication, "receive_gotjob", count_duplicate_gotjobs, 300),
    "aof_requeues_at_most_once": Plant(NodeCore, "import_job", aof_requeues_at_most_once, 300),
    "hand_over_nothing": Plant(Federation, "_hand_over", hand_over_nothing, 100),
    "hand_over_without_copies": Plant(Federation, "_send_jobs", hand_over_without_copies, 50),
    "external_without_enqueue": Plant(Replication, "_hand_over", external_without_enqueue, 50),
}
