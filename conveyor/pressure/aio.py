"""`AsyncPressureQueue`: the asyncio twin of `PressureQueue`, on `redis.asyncio`.

It runs the very same protocol generators; only the I/O differs. Cancelling a waiting
coroutine (e.g. `asyncio.wait_for`) gives its role token back like any other failure; a
BRPOP in flight is waited for first (at most its chunk), so what Redis popped for it is
given back too rather than lost with the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, TypeVar

import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry
from redis.exceptions import NoScriptError

from conveyor.pressure import protocol
from conveyor.pressure.config import (
    client_options,
    describe_client,
    holder_alive,
    no_backoff,
)
from conveyor.pressure.errors import QueueClosed
from conveyor.pressure.protocol import Batch, Eval, QueueStats, Step, UnlockResult
from conveyor.pressure.queue import Data, QueueSettings, encode, translate
from conveyor.pressure.scripts import give_back
from conveyor.pressure.steps import WAIT_CHUNK

T = TypeVar("T")
# How long a cancelled BRPOP's reply is still waited for: its own timeout (at most one
# chunk) and a margin for the round trip.
GIVE_BACK_WAIT = WAIT_CHUNK + 1.0
# Give-backs still running after their caller was cancelled again: a task the loop only
# holds weakly must not be collected half way.
_giving_back: set[asyncio.Task[None]] = set()


async def _eval(client: aredis.Redis, call: Eval) -> Any:
    # As queue._eval: EVALSHA, and EVAL when the server does not have the script (yet).
    try:
        return await client.execute_command(
            "EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args
        )
    except NoScriptError:
        return await client.execute_command(
            "EVAL", call.script.source, len(call.keys), *call.keys, *call.args
        )


async def _pop(client: aredis.Redis, batch: Batch) -> list[Any]:
    """A BRPOP that cancellation cannot make lose what it popped.

    Once sent, Redis may serve it at any moment; cancelled before the reply is read,
    redis-py would drop the connection with the reply (an element, a role or room token)
    still in it. So the BRPOP runs shielded and, on cancellation, its reply is still
    awaited and what it took pushed back, before the CancelledError goes on into the step.
    """
    pending = asyncio.ensure_future(client.execute_command(*batch.commands[0]))
    try:
        return [await asyncio.shield(pending)]
    except asyncio.CancelledError:
        undo = asyncio.ensure_future(_give_back(client, batch, pending))
        _giving_back.add(undo)
        undo.add_done_callback(_giving_back.discard)
        await asyncio.shield(undo)  # cancelled again: it still finishes, unawaited
        raise


async def _give_back(client: aredis.Redis, batch: Batch, pending: asyncio.Future[Any]) -> None:
    done, _ = await asyncio.wait({pending}, timeout=GIVE_BACK_WAIT)
    if not done:
        pending.cancel()  # drops the connection: what it took, if anything, is lost
        return
    if pending.cancelled() or pending.exception() is not None:
        return
    undo = give_back(batch, pending.result())
    if undo is None:
        return
    try:
        await _execute(client, undo)
    except redis.RedisError:
        pass  # lost with the connection, like a reply lost; `unlock` repairs what strands


async def _execute(client: aredis.Redis, batch: Batch | Eval) -> list[Any]:
    if isinstance(batch, Eval):
        return [await _eval(client, batch)]
    if batch.popped is not None:
        return await _pop(client, batch)
    if len(batch.commands) == 1 and not batch.transaction:
        return [await client.execute_command(*batch.commands[0])]
    pipe = client.pipeline(transaction=batch.transaction)
    for command in batch.commands:
        pipe.execute_command(*command)
    return list(await pipe.execute())


async def run_async(client: aredis.Redis, step: Step[T], address: str) -> T:
    """Drive a protocol generator; failures (cancellation too) are thrown into it."""
    reply: list[Any] | None = None
    error: BaseException | None = None
    try:
        while True:
            try:
                batch = step.send(reply) if error is None else step.throw(error)
            except StopIteration as stop:
                return stop.value
            error = None
            try:
                reply = await _execute(client, batch)
            except BaseException as exc:
                error = exc
    except redis.RedisError as exc:
        raise translate(exc, address) from exc


def make_async_client(url: str) -> aredis.Redis:
    return aredis.Redis.from_url(url, **client_options(Retry(no_backoff(), 0)))


class AsyncPressureQueue(QueueSettings):
    """Same constructor and methods as `PressureQueue`, as coroutines; `async for` drains."""

    def __init__(
        self,
        name: str,
        *,
        redis_url: str | None = None,
        prefix: str | None = None,
        client_uid: str | None = None,
        client: aredis.Redis | None = None,
    ) -> None:
        super().__init__(name, redis_url, prefix, client_uid)
        self._owns_client = client is None
        self._redis = client if client is not None else make_async_client(self.redis_url)
        if client is not None:  # errors name the server we talk to, not an unused URL
            self.address = describe_client(client)

    async def _run(self, step: Step[T]) -> T:
        return await run_async(self._redis, step, self.address)

    async def create(self, bound: int = 0) -> None:
        await self._run(protocol.create(self.keys, bound))

    async def exists(self) -> bool:
        return await self._run(protocol.exists(self.keys))

    async def length(self) -> int:
        return await self._run(protocol.length(self.keys))

    async def len(self) -> int:
        return await self.length()

    async def closed(self) -> bool:
        return await self._run(protocol.is_closed(self.keys))

    async def put(self, data: Data, block: bool = True, timeout: float | None = None) -> None:
        payload = encode(data)
        await self._run(
            protocol.put(self.keys, self.client_uid, payload, block=block, timeout=timeout)
        )

    async def put_nowait(self, data: Data) -> None:
        await self.put(data, block=False)

    async def get(self, block: bool = True, timeout: float | None = None) -> bytes:
        return await self._run(
            protocol.get(self.keys, self.client_uid, block=block, timeout=timeout)
        )

    async def get_nowait(self) -> bytes:
        return await self.get(block=False)

    async def close(self, block: bool = True, timeout: float | None = None) -> None:
        await self._run(protocol.close(self.keys, self.client_uid, block=block, timeout=timeout))

    async def delete(self, timeout: float | None = None, *, force: bool = False) -> None:
        if force:
            await self._run(protocol.force_delete(self.keys))
        else:
            await self._run(protocol.delete(self.keys, timeout=timeout))

    async def stats(self) -> QueueStats:
        return await self._run(protocol.stats(self.keys))

    async def unlock(
        self, *, producer: bool = True, consumer: bool = True, force: bool = False
    ) -> UnlockResult:
        return await self._run(
            protocol.unlock(
                self.keys,
                producer=producer,
                consumer=consumer,
                force=force,
                is_alive=holder_alive,
            )
        )

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            try:
                yield await self.get()
            except QueueClosed:
                return

    async def disconnect(self) -> None:
        if self._owns_client:
            await self._redis.aclose()

    async def __aenter__(self) -> AsyncPressureQueue:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.disconnect()
