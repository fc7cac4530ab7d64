"""The node facade: what the asyncio server and the cluster simulator both drive.

Parsed commands (and, with the cluster, bus messages) come in with the time; replies
come back as return values and everything else as effects (conveyor.core.effects).
Beyond the engine it decides what is node policy rather than job bookkeeping: the
default replication level, refusing work while leaving, whether a GETJOB blocks, and
the memory limit with its eviction policy.
"""

from __future__ import annotations

import random
from typing import Any

from conveyor.core import errors
from conveyor.core.args import AddJobArgs, EngineConfig, GetJobArgs
from conveyor.core.engine import Engine
from conveyor.core.errors import CommandError
from conveyor.core.job import Job
from conveyor.core.waiters import Waiter

# Below maxmemory, the share at which eviction starts (policy "acks").
_SOFT_LIMIT_PERCENT = 95
# Disque's first memory warning level: above it new jobs are replicated externally.
_WARNING_PERCENT = 75
# Slack for what one request may add beyond the job bytes the guard compares.
_GUARD_SLACK_BYTES = 65536


class NodeCore(Engine):
    def __init__(
        self,
        node_id: str,
        seed: bytes,
        rand: random.Random,
        config: EngineConfig | None = None,
        timer_resolution_ms: int = 10,
    ) -> None:
        super().__init__(node_id, seed, rand, config, timer_resolution_ms)
        self.leaving = False
        self.cluster_size = 1
        self.reachable_nodes = 0
        self.maxmemory = 0
        self.maxmemory_policy = "acks"
        self.baseline_bytes = 0  # what the process holds besides jobs (the driver measures it)
        self.client_bytes = 0  # clients' query and output buffers (the driver counts them)
        self.peak_memory = 0
        self.oom_guard = 1 << 62
        self.warning_guard = 1 << 62  # replicates_externally's: see _update_oom_guard

    # -- cluster view -----------------------------------------------------------------------
    def set_leaving(self, leaving: bool) -> None:
        self.leaving = leaving
        self._update_fast_adds()

    def set_cluster_view(self, size: int, reachable: int) -> None:
        self.cluster_size = size
        self.reachable_nodes = reachable
        self._update_fast_adds()

    def _update_fast_adds(self) -> None:
        self._fast_adds = not self.leaving and self.cluster_size == 1

    def default_repl(self) -> int:
        return min(self.cluster_size, 3)

    def replicates_externally(self) -> bool:
        """Whether new jobs go to other nodes only, this node keeping no copy: when it
        is leaving, or (with other nodes around) above 75 % of maxmemory (Disque)."""
        if self.leaving:
            return True
        if self.cluster_size <= 1:
            return False
        # Every ADDJOB asks: below the warning's threshold the estimate alone decides,
        # exactly as memory_warning would (used_memory less what is fixed between limit
        # changes, folded into warning_guard), without computing used memory and its peak.
        if self.memory_estimate() <= self.warning_guard:
            return False
        return self.memory_warning() > 0

    # -- commands ---------------------------------------------------------------------------
    def add_job(
        self, args: AddJobArgs, now_ms: int, wait_repl: bool = False, external: bool = False
    ) -> Job:
        """ADDJOB. With `wait_repl` the job is held in wait-repl (not queued) until the
        cluster's replication calls `replicated`. `external`: the REPLICATE copies are
        all to be made on other nodes (a leaving node always replicates externally)."""
        ttl_s, retry_s = self.check_add(args, external)
        return self.add_checked(args, ttl_s, retry_s, now_ms, wait_repl)

    def check_add(self, args: AddJobArgs, external: bool = False) -> tuple[int, int]:
        """What add_job checks before the job is made, for these options and this view of
        the cluster: (TTL, RETRY) in seconds, or the CommandError. REPLICATE None is
        resolved in `args`. A run of ADDJOBs with the same options checks once, then
        makes each job with add_checked: nothing a job of the run does changes the answer."""
        repl = args.repl
        if repl is None:
            args.repl = repl = self.default_repl()
        ttl_s, retry_s = self.job_times(args)
        external = external or self.leaving
        others_needed = repl if external else repl - 1
        if others_needed > self.reachable_nodes:
            if external and others_needed - 1 == self.reachable_nodes:
                # One short only because this node cannot hold a copy: say why.
                raise CommandError(
                    errors.NOREPL_LEAVING if self.leaving else errors.NOREPL_OUT_OF_MEMORY
                )
            raise CommandError(errors.NOREPL_LEVEL)
        return ttl_s, retry_s

    def get_job(self, args: GetJobArgs, token: Any, now_ms: int) -> list[Job] | Waiter:
        """GETJOB: the jobs taken, or the Waiter the client now blocks on."""
        if self.leaving:
            # Look only: a leaving node must not create queues it will never serve.
            names = [name for name in args.queues if name in self.queues]
            jobs = self.get_jobs(names, args.count, now_ms) if names else []
            if jobs or args.nohang:
                return jobs
            raise CommandError(errors.LEAVING)
        jobs = self.get_jobs(args.queues, args.count, now_ms)
        if jobs or args.nohang:
            return jobs
        deadline = now_ms + args.timeout_ms if args.timeout_ms else 0
        waiter = Waiter(token, args.queues, args.count, args.with_counters, deadline)
        self.block(waiter, now_ms)
        if self.cluster_hooks is not None:
            self.cluster_hooks.blocked(args.queues, now_ms)  # ask other nodes for jobs
        return waiter

    # -- memory -----------------------------------------------------------------------------
    def set_memory_limit(
        self, maxmemory: int, policy: str, baseline_bytes: int, now_ms: int = 0
    ) -> None:
        was_warning = self.memory_warning()
        self.maxmemory = maxmemory
        self.maxmemory_policy = policy
        self.baseline_bytes = baseline_bytes
        self._update_oom_guard()
        if self.memory_warning() > was_warning:
            self.collect_queues_sooner(now_ms)

    def set_client_memory(self, client_bytes: int) -> None:
        """What the clients' buffers hold now: part of used memory and of the limit."""
        self.client_bytes = client_bytes
        self._update_oom_guard()

    def _update_oom_guard(self) -> None:
        # Below this many job bytes no growing command can reach the soft limit, so the
        # hot path compares one int; the exact check (and eviction) runs only above it.
        # warning_guard: the same for memory_warning's first level (replicates_externally).
        if self.maxmemory:
            fixed = self.baseline_bytes + self.client_bytes
            soft_limit = self.maxmemory * _SOFT_LIMIT_PERCENT // 100
            self.oom_guard = soft_limit - fixed - _GUARD_SLACK_BYTES
            self.warning_guard = self.maxmemory // 100 * _WARNING_PERCENT - fixed
        else:
            self.oom_guard = self.warning_guard = 1 << 62

    def memory_warning(self) -> int:
        """Disque's memory warning level: 0, 1 above 75 % of maxmemory, 2 above 95 %."""
        maxmemory = self.maxmemory
        if not maxmemory:
            return 0
        used = self.used_memory()
        if used > maxmemory // 100 * 95:
            return 2
        return 1 if used > maxmemory // 100 * _WARNING_PERCENT else 0

    def used_memory(self) -> int:
        used = self.baseline_bytes + self.client_bytes + self.memory_estimate()
        if used > self.peak_memory:
            self.peak_memory = used
        return used

    def over_memory_limit(self, incoming_bytes: int, now_ms: int) -> bool:
        """Would a command adding `incoming_bytes` exceed maxmemory? Evicts first when the
        policy allows (delivered at-most-once jobs, oldest first)."""
        maxmemory = self.maxmemory
        if not maxmemory:
            return False
        used = self.used_memory() + incoming_bytes
        soft_limit = maxmemory * _SOFT_LIMIT_PERCENT // 100
        if used > soft_limit and self.maxmemory_policy == "acks":
            self.evict(used - soft_limit, now_ms)
            used = self.used_memory() + incoming_bytes
        return used > maxmemory
