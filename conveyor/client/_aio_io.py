"""The asyncio client's connections: discovery, failover, routing to a job's node and
the exchange of one call or one ADDJOB batch (the machinery under `AsyncClient`; the
behaviour is `Client`'s, see `conveyor.client.sync`). Public methods belong in
`conveyor.client.aio`.
"""

from __future__ import annotations

import asyncio
import builtins
import math
import select
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import redis
import redis.asyncio
from redis.asyncio.connection import Connection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from conveyor.client import _batch, _routing
from conveyor.client import _commands as cmd
from conveyor.client._address import Address, format_address
from conveyor.client._base import BaseClient, check_redis_options
from conveyor.client._commands import Call, JobRef
from conveyor.client.errors import (
    ConnectionError,
    ConveyorError,
    ReplyError,
    TimeoutError,
    TooManyConnectionsError,
    error_from_redis,
    reply_error_from_redis,
)
from conveyor.client.job import Hello

T = TypeVar("T")
A = TypeVar("A")  # what an exchange sends: a call, or a batch

# What says the node closed (or reset) a connection. Linux reports the close apart from
# any input (TLS records the event loop has not read yet are no close); elsewhere input
# counts, as in redis-py's blocking pool, on plain connections only (see `_peer_closed`).
_CLOSED_EVENTS: int = getattr(select, "POLLRDHUP", 0) or getattr(select, "POLLIN", 0)
_CLOSE_APART = hasattr(select, "POLLRDHUP")


def _peer_closed(connection: Connection) -> bool:
    """True when the node has closed `connection` though the event loop has not read the
    EOF yet. redis-py's asyncio pool only checks what the loop has read before handing a
    pooled connection out, so a command sent right after the close failed; the blocking
    pool polls the socket itself (`ConnectionPool.get_connection`), as this does."""
    writer = getattr(connection, "_writer", None)  # redis-py keeps its stream private
    sock = None if writer is None else writer.get_extra_info("socket")
    if sock is None or not hasattr(select, "poll"):
        return False  # not connected, or no poll(): redis-py's own check stands alone
    if not _CLOSE_APART and writer.get_extra_info("sslcontext") is not None:
        return False  # pending TLS records would read as a close
    poller = select.poll()
    poller.register(sock.fileno(), _CLOSED_EVENTS)
    return bool(poller.poll(0))


async def _replace_if_closed(connection: Connection) -> None:
    """Connect `connection` again if the node closed it while it sat in the pool, before
    anything is sent on it, so any command (an ADDJOB too) is safe: redis-py's blocking
    pool does the same, once (a new connection found closed too is an error there too).
    A command that fails once sent is never sent again (see `Client`)."""
    if not _peer_closed(connection):
        return
    await connection.disconnect(nowait=True)
    await connection.connect()
    if _peer_closed(connection):
        raise redis.ConnectionError("Connection not ready")


class AsyncTransport(BaseClient):
    """Connections of one `AsyncClient`: the current node, the peers acked directly, the
    calls."""

    def _init_io(self) -> None:
        check_redis_options(redis.asyncio.Redis, self._redis_options)
        self._redis: redis.asyncio.Redis | None = None
        self._lock = asyncio.Lock()
        # Other nodes spoken to directly: the makers of jobs being acked (_routing.py).
        self._peers: dict[Address, redis.asyncio.Redis] = {}
        # Clients given up while other tasks may still have commands in flight on them:
        # each connection is closed as it comes back (see `_retire`).
        self._retired: weakref.WeakSet[redis.asyncio.Redis] = weakref.WeakSet()

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
                client = await self._discover()
                if self._closed:  # close() came while we were connecting
                    await client.aclose()
                    raise ConveyorError("the client is closed")
                self._redis = client
            return self._redis

    async def _discover(self) -> redis.asyncio.Redis:
        """See `SyncTransport._discover`."""
        failures: list[ConnectionError] = []
        refused: ReplyError | None = None
        for address in self._candidates():
            try:
                client, reply = await self._hello_on(address)
            except ConnectionError as exc:
                failures.append(exc)
                continue
            except ReplyError as exc:
                refused = exc
                continue
            client, reply, address = await self._better(client, reply, address)
            self._address, self._prefer = address, None
            try:
                await self._set_hello(reply)
            except BaseException:  # cancelled while old peers closed: never handed out
                await client.aclose()
                raise
            return client
        if refused is not None:
            raise refused
        raise self._unreachable(failures)

    async def _better(
        self, client: redis.asyncio.Redis, reply: Hello, address: Address
    ) -> tuple[redis.asyncio.Redis, Hello, Address]:
        """The node HELLO ranks better than `address`, if it answers; else `address`."""
        better = _routing.better_node(reply, address)
        if better is None:
            return client, reply, address
        try:
            moved, moved_reply = await self._hello_on(better)
        except (ConnectionError, ReplyError):
            return client, reply, address  # the one that answered will do
        except BaseException:  # interrupted, cancelled: nobody will close it otherwise
            await client.aclose()
            raise
        await client.aclose()  # nobody else has it yet
        return moved, moved_reply, better

    async def _move(self, to: Address | None) -> None:
        """Leave the current node: for `to`, or (None) for any other, this one last."""
        client, self._redis = self._redis, None
        if to is None and self._address is not None:
            self._avoid.add(self._address)
        self._prefer = to
        if client is not None:
            await self._retire(client)

    async def _run_routed(self, call: Call[T], refs: Iterable[JobRef]) -> T:
        """A command about jobs, sent to the node that made them (see `Client`)."""
        target = self._route(refs)
        if target is None:
            return await self._run(call)
        if self._closed:  # else a peer connection would be opened that nobody closes
            raise ConveyorError("the client is closed")
        peer = self._peers.get(target)
        if peer is None:
            peer = self._peers[target] = self._new_redis(target)
        try:
            reply = await self._exchange(peer, call, target)
        except TooManyConnectionsError:
            raise  # the peer did not fail: its pool is full
        except ConnectionError:
            if self._peers.get(target) is peer:
                del self._peers[target]
            refresh = self._peer_failed(target)
            await self._retire(peer)
            reply = await self._run(call)
            if refresh:
                await self._refresh_hello()
            return reply
        self._peer_health.answered(target)
        return reply

    async def _ask_hello(self) -> Hello:
        """HELLO on the current node; what it says replaces the nodes known."""
        client = await self._connection()
        address = self._address or self._configured[0]
        try:
            hello = await self._exchange(client, cmd.hello(address[0]), address)
        except TooManyConnectionsError:
            raise
        except ConnectionError:
            await self._drop(client)
            raise
        await self._set_hello(hello)
        return hello

    async def _set_hello(self, hello: Hello) -> None:
        """See `SyncTransport._set_hello`."""
        listed = self._learn_nodes(hello)
        gone = [self._peers.pop(peer) for peer in list(self._peers) if peer not in listed]
        for client in gone:
            await self._retire(client)  # an ack in flight on it still gets its reply

    async def _refresh_hello(self) -> None:
        # The command itself got its reply: a failure here is for the next one to meet.
        try:
            await self._ask_hello()
        except ConveyorError:
            pass

    async def _run_write(self, call: Call[T]) -> T:
        write = _routing.Write(call)
        try:
            return await self._on_current(self._exchange_write, write)
        except TooManyConnectionsError:
            raise  # nothing was sent
        except ConnectionError as exc:
            raise _routing.write_failed(exc, write) from exc

    async def _exchange_write(
        self, client: redis.asyncio.Redis, write: _routing.Write[T], address: Address
    ) -> T:
        return write.call.parse(await self._pooled(client, address, self._send_write, write))

    async def _send_write(self, connection: Connection, write: _routing.Write[T]) -> object:
        # Connected, and a connection the node closed replaced (`_pooled`): from here on
        # the node may get the command, whole or in part.
        write.sent = True
        return await self._send_call(connection, write.call)

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
        await self._retire(client)

    async def _retire(self, client: redis.asyncio.Redis) -> None:
        """Stop using `client` without cutting other tasks' commands in flight on it (see
        `SyncTransport._retire`)."""
        self._retired.add(client)
        await client.connection_pool.disconnect(inuse_connections=False)

    async def _exchange(self, client: redis.asyncio.Redis, call: Call[T], address: Address) -> T:
        return call.parse(await self._pooled(client, address, self._send_call, call))

    async def _send_call(self, connection: Connection, call: Call[T]) -> object:
        await connection.send_command(*call.args)
        if call.wait_s is None:
            return await connection.read_response()
        limit = self._read_timeout(call.wait_s)
        if limit is None:
            return await connection.read_response(timeout=math.inf)
        # Not read_response(timeout=...): on expiry it returns None and leaves the
        # connection open, with a reply still to come.
        async with asyncio.timeout(limit):
            return await connection.read_response(timeout=math.inf)

    async def _pooled(
        self,
        client: redis.asyncio.Redis,
        address: Address,
        talk: Callable[[Connection, A], Awaitable[T]],
        what: A,
    ) -> T:
        """`talk(connection, what)` on a connection of `client`'s pool, given back after;
        redis-py's errors and timeouts come out as Conveyor's, naming `address`."""
        pool = client.connection_pool
        try:
            connection = await pool.get_connection()
            try:
                await _replace_if_closed(connection)
                return await talk(connection, what)
            except (redis.ConnectionError, redis.TimeoutError, builtins.TimeoutError):
                await connection.disconnect(nowait=True)  # this one only: others may be busy
                raise
            finally:
                await pool.release(connection)
                if client in self._retired:
                    await pool.disconnect(inuse_connections=False)
        except redis.RedisError as exc:
            raise error_from_redis(exc, format_address(address)) from exc
        except builtins.TimeoutError as exc:
            where = format_address(address)
            raise TimeoutError("timed out waiting for the reply", where) from exc

    async def _run(self, call: Call[T]) -> T:
        return await self._on_current(self._exchange, call)

    async def _on_current(
        self, exchange: Callable[[redis.asyncio.Redis, A, Address], Awaitable[T]], what: A
    ) -> T:
        """`exchange` on the current node's connection (see `Client._on_current`)."""
        client = await self._connection()
        address = self._address or self._configured[0]
        try:
            return await exchange(client, what, address)
        except TooManyConnectionsError:
            raise  # the node did not fail (see `SyncTransport._on_current`)
        except ConnectionError:
            await self._drop(client)
            raise

    async def _exchange_batch(
        self, client: redis.asyncio.Redis, batch: _batch.AddJobsBatch, address: Address
    ) -> list[str | ReplyError]:
        return await self._pooled(client, address, self._send_batch, batch)

    async def _send_batch(
        self, connection: Connection, batch: _batch.AddJobsBatch
    ) -> list[str | ReplyError]:
        """Send the batch chunk by chunk, each chunk in one write, and read every reply
        (the blocking twin: `SyncTransport._send_batch`).

        Each reply must come within `limit` of the previous one, as for a single command.
        `read_response()` would arm and cancel a timer per reply, which is most of the
        cost of reading a reply that is already buffered; instead one `asyncio.timeout`
        covers the batch and is pushed back at most every `limit / 2` seconds, to 1.5
        `limit` ahead: a stalled node is noticed between `limit` and 1.5 `limit` after
        its last reply, never sooner."""
        limit = self._read_timeout(batch.wait_s)  # None: wait as long as it takes
        loop = asyncio.get_running_loop()
        results: list[str | ReplyError] = []
        append = results.append
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
            # Whatever stopped the batch (cancellation, a timeout), replies may still be
            # on their way: the connection must not serve another command.
            await connection.disconnect(nowait=True)
            raise
        return results

    async def _run_batch(self, batch: _batch.AddJobsBatch) -> list[str | ReplyError]:
        return await self._on_current(self._exchange_batch, batch)
