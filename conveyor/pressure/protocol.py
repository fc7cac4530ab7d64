"""The pressure protocol's operations, written once for both the sync and the asyncio queue.

Each operation is an I/O-free generator of steps (see `steps`): it yields `Batch`es of Redis
commands or `Eval`s of a Lua script and receives the replies; `queue.run_sync` and
`aio.run_async` do the I/O. put and get run their fast path as one script (see `scripts`),
so a put or get that needs no waiting costs one round trip; they fall back to chunked
BRPOPs only to wait for a role, for room or for an element.

Every operation that takes a role (producer or consumer) gives its token back in a
`finally` (or its script does), so errors, timeouts and exceptions thrown in by the driver
(cancellation, connection loss) all return it; only a hard process death, or a reply lost
with the connection, can strand it (see `unlock`).

Inspection and recovery (`stats`, `unlock`, `list_queues`) live in `admin` and are
re-exported here, so the drivers reach every operation through this module.
"""

from __future__ import annotations

from conveyor.pressure import control, scripts
from conveyor.pressure.admin import QueueStats, UnlockResult, list_queues, stats, unlock
from conveyor.pressure.errors import (
    QueueAlreadyExists,
    QueueEmpty,
    QueueFull,
    QueueInUse,
)
from conveyor.pressure.keys import QueueKeys, key_bytes
from conveyor.pressure.steps import (
    WAIT,
    Batch,
    Deadline,
    Eval,
    Role,
    Step,
    closed_error,
    missing,
    one,
    run_script,
    to_text,
    wait_pop,
    wait_role,
)

__all__ = [
    "Batch",
    "Eval",
    "QueueStats",
    "Step",
    "UnlockResult",
    "close",
    "create",
    "delete",
    "exists",
    "force_delete",
    "get",
    "is_closed",
    "length",
    "list_queues",
    "put",
    "stats",
    "unlock",
]


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
    # The tokens go in the give-back script, not a MULTI: if the SETNX took Redis over its
    # maxmemory, a refused MULTI would leave :bound without tokens, a queue on which every
    # put and get waits forever; the script (PERSIST first) is run to its end.
    yield from scripts.release(
        (keys.producer_free, "lpush", 1),
        (keys.consumer_free, "lpush", 1),
        (keys.not_full, "lpush", 1),
    )


def exists(keys: QueueKeys) -> Step[bool]:
    (found,) = yield one("EXISTS", keys.bound)
    return bool(found)


def length(keys: QueueKeys) -> Step[int]:
    bound, size = yield from control.read(("GET", keys.bound), ("LLEN", keys.queue))
    if bound is None:
        raise missing(keys)
    return int(size)


def is_closed(keys: QueueKeys) -> Step[bool]:
    bound, closed = yield from control.read(("GET", keys.bound), ("EXISTS", keys.closed))
    if bound is None:
        raise missing(keys)
    return bool(closed)


def put(
    keys: QueueKeys, uid: str, data: bytes, *, block: bool, timeout: float | None
) -> Step[None]:
    deadline = Deadline(timeout)
    role = Role()
    on_release: list[scripts.GiveBack] = []
    try:
        # The rules check :closed before taking the role, the reference code after; the
        # script does both, so producers of a closed queue fail at once even while another
        # producer holds the role, and a close that lands while we wait counts.
        reply = yield from run_script(scripts.put_call(keys, scripts.TAKE, uid, data, block), role)
        if reply[0] == scripts.BUSY:
            if block:
                role.held = yield from wait_role(keys, keys.producer_free, deadline)
            if not role.held:
                raise QueueInUse(f"queue {keys.name!r} has another producer")
            reply = yield from run_script(
                scripts.put_call(keys, scripts.HELD, uid, data, block), role
            )
        if reply[0] == WAIT:
            # Full: we hold the role and wait for room (delete wakes us by pushing
            # :not_full after removing :bound, which the script then notices).
            if (yield from wait_pop((keys.not_full,), "token", deadline, keys.bound)) is None:
                raise QueueFull(f"queue {keys.name!r} is full")
            # Until the script runs, a failure must give the room back.
            on_release = [(keys.not_full, "token", 0)]
            reply = yield from run_script(
                scripts.put_call(keys, scripts.ROOM, uid, data, block), role
            )
        scripts.check(keys, reply)
    finally:
        if role.held:
            yield from scripts.release(*on_release, (keys.producer_free, "token", 0))


def get(keys: QueueKeys, uid: str, *, block: bool, timeout: float | None) -> Step[bytes]:
    deadline = Deadline(timeout)
    role = Role()
    on_release: list[scripts.GiveBack] = []
    try:
        # Popping first and then looking at :closed is the reference's "closed and LLEN == 0"
        # test in one step: with one consumer nobody else can pop in between.
        reply = yield from run_script(scripts.get_call(keys, scripts.TAKE, uid, block), role)
        if reply[0] == scripts.BUSY:
            if block:
                role.held = yield from wait_role(keys, keys.consumer_free, deadline)
            if not role.held:
                raise QueueInUse(f"queue {keys.name!r} has another consumer")
            reply = yield from run_script(scripts.get_call(keys, scripts.HELD, uid, block), role)
        if reply[0] != WAIT:
            scripts.check(keys, reply)
            return bytes(reply[1])
        # Empty and open: we hold the role and wait for an element or a close.
        popped = yield from wait_pop((keys.queue, keys.closed), "value", deadline, keys.bound)
        if popped is None:
            raise QueueEmpty(f"queue {keys.name!r} is empty")
        source, item = popped
        if source == key_bytes(keys.closed):
            # BRPOP consumed one of close's two markers; put it back so :closed keeps the
            # shape close gave it.
            on_release = [(keys.closed, "lpush", 0)]
            (still_there,) = yield one("EXISTS", keys.bound)
            raise closed_error(keys) if still_there else missing(keys)
        reply = yield from run_script(
            scripts.get_call(keys, scripts.ITEM, uid, block, len(item)), role
        )
        scripts.check(keys, reply)
        return item
    finally:
        if role.held:
            yield from scripts.release(*on_release, (keys.consumer_free, "token", 0))


def close(keys: QueueKeys, uid: str, *, block: bool, timeout: float | None) -> Step[None]:
    deadline = Deadline(timeout)
    role = Role()
    try:
        # One script of the batches [GET :bound, EXISTS :closed, RPOP :producer_free],
        # [SET :producer UID, GET :bound, LLEN :closed], {LPUSH :closed 0 0, token
        # :producer_free}; it answers BUSY, holding nothing, when another producer has the role.
        reply = yield from run_script(control.close_call(keys, scripts.TAKE, uid), role)
        if reply[0] == scripts.BUSY:
            if block:
                role.held = yield from wait_role(keys, keys.producer_free, deadline)
            if not role.held:
                raise QueueInUse(f"queue {keys.name!r} has another producer")
            reply = yield from run_script(control.close_call(keys, scripts.HELD, uid), role)
        control.check_close(keys, reply)
    finally:
        if role.held:
            yield from scripts.release((keys.producer_free, "token", 0))


def delete(keys: QueueKeys, *, timeout: float | None) -> Step[None]:
    deadline = Deadline(timeout)
    # DEL's reply doubles as the existence check, so two concurrent deletes cannot both
    # proceed (the loser would wait forever for tokens the winner removed).
    (removed,) = yield one("DEL", keys.bound)
    if not removed:
        raise missing(keys)
    # Wake a producer blocked on room and a consumer blocked on an empty queue (in a script,
    # which Redis still runs over maxmemory, when deleting is how memory gets freed).
    yield from scripts.release(
        (keys.not_full, "lpush", 0), (keys.closed, "lpush", 0), (keys.closed, "lpush", 0)
    )
    for free_key, holder_key, role in (
        (keys.producer_free, keys.producer, "producer"),
        (keys.consumer_free, keys.consumer, "consumer"),
    ):
        if (yield from wait_pop((free_key,), "token", deadline, None)) is None:
            (holder,) = yield one("GET", holder_key)
            raise QueueInUse(
                f"delete of queue {keys.name!r} is waiting for the {role} role, "
                f"held by {to_text(holder) or 'an unknown client'}; if that client is dead run "
                "`unlock`, or `delete --force` to drop the remaining keys"
            )
        # One DEL of several keys, not a MULTI of DELs: as atomic, and Redis over maxmemory
        # refuses every MULTI, even one that only frees memory.
        yield one("DEL", holder_key, free_key)
    yield one(
        "DEL",
        keys.not_full,
        keys.closed,
        keys.produced_messages,
        keys.produced_bytes,
        keys.consumed_messages,
        keys.consumed_bytes,
        keys.queue,
    )


def force_delete(keys: QueueKeys) -> Step[int]:
    """Remove all 12 keys at once, waiting for nobody: for queues whose clients died."""
    (removed,) = yield one("DEL", *keys.all())
    if not removed:
        raise missing(keys)
    return int(removed)
