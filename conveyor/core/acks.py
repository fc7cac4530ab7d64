"""Acknowledgements (ack.c): ACKJOB, FASTACK and the ACKED state.

An acknowledged job enters ACKED and stays there until ack garbage collection lets it
go: while other nodes may hold a copy, the ACKED record is what stops them from
re-queueing it. When this node is the only holder (a cluster of one, or every other
holder confirmed), collection is immediate, within the same command.
"""

from __future__ import annotations

from conveyor.core.effects import EV_ACKED, EV_RELEASED
from conveyor.core.job import ACKED, QUEUED, Job
from conveyor.core.state import CoreState


class AcksMixin(CoreState):
    def ack(self, ids: list[bytes], now_ms: int) -> int:
        """ACKJOB: the count of jobs known here and not already acknowledged."""
        acked = 0
        jobs = self.jobs
        for job_id in ids:
            job = jobs.get(job_id)
            if job is not None and job.state != ACKED:
                acked += 1
                self._acknowledge(job, now_ms)
                self._collect_ack(job, now_ms)
        return acked

    def fast_ack(self, ids: list[bytes], now_ms: int) -> int:
        """FASTACK: acknowledge and let go at once, without waiting for other holders."""
        freed = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is not None:
                freed += 1
                if job.state != ACKED:
                    self._acknowledge(job, now_ms)
                self._free(job, now_ms, EV_RELEASED)
        return freed

    def _acknowledge(self, job: Job, now_ms: int) -> None:
        was_queued = job.state == QUEUED
        job.state = ACKED
        self.acked_jobs += 1
        if was_queued:
            self._left_queue(job, now_ms)
        if not job.retry:
            self._amo_delivered.pop(job.id, None)
        self._changed(EV_ACKED, job, now_ms)

    def _collect_ack(self, job: Job, now_ms: int) -> None:
        """Ack GC: let an ACKED job go once no other node may still hold a copy."""
        holders = job.nodes_delivered
        if holders is None or not holders or holders == (self.node_name,):
            self._free(job, now_ms, EV_RELEASED)

    def release_acked(self, job: Job, now_ms: int) -> None:
        """Ack GC is done (every holder confirmed): let the ACKED job go."""
        self._free(job, now_ms, EV_RELEASED)
