"""`AsyncClient`: the asyncio Conveyor/Disque client, on `redis.asyncio.Redis`.

Same API as `Client`, with coroutines and async iterators. Discovery and failover work
the same way (see `conveyor.client.sync`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from types import TracebackType
from typing import Any, Self

import redis
import redis.asyncio

from conveyor.client import _batch
from conveyor.client import _commands as cmd
from conveyor.client._address import format_address
from conveyor.client._aio_io import AsyncTransport
from conveyor.client._commands import Body, JobRef
from conveyor.client.errors import (
    LeavingError,
)
from conveyor.client.job import Hello, Job


class AsyncClient(AsyncTransport):
    """An asyncio client; use one per event loop.

    >>> async with AsyncClient(["127.0.0.1:7711"]) as client:
    ...     await client.add_job("emails", b"hello")
    ...     job = await client.get_job("emails")
    ...     await client.ack(job)
    """

    # -- connection ------------------------------------------------------------------------
    async def get_redis(self) -> redis.asyncio.Redis:
        """The redis-py client of the current node (connecting first if needed)."""
        return await self._connection()

    async def connect(self) -> str:
        """Connect now rather than on the first command; returns the node's address."""
        await self._connection()
        assert self._address is not None
        return format_address(self._address)

    async def execute_command(self, *args: Any) -> Any:
        """Send any command; the reply as redis-py returns it (bytes undecoded)."""
        return await self._run(cmd.raw(*args))

    async def close(self) -> None:
        """Close every connection. The client cannot be used afterwards."""
        # Set before waiting for the lock: a connect holding it sees it when done.
        self._closed = True
        async with self._lock:
            client, self._redis = self._redis, None
            peers, self._peers = list(self._peers.values()), {}
        for other in [client, *peers]:
            if other is not None:
                await other.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    # -- jobs ------------------------------------------------------------------------------
    async def add_job(
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
        """ADDJOB; returns the new job's ID (see `Client.add_job`)."""
        return await self._run_write(
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

    async def add_jobs(
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
        """One ADDJOB per body, pipelined; the IDs in order, or `BatchError` if some
        failed (see `Client.add_jobs`)."""
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
        return _batch.job_ids(await self._run_batch(batch))

    async def get_jobs(
        self,
        queues: str | bytes | Sequence[str | bytes],
        count: int = 1,
        timeout_ms: int | None = None,
        nohang: bool = False,
        with_counters: bool = False,
    ) -> list[Job]:
        """GETJOB (see `Client.get_jobs`). Cancelling the task closes its connection."""
        call = cmd.get_jobs(queues, count, timeout_ms, nohang, with_counters)
        try:
            jobs = await self._run(call)
        except LeavingError:
            await self._move(None)
            jobs = await self._run(call)
        target = self._moved(jobs)
        if target is not None:
            await self._move(target)
        return jobs

    async def get_job(
        self,
        queues: str | bytes | Sequence[str | bytes],
        timeout_ms: int | None = None,
        nohang: bool = False,
        with_counters: bool = False,
    ) -> Job | None:
        jobs = await self.get_jobs(queues, 1, timeout_ms, nohang, with_counters)
        return jobs[0] if jobs else None

    async def ack(self, *jobs: JobRef) -> int:
        return await self._run_routed(cmd.ids_command("ACKJOB", jobs), jobs)

    async def fast_ack(self, *jobs: JobRef) -> int:
        return await self._run_routed(cmd.ids_command("FASTACK", jobs), jobs)

    async def nack(self, *jobs: JobRef, delay: int | None = None) -> int:
        return await self._run_routed(cmd.nack(jobs, delay), jobs)

    async def working(self, job: JobRef) -> int:
        return await self._run_routed(cmd.working(job), (job,))

    async def enqueue(self, *jobs: JobRef) -> int:
        return await self._run(cmd.ids_command("ENQUEUE", jobs))

    async def dequeue(self, *jobs: JobRef) -> int:
        return await self._run(cmd.ids_command("DEQUEUE", jobs))

    async def del_job(self, *jobs: JobRef) -> int:
        return await self._run(cmd.ids_command("DELJOB", jobs))

    async def show(self, job: JobRef) -> dict[str, Any] | None:
        return await self._run_routed(cmd.show(job), (job,))

    async def scan_jobs(
        self,
        queue: str | bytes | None = None,
        states: str | Iterable[str] = (),
        count: int | None = None,
        busyloop: bool = False,
    ) -> AsyncIterator[str]:
        """JSCAN over all pages: `async for job_id in client.scan_jobs(...)`."""
        wanted = cmd.normalize_states(states)
        cursor = "0"
        while True:
            cursor, ids = await self._run(cmd.jscan(cursor, count, queue, wanted, busyloop))
            for job_id in ids:
                yield job_id
            if cursor == "0":
                return

    # -- queues ----------------------------------------------------------------------------
    async def qlen(self, queue: str | bytes) -> int:
        return await self._run(cmd.qlen(queue))

    async def qstat(self, queue: str | bytes) -> dict[str, Any] | None:
        return await self._run(cmd.qstat(queue))

    async def qpeek(self, queue: str | bytes, count: int = 1) -> list[Job]:
        return await self._run(cmd.qpeek(queue, count))

    async def pause(self, queue: str | bytes, *options: str) -> str:
        return await self._run(cmd.pause(queue, options))

    async def scan_queues(
        self,
        count: int | None = None,
        minlen: int | None = None,
        maxlen: int | None = None,
        importrate: int | None = None,
        busyloop: bool = False,
    ) -> AsyncIterator[str]:
        """QSCAN over all pages: `async for name in client.scan_queues(...)`."""
        cursor = "0"
        while True:
            cursor, names = await self._run(
                cmd.qscan(cursor, count, minlen, maxlen, importrate, busyloop)
            )
            for name in names:
                yield name
            if cursor == "0":
                return

    # -- server ----------------------------------------------------------------------------
    async def info(self, section: str | None = None) -> dict[str, Any]:
        return await self._run(cmd.info(section))

    async def hello(self) -> Hello:
        """HELLO; also refreshes the nodes the client may fail over to."""
        return await self._ask_hello()

    async def ping(self) -> bool:
        return await self._run(cmd.ping())
