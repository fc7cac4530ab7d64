"""Bugs planted by hand (monkeypatched, never edited in) to show the invariants catch them.

Each entry: the class, the attribute replaced, the buggy replacement, and how many seeds
from 0 the test may run before one must fail. Dropping REPLJOB retries costs no safety
(ADDJOBs time out with NOREPL): the liveness phase of each history catches it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from conveyor.cluster.acks import AckGC
from conveyor.cluster.messages import GotJob
from conveyor.cluster.replication import Replication
from conveyor.core.codec import JobRecord
from conveyor.core.job import ACTIVE, DELIVERED, WAIT_REPL, Job
from conveyor.core.node import NodeCore

_add_job = Replication.add_job
_import_job = NodeCore.import_job


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
}
