"""`Client`: the blocking Conveyor/Disque client, on redis-py's `redis.Redis`.

Discovery: the first command connects to the first reachable node of the list given to
the constructor (in random order) and asks it HELLO; the nodes HELLO reports are
remembered, and a better-ranked one is preferred. When the connection fails, the command
raises `ConnectionError` (commands are never retried on their own: ADDJOB twice is two
jobs) and the next command connects again, trying the current node, the configured
ones, then the discovered ones. ACKJOB, FASTACK, NACK, WORKING and SHOW go to the node
that made the job (skipped for a while once it failed); a -LEAVING node is left;
consumers follow their jobs (_routing.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, Self

import redis

from conveyor.client import _batch
from conveyor.client import _commands as cmd
from conveyor.client._address import format_address
from conveyor.client._commands import Body, JobRef
from conveyor.client._sync_io import SyncTransport
from conveyor.client.errors import (
    LeavingError,
)
from conveyor.client.job import Hello, Job


class Client(SyncTransport):
    """A blocking client. Thread-safe: redis-py's connection pool is shared.

    >>> with Client(["127.0.0.1:7711"]) as client:
    ...     job_id = client.add_job("emails", b"hello")
    ...     job = client.get_job("emails")
    ...     client.ack(job)
    """

    # -- connection ------------------------------------------------------------------------
    @property
    def redis(self) -> redis.Redis:
        """The redis-py client of the current node (connecting first if needed)."""
        return self._connection()

    def connect(self) -> str:
        """Connect now rather than on the first command; returns the node's address."""
        self._connection()
        assert self._address is not None
        return format_address(self._address)

    def execute_command(self, *args: Any) -> Any:
        """Send any command; the reply as redis-py returns it (bytes undecoded)."""
        return self._run(cmd.raw(*args))

    def close(self) -> None:
        """Close every connection. The client cannot be used afterwards."""
        with self._lock:
            self._closed = True
            client, self._redis = self._redis, None
            peers, self._peers = list(self._peers.values()), {}
        for other in [client, *peers]:
            if other is not None:
                other.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- jobs ------------------------------------------------------------------------------
    def add_job(
        self,
        queue: str | bytes,
        body: Body,
        *,
        replicate: int | None = None,
        delay: int | None = None,
        retry: int | None = None,
        ttl: int | None = None,
        maxlen: int | None = None,
        asynchronous: bool = False,
        timeout_ms: int = 0,
    ) -> str:
        """ADDJOB; returns the new job's ID. Times are in seconds except `timeout_ms`,
        how long to wait for synchronous replication (0: as long as the node wants).

        A connection lost or timed out once the ADDJOB was sent raises `ConnectionError`
        saying the job may or may not have been added: it is never sent again on its own.
        One that failed before anything was sent (no node reachable, a connect refused)
        says the ADDJOB was not sent."""
        return self._run_write(
            cmd.add_job(
                queue,
                body,
                replicate=replicate,
                delay=delay,
                retry=retry,
                ttl=ttl,
                maxlen=maxlen,
                asynchronous=asynchronous,
                timeout_ms=timeout_ms,
            )
        )

    def add_jobs(
        self,
        queue: str | bytes,
        bodies: Sequence[Body],
        *,
        replicate: int | None = None,
        delay: int | None = None,
        retry: int | None = None,
        ttl: int | None = None,
        maxlen: int | None = None,
        asynchronous: bool = False,
        timeout_ms: int = 0,
    ) -> list[str]:
        """One ADDJOB per body, same options for all, pipelined; the IDs in order.

        Much cheaper on the client than `add_job` in a loop or a redis-py pipeline. If
        some ADDJOBs get an error reply, the others still run and `BatchError` is raised,
        with `.results`: per body, its ID or its typed `ReplyError`. A connection failure
        raises `ConnectionError`; jobs of the batch may then exist or not (never retried).
        """
        batch = _batch.add_jobs(
            queue,
            bodies,
            replicate=replicate,
            delay=delay,
            retry=retry,
            ttl=ttl,
            maxlen=maxlen,
            asynchronous=asynchronous,
            timeout_ms=timeout_ms,
        )
        if not len(batch):
            return []
        return _batch.job_ids(self._run_batch(batch))

    def get_jobs(
        self,
        queues: str | bytes | Sequence[str | bytes],
        count: int = 1,
        timeout_ms: int | None = None,
        nohang: bool = False,
        with_counters: bool = False,
    ) -> list[Job]:
        """GETJOB: up to `count` jobs from `queues`. Blocks until a job arrives, for at
        most `timeout_ms` (None or 0: forever) unless `nohang`; [] when nothing came.

        A node that answers -LEAVING is left for another, and the GETJOB sent there;
        a consumer whose jobs mostly come from another node moves to it (`follow_jobs`)."""
        call = cmd.get_jobs(queues, count, timeout_ms, nohang, with_counters)
        try:
            jobs = self._run(call)
        except LeavingError:
            self._move(None)
            jobs = self._run(call)
        target = self._moved(jobs)
        if target is not None:
            self._move(target)
        return jobs

    def get_job(
        self,
        queues: str | bytes | Sequence[str | bytes],
        timeout_ms: int | None = None,
        nohang: bool = False,
        with_counters: bool = False,
    ) -> Job | None:
        """GETJOB for one job; None when none came."""
        jobs = self.get_jobs(queues, 1, timeout_ms, nohang, with_counters)
        return jobs[0] if jobs else None

    def ack(self, *jobs: JobRef) -> int:
        """ACKJOB; the number of jobs that were known and not yet acknowledged."""
        return self._run_routed(cmd.ids_command("ACKJOB", jobs), jobs)

    def fast_ack(self, *jobs: JobRef) -> int:
        """FASTACK; the number of jobs deleted on this node."""
        return self._run_routed(cmd.ids_command("FASTACK", jobs), jobs)

    def nack(self, *jobs: JobRef, delay: int | None = None) -> int:
        """NACK (put back now, or after `delay` seconds; counts a nack)."""
        return self._run_routed(cmd.nack(jobs, delay), jobs)

    def working(self, job: JobRef) -> int:
        """WORKING: postpone the next delivery; returns the job's RETRY in seconds."""
        return self._run_routed(cmd.working(job), (job,))

    def enqueue(self, *jobs: JobRef) -> int:
        """ENQUEUE: put active jobs back in their queue."""
        return self._run(cmd.ids_command("ENQUEUE", jobs))

    def dequeue(self, *jobs: JobRef) -> int:
        """DEQUEUE: take queued jobs out of their queue."""
        return self._run(cmd.ids_command("DEQUEUE", jobs))

    def del_job(self, *jobs: JobRef) -> int:
        """DELJOB: delete jobs on this node only."""
        return self._run(cmd.ids_command("DELJOB", jobs))

    def show(self, job: JobRef) -> dict[str, Any] | None:
        """SHOW as a dict (Disque's field names); None for an unknown job."""
        return self._run_routed(cmd.show(job), (job,))

    def scan_jobs(
        self,
        queue: str | bytes | None = None,
        states: str | Iterable[str] = (),
        count: int | None = None,
        busyloop: bool = False,
    ) -> Iterator[str]:
        """JSCAN over all pages: job IDs, optionally of one queue and some states."""
        wanted = cmd.normalize_states(states)
        cursor = "0"
        while True:
            cursor, ids = self._run(cmd.jscan(cursor, count, queue, wanted, busyloop))
            yield from ids
            if cursor == "0":
                return

    # -- queues ----------------------------------------------------------------------------
    def qlen(self, queue: str | bytes) -> int:
        return self._run(cmd.qlen(queue))

    def qstat(self, queue: str | bytes) -> dict[str, Any] | None:
        """QSTAT as a dict; None when the queue does not exist."""
        return self._run(cmd.qstat(queue))

    def qpeek(self, queue: str | bytes, count: int = 1) -> list[Job]:
        """QPEEK: the oldest `count` jobs (newest first when negative), left queued."""
        return self._run(cmd.qpeek(queue, count))

    def pause(self, queue: str | bytes, *options: str) -> str:
        """PAUSE queue in|out|all|none|state|bcast...; returns the resulting state."""
        return self._run(cmd.pause(queue, options))

    def scan_queues(
        self,
        count: int | None = None,
        minlen: int | None = None,
        maxlen: int | None = None,
        importrate: int | None = None,
        busyloop: bool = False,
    ) -> Iterator[str]:
        """QSCAN over all pages: queue names."""
        cursor = "0"
        while True:
            cursor, names = self._run(
                cmd.qscan(cursor, count, minlen, maxlen, importrate, busyloop)
            )
            yield from names
            if cursor == "0":
                return

    # -- server ----------------------------------------------------------------------------
    def info(self, section: str | None = None) -> dict[str, Any]:
        return self._run(cmd.info(section))

    def hello(self) -> Hello:
        """HELLO; also refreshes the nodes the client may fail over to."""
        return self._ask_hello()

    def ping(self) -> bool:
        return self._run(cmd.ping())
