"""Runs of ADDJOBs in a cluster: their checks made once, their jobs added together.

A producer's pipelined ADDJOBs (node/addjob_runs.py), or the ADDJOBs many clients sent in
one turn of the loop (node/turn_adds.py), come here as a run with the same options.
`plan_adds` makes the run's checks once (TTL and RETRY, REPLICATE) and picks what its
copies share (targets, header). Then either each job takes `add_planned` (add_job without
the checks), or, in the usual case, `add_run` adds them all in one call: the core makes
and files them together (JobRunsMixin.add_run), their copies join one batch per target, and
each synchronous job waits for its copies as add_job would leave it.

A mixin of Replication (cluster/replication.py): it uses its caches of the reachable
others (`_others`, `_holders`, `_pick`), its header and its pending adds, as add_job does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from conveyor.cluster.messages import Header
from conveyor.core.args import AddJobArgs
from conveyor.core.errors import CommandError
from conveyor.core.job import Job
from conveyor.core.records import job_records
from conveyor.core.state import JOB_OVERHEAD_BYTES, QUEUE_OVERHEAD_BYTES

if TYPE_CHECKING:
    from conveyor.cluster.replication import Replication


@dataclass(slots=True)
class AddPlan:
    """What the ADDJOBs of a run share once their options passed the checks (plan_adds)."""

    repl: int
    ttl_s: int
    retry_s: int
    synchronous: bool
    targets: tuple[bytes, ...] | None  # None: drawn per job
    header: Header
    headroom: int  # bytes the run may still add below the memory warning's threshold


class PlannedAdds:
    def plan_adds(self: Replication, args: AddJobArgs) -> AddPlan | None:
        """What the ADDJOBs of a run with these options share (node/addjob_runs.py): their
        checks, made once; the targets and header of their copies. None when each job
        must take add_job's path: this node replicates externally (leaving, or memory
        past the warning level), or the checks fail (each job then gets the error)."""
        core = self.core
        if core.replicates_externally():
            return None
        try:
            ttl_s, retry_s = core.check_add(args)  # resolves REPLICATE None in args
        except CommandError:
            return None
        synchronous = args.repl > 1 and not args.asynchronous
        others = self._reachable_others()
        # All of them, or a random draw per job, as add_job makes it.
        targets = others if args.repl - 1 >= len(others) else None
        # Until the run has added this much it stays below the memory warning's threshold,
        # so replicates_externally() stays false: each job counts its bytes and a queue.
        headroom = core.warning_guard - core.memory_estimate()
        header = self._header(noreply=not synchronous)
        return AddPlan(args.repl, ttl_s, retry_s, synchronous, targets, header, headroom)

    def add_planned(
        self: Replication, plan: AddPlan, args: AddJobArgs, token: Any, now_ms: int
    ) -> tuple[Job, bool]:
        """add_job for one job of a planned run (`args`: the run's options, with this
        job's queue and body), without checking the run's options again."""
        plan.headroom -= JOB_OVERHEAD_BYTES + QUEUE_OVERHEAD_BYTES + len(args.body)
        if plan.headroom < 0:
            return self.add_job(args, token, now_ms)  # near the warning: checked exactly
        args.repl = repl = plan.repl
        synchronous = plan.synchronous
        job = self.core.add_checked(args, plan.ttl_s, plan.retry_s, now_ms, synchronous)
        if repl == 1:
            return job, True
        targets = plan.targets
        if targets is None:
            targets = self._pick(repl - 1)
        answered = self._replicate(
            job, args, targets, False, plan.header, synchronous, token, now_ms
        )
        return job, answered

    def add_run(
        self: Replication,
        plan: AddPlan,
        args: AddJobArgs,
        bodies: list[bytes],
        tokens: list[Any],
        now_ms: int,
    ) -> list[Job] | None:
        """add_planned for a job of each of `bodies` (its client to answer in `tokens`),
        in one call when they all go the same way: the copies to every other node
        (REPLICATE covers them all), well below the memory warning, and the core adds them
        together (JobRunsMixin.add_run). Else None, having added nothing: each job then takes
        add_planned. tests/cluster/test_planned_adds.py holds both to adding one by one."""
        targets = plan.targets
        size = (JOB_OVERHEAD_BYTES + QUEUE_OVERHEAD_BYTES) * len(bodies) + sum(map(len, bodies))
        if targets is None or plan.repl == 1 or plan.headroom - size < 0:
            return None
        args.repl = plan.repl
        synchronous = plan.synchronous
        jobs = self.core.add_run(args, bodies, plan.ttl_s, plan.retry_s, now_ms, synchronous)
        if jobs is None:
            return None
        plan.headroom -= size
        me = self.membership.myself.name
        holders = self._holders if targets is self._others else (me, *targets)
        for job in jobs:
            job.nodes_delivered = holders
        records = job_records(jobs, me, now_ms, True)
        self.outbox.add_run(
            self.membership.actions, targets, plan.header, records, self._takes_batches
        )
        if synchronous:
            self.await_copies(jobs, tokens, args.timeout_ms, now_ms)
        return jobs
