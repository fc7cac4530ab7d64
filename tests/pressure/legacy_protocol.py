"""The library's put and get as they were before the Lua fast path: the reference sequence.

Copied from `conveyor/pressure/protocol.py` as of the commit before the scripts (three
MULTI/EXEC batches per uncontended put or get), with only the private helpers renamed to
their new homes in `conveyor.pressure.steps`, which are unchanged. The differential tests
run the same operations through this and through the fast path and compare the keyspace.
"""

from __future__ import annotations

from conveyor.pressure.errors import QueueEmpty, QueueFull, QueueInUse
from conveyor.pressure.keys import QueueKeys
from conveyor.pressure.queue import Data, PressureQueue, encode, run_sync
from conveyor.pressure.steps import (
    Command,
    Deadline,
    Step,
    closed_error,
    has_room,
    missing,
    multi,
    one,
    push_token,
    to_int,
    wait_pop,
    wait_role,
)


def legacy_put(
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
            raise missing(keys)
        if closed:
            raise closed_error(keys)
        if not held:
            if block:
                held = yield from wait_role(keys, keys.producer_free, deadline)
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
            on_release = list(push_token(keys.not_full))
        if bound is None:
            raise missing(keys)
        if closed:
            raise closed_error(keys)
        if room is None:
            popped = None
            if block:
                popped = yield from wait_pop((keys.not_full,), "token", deadline, keys.bound)
            if popped is None:
                raise QueueFull(f"queue {keys.name!r} is full")
            on_release = list(push_token(keys.not_full))
            # delete wakes blocked producers by pushing :not_full after removing :bound.
            bound, size = yield multi(("GET", keys.bound), ("LLEN", keys.queue))
            if bound is None:
                raise missing(keys)
        # The element, the counters, the room marker and the role go back in one MULTI.
        # The length after our LPUSH is at most size + 1 (only our consumer can change it,
        # and only downwards); a consumer that pops meanwhile pushes :not_full itself.
        room_left = has_room(to_int(bound, keys.bound), int(size) + 1)
        on_release = [
            ("LPUSH", keys.queue, data),
            ("INCR", keys.produced_messages),
            ("INCRBY", keys.produced_bytes, len(data)),
        ]
        if room_left:
            on_release.extend(push_token(keys.not_full))
    finally:
        if held:
            yield multi(*on_release, *push_token(keys.producer_free))


def legacy_get(keys: QueueKeys, uid: str, *, block: bool, timeout: float | None) -> Step[bytes]:
    deadline = Deadline(timeout)
    bound, token = yield multi(("GET", keys.bound), ("RPOP", keys.consumer_free))
    held = token is not None
    on_release: list[Command] = []
    try:
        if bound is None:
            raise missing(keys)
        if not held:
            if block:
                held = yield from wait_role(keys, keys.consumer_free, deadline)
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
            raise missing(keys)
        if item is None:
            if closed:
                raise closed_error(keys)
            popped = None
            if block:
                popped = yield from wait_pop(
                    (keys.queue, keys.closed), "value", deadline, keys.bound
                )
            if popped is None:
                raise QueueEmpty(f"queue {keys.name!r} is empty")
            source, item = popped
            if source == keys.closed.encode():
                # BRPOP consumed one of close's two markers; put it back so :closed keeps
                # the shape close gave it.
                on_release = [("LPUSH", keys.closed, 0)]
                (still_there,) = yield one("EXISTS", keys.bound)
                raise closed_error(keys) if still_there else missing(keys)
            bound, size = yield multi(("GET", keys.bound), ("LLEN", keys.queue))
        data = bytes(item)
        on_release = [
            ("INCR", keys.consumed_messages),
            ("INCRBY", keys.consumed_bytes, len(data)),
        ]
        # bound is None only when a delete started after our pop; it removes :not_full anyway.
        if bound is not None and has_room(to_int(bound, keys.bound), int(size)):
            on_release.extend(push_token(keys.not_full))
        return data
    finally:
        if held:
            yield multi(*on_release, *push_token(keys.consumer_free))


class LegacyQueue(PressureQueue):
    """A PressureQueue whose put and get run the pre-script step sequences."""

    def put(self, data: Data, block: bool = True, timeout: float | None = None) -> None:
        step = legacy_put(self.keys, self.client_uid, encode(data), block=block, timeout=timeout)
        run_sync(self._redis, step, self.address)

    def get(self, block: bool = True, timeout: float | None = None) -> bytes:
        step = legacy_get(self.keys, self.client_uid, block=block, timeout=timeout)
        return run_sync(self._redis, step, self.address)
