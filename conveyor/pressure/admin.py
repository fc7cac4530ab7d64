"""Inspection and recovery: `stats`, `unlock`, `list_queues`. None of them takes a role.

Steps in the style of `protocol` (I/O-free generators of command batches, see `steps`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from conveyor.pressure import scripts
from conveyor.pressure.control import read
from conveyor.pressure.errors import QueueInUse
from conveyor.pressure.keys import (
    QueueKeys,
    bound_key_pattern,
    key_bytes,
    key_text,
    name_from_bound_key,
)
from conveyor.pressure.steps import (
    Step,
    has_room,
    missing,
    one,
    to_int,
    to_text,
)


@dataclass(frozen=True, slots=True)
class QueueStats:
    """A snapshot of one queue, read atomically (one read-only script)."""

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


def stats(keys: QueueKeys) -> Step[QueueStats]:
    replies = yield from read(
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
        raise missing(keys)
    return QueueStats(
        name=keys.name,
        bound=to_int(bound, keys.bound),
        length=int(size),
        closed=bool(closed),
        producer=to_text(producer),
        consumer=to_text(consumer),
        producer_busy=not p_free,
        consumer_busy=not c_free,
        produced_messages=to_int(pm, keys.produced_messages),
        produced_bytes=to_int(pb, keys.produced_bytes),
        consumed_messages=to_int(cm, keys.consumed_messages),
        consumed_bytes=to_int(cb, keys.consumed_bytes),
    )


def unlock(
    keys: QueueKeys,
    *,
    producer: bool,
    consumer: bool,
    force: bool,
    is_alive: Callable[[str | None], bool | None],
) -> Step[UnlockResult]:
    """Give back role tokens stranded by dead holders, and :not_full where room was lost.

    Works without :bound too, so a delete stuck waiting for a dead holder's token can finish.
    """
    replies = yield from read(
        ("GET", keys.bound),
        ("LLEN", keys.queue),
        ("LLEN", keys.producer_free),
        ("LLEN", keys.consumer_free),
        ("LLEN", keys.not_full),
        ("GET", keys.producer),
        ("GET", keys.consumer),
        # With the reads above, whether any of the 12 keys exists (an empty list does not).
        ("EXISTS", keys.produced_messages),
        ("EXISTS", keys.produced_bytes),
        ("EXISTS", keys.consumed_messages),
        ("EXISTS", keys.consumed_bytes),
        ("EXISTS", keys.closed),
    )
    bound, size, p_free, c_free, not_full, p_uid, c_uid = replies[:7]
    if not any(reply for reply in replies):
        raise missing(keys)
    holders = {"producer": to_text(p_uid), "consumer": to_text(c_uid)}
    release = {"producer": producer and not p_free, "consumer": consumer and not c_free}
    if not force:
        for role, wanted in release.items():
            if wanted and is_alive(holders[role]):
                raise QueueInUse(
                    f"the {role} role of queue {keys.name!r} is held by {holders[role]}, "
                    "which is still running; stop it first or pass force"
                )
    pushes: list[scripts.GiveBack] = []
    if release["producer"]:
        pushes.append((keys.producer_free, "token", 0))
    if release["consumer"]:
        pushes.append((keys.consumer_free, "token", 0))
    # Room without :not_full is lost room: a producer killed between taking :not_full and
    # pushing, or a consumer whose popped element was lost before it pushed :not_full
    # back (killed, or its connection dropped with the BRPOP's reply); an empty queue
    # would then never get it back. Only a producer may hold :not_full legitimately
    # (taken, its element not pushed yet), so not while one holds the role.
    restore_room = (
        (p_free or release["producer"])
        and bound is not None
        and not not_full
        and has_room(to_int(bound, keys.bound), int(size))
    )
    if restore_room:
        pushes.append((keys.not_full, "token", 0))
    # The give-back script, not a MULTI: Redis runs it over maxmemory, when a role stranded
    # by a client that died there must still be recoverable.
    yield from scripts.release(*pushes)
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
            name = name_from_bound_key(prefix, key_text(raw))
            if name is not None:
                names.add(name)
        if cursor == 0:
            return sorted(names, key=key_bytes)  # the order of the keys' bytes
