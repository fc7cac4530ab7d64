"""The pressure protocol's operations, written once for both the sync and the asyncio queue.

Each operation is a generator that yields a `Batch` of Redis commands and receives the list
of replies; `queue.run_sync` and `aio.run_async` do the I/O. Keeping the steps free of I/O
means the two clients cannot drift apart.

Every operation that takes a role (producer or consumer) gives its token back in a
`finally`, so errors, timeouts and exceptions thrown in by the driver (cancellation,
connection loss) all return it; only a hard process death can strand it (see `unlock`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from conveyor.pressure.errors import (
    PressureProtocolError,
    QueueAlreadyExists,
    QueueClosed,
    QueueDoesNotExist,
    QueueEmpty,
    QueueFull,
    QueueInUse,
)
from conveyor.pressure.keys import QueueKeys, bound_key_pattern, name_from_bound_key

T = TypeVar("T")
Command = tuple[str | bytes | int | float, ...]

# Blocking waits are cut into calls no longer than this, so that a deleted queue, a caller's
# deadline and the client's socket timeout are all noticed between calls.
WAIT_CHUNK = 1.0
# Redis truncates BRPOP timeouts to whole milliseconds and 0 means "forever".
MIN_WAIT = 0.01


@dataclass(frozen=True, slots=True)
class Batch:
    """Commands sent together: in MULTI/EXEC when `transaction`, else as a plain pipeline."""

    commands: tuple[Command, ...]
    transaction: bool


Step = Generator[Batch, list[Any], T]


def one(*command: str | bytes | int | float) -> Batch:
    return Batch((command,), transaction=False)


def multi(*commands: Command) -> Batch:
    return Batch(commands, transaction=True)


class Deadline:
    """When a blocking operation gives up; `timeout=None` never does."""

    def __init__(self, timeout: float | None) -> None:
        if timeout is not None and timeout < 0:
            raise ValueError("timeout must be a non-negative number of seconds")
        self._at = None if timeout is None else time.monotonic() + timeout

    def next_wait(self) -> float | None:
        """Seconds for the next blocking call, or None once the deadline has passed."""
        if self._at is None:
            return WAIT_CHUNK
        left = self._at - time.monotonic()
        if left <= 0:
            return None
        return round(max(MIN_WAIT, min(WAIT_CHUNK, left)), 3)


@dataclass(frozen=True, slots=True)
class QueueStats:
    """A snapshot of one queue, read in one MULTI/EXEC."""

    name: str
    bound: int
    length: int
    closed: bool
    producer: str | None
    consumer: str | None
    producer_busy: bool
    consumer_busy: bool
    produced_messages: int
    produced_bytes: int
    consumed_messages: int
    consumed_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class UnlockResult:
    """What `unlock` found and did."""

    producer: str | None
    consumer: str | None
    producer_released: bool
    consumer_released: bool
    not_full_restored: bool


def _missing(keys: QueueKeys) -> QueueDoesNotExist:
    return QueueDoesNotExist(f"queue {keys.name!r} does not exist (no key {keys.bound!r})")


def _closed(keys: QueueKeys) -> QueueClosed:
    return QueueClosed(f"queue {keys.name!r} is closed")


def _int(raw: Any, key: str) -> int:
    if raw is None:
        return 0
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise PressureProtocolError(f"key {key!r} holds {raw!r}, not an integer") from None


def _text(raw: Any) -> str | None:
    if raw is None:
        return None
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def _has_room(bound: int, length: int) -> bool:
    return bound == 0 or length < bound


def _push_token(key: str) -> tuple[Command, Command]:
    # LTRIM keeps the list at one element even if a token was pushed twice (e.g. by unlock
    # racing a holder), so exclusivity heals instead of doubling.
    return ("LPUSH", key, 0), ("LTRIM", key, 0, 0)


def _wait_role(keys: QueueKeys, free_key: str, deadline: Deadline) -> Step[bool]:
    """BRPOP a role token in chunks; raise QueueDoesNotExist if the queue goes away meanwhile."""
    while (wait := deadline.next_wait()) is not None:
        (token,) = yield one("BRPOP", free_key, wait)
        if token is not None:
            return True
        # A delete takes the token itself and removes the list, so without this check a
        # waiter would block forever on a list that can no longer be pushed to.
        (exists,) = yield one("EXISTS", keys.bound)
        if not exists:
            raise _missing(keys)
    return False


def _wait_pop(
    lists: tuple[str, ...], deadline: Deadline, bound_key: str | None
) -> Step[tuple[bytes, bytes] | None]:
    """BRPOP from `lists` in chunks; (key, value), or None at the deadline."""
    while (wait := deadline.next_wait()) is not None:
        (reply,) = yield one("BRPOP", *lists, wait)
        if reply is not None:
            return bytes(reply[0]), bytes(reply[1])
        if bound_key is not None:
            (exists,) = yield one("EXISTS", bound_key)
            if not exists:
                raise QueueDoesNotExist(f"queue deleted while waiting (no key {bound_key!r})")
    return None


def create(keys: QueueKeys, bound: int) -> Step[None]:
    if isinstance(bound, bool) or not isinstance(bound, int) or bound < 0:
        raise ValueError("bound must be an integer >= 0 (0 means unbounded)")
    others = [key for key in keys.all() if key != keys.bound]
    (leftovers,) = yield one("EXISTS", *others)
    if leftovers:
        (has_bound,) = yield one("EXISTS", keys.bound)
        if has_bound:
            raise QueueAlreadyExists(f"queue {keys.name!r} already exists")
        # Keys without :bound are a delete still running (or one that died): re-creating
        # now would hand the new queue's tokens to that delete.
        raise QueueInUse(
            f"queue {keys.name!r} is being deleted or a delete was interrupted; "
            "wait for it, or run `delete --force` to clear the remaining keys"
        )
    (created,) = yield one("SETNX", keys.bound, bound)
    if not created:
        raise QueueAlreadyExists(f"queue {keys.name!r} already exists")
    yield multi(
        ("LPUSH", keys.producer_free, 1),
        ("LPUSH", keys.consumer_free, 1),
        ("LPUSH", keys.not_full, 1),
    )


def exists(keys: QueueKeys) -> Step[bool]:
    (found,) = yield one("EXISTS", keys.bound)
    return bool(found)


def length(keys: QueueKeys) -> Step[int]:
    bound, size = yield multi(("GET", keys.bound), ("LLEN", keys.queue))
    if bound is None:
        raise _missing(keys)
    return int(size)


def is_closed(keys: QueueKeys) -> Step[bool]:
    bound, closed = yield multi(("GET", keys.bound), ("EXISTS", keys.closed))
    if bound is None:
        raise _missing(keys)
    return bool(closed)


def put(
    keys: QueueKeys, uid: str, data: bytes, *, block: bool, timeout: float | None
) -> Step[None]:
    deadline = Deadline(timeout)
    # The rules check :closed before taking the role, the reference code after; we do both,
    # so producers of a closed queue fail at once and a close that lands while we wait counts.
    bound, closed, token = yield multi(
        ("GET", keys.bound), ("EXISTS", keys.closed), ("RPOP", keys.producer_free)
    )
    held = token is not None
    on_release: list[Command] = []
    try:
        if bound is None:
            raise _missing(keys)
        if closed:
            raise _closed(keys)
        if not held:
            if block:
                held = yield from _wait_role(keys, keys.producer_free, deadline)
            if not held:
                raise QueueInUse(f"queue {keys.name!r} has another producer")
        _, bound, closed, room, size = yield multi(
            ("SET", keys.producer, uid),
            ("GET", keys.bound),
            ("EXISTS", keys.closed),
            ("RPOP", keys.not_full),
            ("LLEN", keys.queue),
        )
        if room is not None:
            # Until the element is pushed, any failure must give the room back.
            on_release = list(_push_token(keys.not_full))
        if bound is None:
            raise _missing(keys)
        if closed:
            raise _closed(keys)
        if room is None:
            popped = None
            if block:
                popped = yield from _wait_pop((keys.not_full,), deadline, keys.bound)
            if popped is None:
                raise QueueFull(f"queue {keys.name!r} is full")
            on_release = list(_push_token(keys.not_full))
            # delete wakes blocked producers by pushing :not_full after removing :bound.
            bound, size = yield multi(("GET", keys.bound), ("LLEN", keys.queue))
            if bound is None:
                raise _missing(keys)
        # The element, the counters, the room marker and the role go back in one MULTI.
        # The length after our LPUSH is at most size + 1 (only our consumer can change it,
        # and only downwards); a consumer that pops meanwhile pushes :not_full itself.
        room_left = _has_room(_int(bound, keys.bound), int(size) + 1)
        on_release = [
            ("LPUSH", keys.queue, data),
            ("INCR", keys.produced_messages),
            ("INCRBY", keys.produced_bytes, len(data)),
        ]
        if room_left:
            on_release.extend(_push_token(keys.not_full))
    finally:
        if held:
            yield multi(*on_release, *_push_token(keys.producer_free))


def get(keys: QueueKeys, uid: str, *, block: bool, timeout: float | None) -> Step[bytes]:
    deadline = Deadline(timeout)
    bound, token = yield multi(("GET", keys.bound), ("RPOP", keys.consumer_free))
    held = token is not None
    on_release: list[Command] = []
    try:
        if bound is None:
            raise _missing(keys)
        if not held:
            if block:
                held = yield from _wait_role(keys, keys.consumer_free, deadline)
            if not held:
                raise QueueInUse(f"queue {keys.name!r} has another consumer")
        # Popping first and then looking at :closed is the reference's "closed and LLEN == 0"
        # test in one round trip: with one consumer nobody else can pop in between.
        _, bound, closed, item, size = yield multi(
            ("SET", keys.consumer, uid),
            ("GET", keys.bound),
            ("EXISTS", keys.closed),
            ("RPOP", keys.queue),
            ("LLEN", keys.queue),
        )
        if bound is None:
            raise _missing(keys)
        if item is None:
            if closed:
                raise _closed(keys)
            popped = None
            if block:
                popped = yield from _wait_pop((keys.queue, keys.closed), deadline, keys.bound)
            if popped is None:
                raise QueueEmpty(f"queue {keys.name!r} is empty")
            source, item = popped
            if source == keys.closed.encode():
                # BRPOP consumed one of close's two markers; put it back so :closed keeps
                # the shape close gave it.
                on_release = [("LPUSH", keys.closed, 0)]
                (still_there,) = yield one("EXISTS", keys.bound)
                raise _closed(keys) if still_there else _missing(keys)
            bound, size = yield multi(("GET", keys.bound), ("LLEN", keys.queue))
        data = bytes(item)
        on_release = [
            ("INCR", keys.consumed_messages),
            ("INCRBY", keys.consumed_bytes, len(data)),
        ]
        # bound is None only when a delete started after our pop; it removes :not_full anyway.
        if bound is not None and _has_room(_int(bound, keys.bound), int(size)):
            on_release.extend(_push_token(keys.not_full))
        return data
    finally:
        if held:
            yield multi(*on_release, *_push_token(keys.consumer_free))


def close(keys: QueueKeys, uid: str, *, block: bool, timeout: float | None) -> Step[None]:
    deadline = Deadline(timeout)
    bound, closed, token = yield multi(
        ("GET", keys.bound), ("EXISTS", keys.closed), ("RPOP", keys.producer_free)
    )
    held = token is not None
    on_release: list[Command] = []
    try:
        if bound is None:
            raise _missing(keys)
        if closed:
            raise QueueClosed(f"queue {keys.name!r} is already closed")
        if not held:
            if block:
                held = yield from _wait_role(keys, keys.producer_free, deadline)
            if not held:
                raise QueueInUse(f"queue {keys.name!r} has another producer")
        _, bound, markers = yield multi(
            ("SET", keys.producer, uid), ("GET", keys.bound), ("LLEN", keys.closed)
        )
        if bound is None:
            raise _missing(keys)
        if markers:
            raise QueueClosed(f"queue {keys.name!r} is already closed")
        on_release = [("LPUSH", keys.closed, 0, 0)]
    finally:
        if held:
            yield multi(*on_release, *_push_token(keys.producer_free))


def delete(keys: QueueKeys, *, timeout: float | None) -> Step[None]:
    deadline = Deadline(timeout)
    # DEL's reply doubles as the existence check, so two concurrent deletes cannot both
    # proceed (the loser would wait forever for tokens the winner removed).
    (removed,) = yield one("DEL", keys.bound)
    if not removed:
        raise _missing(keys)
    # Wake a producer blocked on room and a consumer blocked on an empty queue.
    yield multi(("LPUSH", keys.not_full, 0), ("LPUSH", keys.closed, 0, 0))
    for free_key, holder_key, role in (
        (keys.producer_free, keys.producer, "producer"),
        (keys.consumer_free, keys.consumer, "consumer"),
    ):
        if (yield from _wait_pop((free_key,), deadline, None)) is None:
            (holder,) = yield one("GET", holder_key)
            raise QueueInUse(
                f"delete of queue {keys.name!r} is waiting for the {role} role, "
                f"held by {_text(holder) or 'an unknown client'}; if that client is dead run "
                "`unlock`, or `delete --force` to drop the remaining keys"
            )
        yield multi(("DEL", holder_key), ("DEL", free_key))
    yield multi(
        ("DEL", keys.not_full),
        ("DEL", keys.closed),
        ("DEL", keys.produced_messages),
        ("DEL", keys.produced_bytes),
        ("DEL", keys.consumed_messages),
        ("DEL", keys.consumed_bytes),
        ("DEL", keys.queue),
    )


def force_delete(keys: QueueKeys) -> Step[int]:
    """Remove all 12 keys at once, waiting for nobody: for queues whose clients died."""
    (removed,) = yield one("DEL", *keys.all())
    if not removed:
        raise _missing(keys)
    return int(removed)


def stats(keys: QueueKeys) -> Step[QueueStats]:
    replies = yield multi(
        ("GET", keys.bound),
        ("LLEN", keys.queue),
        ("EXISTS", keys.closed),
        ("GET", keys.producer),
        ("GET", keys.consumer),
        ("LLEN", keys.producer_free),
        ("LLEN", keys.consumer_free),
        ("GET", keys.produced_messages),
        ("GET", keys.produced_bytes),
        ("GET", keys.consumed_messages),
        ("GET", keys.consumed_bytes),
    )
    bound, size, closed, producer, consumer, p_free, c_free, pm, pb, cm, cb = replies
    if bound is None:
        raise _missing(keys)
    return QueueStats(
        name=keys.name,
        bound=_int(bound, keys.bound),
        length=int(size),
        closed=bool(closed),
        producer=_text(producer),
        consumer=_text(consumer),
        producer_busy=not p_free,
        consumer_busy=not c_free,
        produced_messages=_int(pm, keys.produced_messages),
        produced_bytes=_int(pb, keys.produced_bytes),
        consumed_messages=_int(cm, keys.consumed_messages),
        consumed_bytes=_int(cb, keys.consumed_bytes),
    )


def unlock(
    keys: QueueKeys,
    *,
    producer: bool,
    consumer: bool,
    force: bool,
    is_alive: Callable[[str | None], bool | None],
) -> Step[UnlockResult]:
    """Give back role tokens stranded by dead holders, and :not_full if room was lost with them.

    Works without :bound too, so a delete stuck waiting for a dead holder's token can finish.
    """
    replies = yield multi(
        ("EXISTS", *keys.all()),
        ("GET", keys.bound),
        ("LLEN", keys.queue),
        ("LLEN", keys.producer_free),
        ("LLEN", keys.consumer_free),
        ("LLEN", keys.not_full),
        ("GET", keys.producer),
        ("GET", keys.consumer),
    )
    present, bound, size, p_free, c_free, not_full, p_uid, c_uid = replies
    if not present:
        raise _missing(keys)
    holders = {"producer": _text(p_uid), "consumer": _text(c_uid)}
    release = {"producer": producer and not p_free, "consumer": consumer and not c_free}
    if not force:
        for role, wanted in release.items():
            if wanted and is_alive(holders[role]):
                raise QueueInUse(
                    f"the {role} role of queue {keys.name!r} is held by {holders[role]}, "
                    "which is still running; stop it first or pass force"
                )
    commands: list[Command] = []
    if release["producer"]:
        commands.extend(_push_token(keys.producer_free))
    if release["consumer"]:
        commands.extend(_push_token(keys.consumer_free))
    # A producer killed between taking :not_full and pushing its element takes the room
    # with it; with an empty queue the consumer would then never push it back.
    restore_room = (
        release["producer"]
        and bound is not None
        and not not_full
        and _has_room(_int(bound, keys.bound), int(size))
    )
    if restore_room:
        commands.extend(_push_token(keys.not_full))
    if commands:
        yield multi(*commands)
    return UnlockResult(
        producer=holders["producer"],
        consumer=holders["consumer"],
        producer_released=release["producer"],
        consumer_released=release["consumer"],
        not_full_restored=restore_room,
    )


def list_queues(prefix: str) -> Step[list[str]]:
    """Names of the queues under `prefix` (those whose `:bound` key exists), sorted."""
    pattern = bound_key_pattern(prefix)
    names: set[str] = set()
    cursor = 0
    while True:
        (reply,) = yield one("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
        cursor, found = int(reply[0]), reply[1]
        for raw in found:
            name = name_from_bound_key(prefix, _text(raw) or "")
            if name is not None:
                names.add(name)
        if cursor == 0:
            return sorted(names)
