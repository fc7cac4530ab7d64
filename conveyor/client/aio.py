"""`AsyncClient`: the asyncio Conveyor/Disque client, on `redis.asyncio.Redis`.

Same API as `Client`, with coroutines and async iterators. Discovery and failover work
the same way (see `conveyor.client.sync`).
"""

from __future__ import annotations

import asyncio
import builtins
import math
from collections.abc import AsyncIterator, Iterable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import redis
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from conveyor.client import _batch, _routing
from conveyor.client import _commands as cmd
from conveyor.client._address import Address, format_address
from conveyor.client._base import BaseClient
from conveyor.client._commands import Body, Call, JobRef
from conveyor.client.errors import (
    ConnectionError,
    ConveyorError,
    LeavingError,
    ReplyError,
    TimeoutError,
    error_from_redis,
    reply_error_from_redis,
)
from conveyor.client.job import Hello, Job

T = TypeVar("T")


class AsyncClient(BaseClient):
    """An asyncio client; use one per event loop.

    >>> async with AsyncClient(["127.0.0.1:7711"]) as client:
    ...     await client.add_job("emails", b"hello")
    ...     job = await client.get_job("emails")
    ...     await client.ack(job)
    """

    def _init_io(self) -> None:
        self._redis: redis.asyncio.Redis | None = None
        self._lock = asyncio.Lock()
        # Other nodes spoken to directly: the makers of jobs being acked (_routing.py).
        self._peers: dict[Address, redis.asyncio.Redis] = {}

    # -- connection ------------------------------------------------------------------------
    async def get_redis(self) -> redis.asyncio.Redis:
        """The redis-py client of the current node (connecting first if needed)."""
        return await self._connection()

    async def connect(self) -> str:
        """Connect now rather than on the first command; returns the node's address."""
        await self._connection()
        assert self._address is not None
        return format_address(self._address)

    def _new_redis(self, address: Address) -> redis.asyncio.Redis:
        kwargs = self._redis_kwargs(address)
        kwargs.setdefault("retry", Retry(NoBackoff(), 0))
        return redis.asyncio.Redis(**kwargs)

    async def _connection(self) -> redis.asyncio.Redis:
        current = self._redis
        if current is not None:
            return current
        async with self._lock:
            if self._closed:
                raise ConveyorError("the client is closed")
            if self._redis is None:
                self._redis = await self._discover()
            return self._redis

    async def _discover(self) -> redis.asyncio.Redis:
        failures: list[str] = []
        last: ConnectionError | None = None
        for address in self._candidates():
            try:
                client, reply = await self._hello_on(address)
            except ConnectionError as exc:
                failures.append(str(exc))
                last = exc
                continue
            better = _routing.better_node(reply, address)
            if better is not None:
                try:
                    client, reply, address = (*await self._hello_on(better), better)
                except ConnectionError:
                    pass  # the one that answered will do
            self._address, self._hello, self._prefer = address, reply, None
            return client
        raise self._unreachable(failures, last)

    async def _move(self, to: Address | None) -> None:
        """Leave the current node: for `to`, or (None) for any other, this one last."""
        client, self._redis = self._redis, None
        if to is None and self._address is not None:
            self._avoid.add(self._address)
        self._prefer = to
        if client is not None:
            await client.aclose()

    async def _run_routed(self, call: Call[T], refs: Iterable[JobRef]) -> T:
        """A command about jobs, sent to the node that made them (see `Client`)."""
        target = _routing.route((cmd.job_id_of(ref) for ref in refs), self._hello)
        if target is None:
            return await self._run(call)
        peer = self._peers.get(target)
        if peer is None:
            peer = self._peers[target] = self._new_redis(target)
        try:
            return await self._exchange(peer, call, target)
        except ConnectionError:
            self._peers.pop(target, None)
            await peer.aclose()
            return await self._run(call)

    async def _run_write(self, call: Call[T]) -> T:
        try:
            return await self._run(call)
        except ConnectionError as exc:
            raise _routing.maybe_added(exc) from exc

    async def _hello_on(self, address: Address) -> tuple[redis.asyncio.Redis, Hello]:
        """A redis-py client on `address` and the node's HELLO; in RESP2 if the node
        refuses redis-py's RESP3 handshake (a Disque server)."""
        while True:
            client = self._new_redis(address)
            try:
                return client, await self._exchange(client, cmd.hello(address[0]), address)
            except ReplyError as exc:
                await client.aclose()
                if not self._resp3_refused(address, exc):
                    raise
            except BaseException:
                await client.aclose()
                raise

    async def _drop(self, client: redis.asyncio.Redis) -> None:
        if self._redis is client:
            self._redis = None
        await client.aclose()

    async def _exchange(self, client: redis.asyncio.Redis, call: Call[T], address: Address) -> T:
        pool = client.connection_pool
        where = format_address(address)
        try:
            connection = await pool.get_connection()
            try:
                await connection.send_command(*call.args)
                if call.wait_s is None:
                    reply = await connection.read_response()
                else:
                    limit = self._read_timeout(call.wait_s)
                    if limit is None:
                        reply = await connection.read_response(timeout=math.inf)
                    else:
                        # Not read_response(timeout=...): on expiry it returns None and
                        # leaves the connection open, with a reply still to come.
                        async with asyncio.timeout(limit):
                            reply = await connection.read_response(timeout=math.inf)
            finally:
                await pool.release(connection)
        except redis.RedisError as exc:
            raise error_from_redis(exc, where) from exc
        except builtins.TimeoutError as exc:
            raise TimeoutError("timed out waiting for the reply", where) from exc
        return call.parse(reply)

    async def _run(self, call: Call[T]) -> T:
        client = await self._connection()
        address = self._address or self._configured[0]
        try:
            return await self._exchange(client, call, address)
        except ConnectionError:
            await self._drop(client)
            raise

    async def _exchange_batch(
        self, client: redis.asyncio.Redis, batch: _batch.AddJobsBatch, address: Address
    ) -> list[str | ReplyError]:
        """Send the batch chunk by chunk on one pooled connection, each chunk in one
        write, and read every reply (see `Client._exchange_batch`).

        Each reply must come within `limit` of the previous one, as for a single command.
        `read_response()` would arm and cancel a timer per reply, which is most of the
        cost of reading a reply that is already buffered; instead one `asyncio.timeout`
        covers the batch and is pushed back at most every `limit / 2` seconds, to 1.5
        `limit` ahead: a stalled node is noticed between `limit` and 1.5 `limit` after
        its last reply, never sooner."""
        pool = client.connection_pool
        where = format_address(address)
        limit = self._read_timeout(batch.wait_s)  # None: wait as long as it takes
        loop = asyncio.get_running_loop()
        results: list[str | ReplyError] = []
        append = results.append
        try:
            connection = await pool.get_connection()
            try:
                read = connection.read_response
                async with asyncio.timeout(None) as deadline:
                    moved = loop.time()
                    for count, packed in batch.chunks():
                        if limit is not None:
                            moved = loop.time()
                            deadline.reschedule(moved + 1.5 * limit)
                        await connection.send_packed_command([packed])
                        for _ in range(count):
                            try:
                                reply = await read(timeout=math.inf)
                            except redis.ResponseError as exc:
                                append(reply_error_from_redis(exc))
                            else:
                                append(_batch.reply_id(reply))
                            if limit is not None:
                                now = loop.time()
                                if now - moved > limit / 2:
                                    moved = now
                                    deadline.reschedule(now + 1.5 * limit)
            except BaseException:
                # Whatever stopped the batch (cancellation, a timeout), replies may still
                # be on their way: the connection must not serve another command.
                await connection.disconnect(nowait=True)
                raise
            finally:
                await pool.release(connection)
        except redis.RedisError as exc:
            raise error_from_redis(exc, where) from exc
        except builtins.TimeoutError as exc:
            raise TimeoutError("timed out waiting for the reply", where) from exc
        return results

    async def _run_batch(self, batch: _batch.AddJobsBatch) -> list[str | ReplyError]:
        client = await self._connection()
        address = self._address or self._configured[0]
        try:
            return await self._exchange_batch(client, batch, address)
        except ConnectionError:
            await self._drop(client)
            raise

    async def execute_command(self, *args: Any) -> Any:
        """Send any command; the reply as redis-py returns it (bytes undecoded)."""
        return await self._run(cmd.raw(*args))

    async def close(self) -> None:
        """Close every connection. The client cannot be used afterwards."""
        self._closed = True
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
        client = await self._connection()
        address = self._address or self._configured[0]
        try:
            hello = await self._exchange(client, cmd.hello(address[0]), address)
        except ConnectionError:
            await self._drop(client)
            raise
        self._hello = hello
        return hello

    async def ping(self) -> bool:
        return await self._run(cmd.ping())
