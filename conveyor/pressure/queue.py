"""`PressureQueue`: the blocking (thread-friendly) pressure client, built on redis-py."""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import Any, TypeVar

import redis
from redis.exceptions import NoScriptError
from redis.retry import Retry

from conveyor.pressure import protocol
from conveyor.pressure.config import (
    client_options,
    default_uid,
    describe_client,
    describe_url,
    holder_alive,
    no_backoff,
    resolve_prefix,
    resolve_url,
)
from conveyor.pressure.errors import (
    PressureConnectionError,
    PressureProtocolError,
    QueueClosed,
)
from conveyor.pressure.keys import QueueKeys, check_key_text
from conveyor.pressure.protocol import Batch, Eval, QueueStats, Step, UnlockResult

T = TypeVar("T")
Data = bytes | bytearray | memoryview | str


def utf8(text: str, what: str) -> bytes:
    """`text` as strict UTF-8; ValueError naming `what` for a lone surrogate, which stands
    for no character (str elements and identities are text, unlike key names, which carry
    undecodable bytes as surrogates: see keys.KEY_ENCODING_ERRORS)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} must be UTF-8 text: {text[exc.start : exc.end]!r} at index {exc.start} "
            "is a lone surrogate, not a character"
        ) from None


def encode(data: Data) -> bytes:
    """Element bytes: str is strict UTF-8 (a lone surrogate is refused before anything is
    sent; pass bytes for data that is not text); what a get returns is always bytes."""
    if isinstance(data, str):
        return utf8(data, "a str queue element")
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"queue elements are bytes or str, not {type(data).__name__}")


def check_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError("queue name must be a non-empty string")
    check_key_text(name, "queue name")
    return name


def translate(exc: BaseException, address: str) -> BaseException:
    """The typed pressure error for a redis-py exception (others pass through unchanged)."""
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return PressureConnectionError(f"cannot reach Redis at {address}: {exc}")
    if isinstance(exc, redis.RedisError):
        return PressureProtocolError(f"Redis at {address} rejected a command: {exc}")
    return exc


def _eval(client: redis.Redis, call: Eval) -> Any:
    # EVALSHA sends 40 bytes instead of the script; a server that lacks it (restarted,
    # SCRIPT FLUSH, failed over) refuses before running anything, and EVAL runs and caches it.
    # execute_command rather than client.evalsha, whose argument-deprecation wrapper costs
    # a measurable share of a one-round-trip put.
    try:
        return client.execute_command(
            "EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args
        )
    except NoScriptError:
        return client.execute_command(
            "EVAL", call.script.source, len(call.keys), *call.keys, *call.args
        )


def _execute(client: redis.Redis, batch: Batch | Eval) -> list[Any]:
    if isinstance(batch, Eval):
        return [_eval(client, batch)]
    if len(batch.commands) == 1 and not batch.transaction:
        return [client.execute_command(*batch.commands[0])]
    pipe = client.pipeline(transaction=batch.transaction)
    for command in batch.commands:
        pipe.execute_command(*command)
    return list(pipe.execute())


def run_sync(client: redis.Redis, step: Step[T], address: str) -> T:
    """Drive a protocol generator; failures are thrown into it so its `finally` can clean up."""
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
                reply = _execute(client, batch)
            except BaseException as exc:
                error = exc
    except redis.RedisError as exc:
        raise translate(exc, address) from exc


def make_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, **client_options(Retry(no_backoff(), 0)))


class QueueSettings:
    """What PressureQueue and AsyncPressureQueue resolve the same way from their arguments."""

    def __init__(
        self, name: str, redis_url: str | None, prefix: str | None, client_uid: str | None
    ) -> None:
        self.name = check_name(name)
        self.prefix = resolve_prefix(prefix)
        self.redis_url = resolve_url(redis_url)
        self.address = describe_url(self.redis_url)
        self.keys = QueueKeys(self.prefix, self.name)
        if isinstance(client_uid, str):
            utf8(client_uid, "client_uid")  # now, not in the packer half way through a call
        self._uid = client_uid

    def __repr__(self) -> str:
        kind = type(self).__name__
        return f"{kind}({self.name!r}, prefix={self.prefix!r}, redis={self.address!r})"

    @property
    def client_uid(self) -> str:
        """Our identity in `:producer`/`:consumer`; per thread unless given explicitly."""
        return self._uid or default_uid()


class PressureQueue(QueueSettings):
    """One pressure queue; safe to share between threads (each thread has its own identity).

    `redis_url` defaults to the REDIS_SERVER/REDIS_PORT/REDIS_DB environment variables, then
    redis://127.0.0.1:6379/0; `prefix` to PRESSURE_PREFIX, then `__pressure__`; `client_uid`
    to `host:pid:thread`. Pass `client` to share an existing redis-py client.
    """

    def __init__(
        self,
        name: str,
        *,
        redis_url: str | None = None,
        prefix: str | None = None,
        client_uid: str | None = None,
        client: redis.Redis | None = None,
    ) -> None:
        super().__init__(name, redis_url, prefix, client_uid)
        self._owns_client = client is None
        self._redis = client if client is not None else make_client(self.redis_url)
        if client is not None:  # errors name the server we talk to, not an unused URL
            self.address = describe_client(client)

    def _run(self, step: Step[T]) -> T:
        return run_sync(self._redis, step, self.address)

    def create(self, bound: int = 0) -> None:
        """Create the queue; `bound` 0 means unbounded. QueueAlreadyExists if it exists."""
        self._run(protocol.create(self.keys, bound))

    def exists(self) -> bool:
        return self._run(protocol.exists(self.keys))

    def length(self) -> int:
        """Elements currently queued (a snapshot)."""
        return self._run(protocol.length(self.keys))

    def len(self) -> int:
        return self.length()

    def closed(self) -> bool:
        return self._run(protocol.is_closed(self.keys))

    def put(self, data: Data, block: bool = True, timeout: float | None = None) -> None:
        """Append `data`, waiting for the producer role and for room unless `block` is False.

        Raises QueueClosed, QueueDoesNotExist, and after `timeout` (or at once when not
        blocking) QueueInUse (role busy) or QueueFull (no room).
        """
        payload = encode(data)
        self._run(protocol.put(self.keys, self.client_uid, payload, block=block, timeout=timeout))

    def put_nowait(self, data: Data) -> None:
        self.put(data, block=False)

    def get(self, block: bool = True, timeout: float | None = None) -> bytes:
        """Remove and return the oldest element.

        Raises QueueClosed once the queue is closed and drained, QueueDoesNotExist (also when
        it is deleted while we wait), and after `timeout` (or at once when not blocking)
        QueueInUse (role busy) or QueueEmpty.
        """
        return self._run(protocol.get(self.keys, self.client_uid, block=block, timeout=timeout))

    def get_nowait(self) -> bytes:
        return self.get(block=False)

    def close(self, block: bool = True, timeout: float | None = None) -> None:
        """Close the queue for producers (at most once; QueueClosed the second time)."""
        self._run(protocol.close(self.keys, self.client_uid, block=block, timeout=timeout))

    def delete(self, timeout: float | None = None, *, force: bool = False) -> None:
        """Delete the queue, waking blocked clients; waits for both roles to be free.

        After `timeout` raises QueueInUse with the queue half deleted (`:bound` gone); finish
        with `unlock` (dead holder) or `delete(force=True)`, which removes all 12 keys at once.
        """
        if force:
            self._run(protocol.force_delete(self.keys))
        else:
            self._run(protocol.delete(self.keys, timeout=timeout))

    def stats(self) -> QueueStats:
        return self._run(protocol.stats(self.keys))

    def unlock(
        self, *, producer: bool = True, consumer: bool = True, force: bool = False
    ) -> UnlockResult:
        """Return role tokens held by crashed clients (refuses live local holders unless force)."""
        return self._run(
            protocol.unlock(
                self.keys,
                producer=producer,
                consumer=consumer,
                force=force,
                is_alive=holder_alive,
            )
        )

    def __iter__(self) -> Iterator[bytes]:
        """Yield elements until the queue is closed and drained."""
        while True:
            try:
                yield self.get()
            except QueueClosed:
                return

    def disconnect(self) -> None:
        """Close our Redis connections (not the queue: that is `close`)."""
        if self._owns_client:
            self._redis.close()

    def __enter__(self) -> PressureQueue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.disconnect()


def list_queues(
    *, redis_url: str | None = None, prefix: str | None = None, client: redis.Redis | None = None
) -> list[str]:
    """Names of existing queues under `prefix`."""
    url = resolve_url(redis_url)
    owned = client is None
    redis_client = client if client is not None else make_client(url)
    address = describe_url(url) if owned else describe_client(redis_client)
    try:
        step = protocol.list_queues(resolve_prefix(prefix))
        return run_sync(redis_client, step, address)
    finally:
        if owned:
            redis_client.close()
