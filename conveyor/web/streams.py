"""What the live streams share: a bounded number of open streams, and one sample of each
watched thing (a queue's page, a message, the dead letters) per second.

A stream is a task that renders templates every second for as long as its client stays,
so a client that is not a browser could open thousands; past `max_streams` a new one is
refused (503 with Retry-After) until one ends. Streams watching the same thing (N tabs on
one queue) read the same sample, so they cost the node and the disk what one does.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from conveyor.web.gateway import ApiError

RETRY_AFTER_S = 15  # the pages' script waits as long before asking again
T = TypeVar("T")


class StreamSlot:
    """One open stream's place; `release` gives it back (once, however often called)."""

    def __init__(self, slots: StreamSlots) -> None:
        self._slots: StreamSlots | None = slots

    def release(self) -> None:
        slots, self._slots = self._slots, None
        if slots is not None:
            slots._give_back()


class StreamSlots:
    """At most `limit` streams open at once across every page."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open = 0
        self._lock = threading.Lock()

    @property
    def open(self) -> int:
        return self._open

    def take(self) -> StreamSlot:
        with self._lock:
            if self._open >= self.limit:
                raise ApiError(
                    503,
                    "too_many_streams",
                    f"{self.limit} live streams are open, the console's limit (max_streams); "
                    f"try again in {RETRY_AFTER_S} s",
                    headers={"Retry-After": str(RETRY_AFTER_S)},
                )
            self._open += 1
        return StreamSlot(self)

    def _give_back(self) -> None:
        with self._lock:
            self._open -= 1


@dataclass
class _Sample:
    lock: threading.Lock = field(default_factory=threading.Lock)
    taken: float | None = None  # time.monotonic() when the value (or error) was taken
    used: float = 0.0  # time.monotonic() of the last ask, for expiry
    value: Any = None
    error: ApiError | None = None


class SampleCache:
    """`get(key, take)`: the value `take()` gave for `key` less than `ttl_s` ago, else
    `take()` now. Askers that arrive while it is being taken wait for it and share it; an
    ApiError (no such queue, node unreachable) is shared like a value. At most
    `max_entries` keys, and a key nobody asked for in `expire_s` is dropped."""

    def __init__(self, ttl_s: float = 1.0, max_entries: int = 1024, expire_s: float = 10.0):
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.expire_s = expire_s
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, _Sample] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable, take: Callable[[], T]) -> T:
        sample = self._entry(key)
        with sample.lock:
            if sample.taken is None or time.monotonic() - sample.taken >= self.ttl_s:
                try:
                    sample.value, sample.error = take(), None
                except ApiError as exc:
                    sample.value, sample.error = None, exc
                sample.taken = time.monotonic()
            if sample.error is not None:
                # A copy: re-raising one instance would chain every raise's traceback onto it.
                error = sample.error
                raise ApiError(error.status, error.code, error.message, headers=error.headers)
            value: T = sample.value
            return value

    def _entry(self, key: Hashable) -> _Sample:
        now = time.monotonic()
        with self._lock:
            # Least recently asked first: drop from the front what nobody watches any more.
            while self._entries and now - next(iter(self._entries.values())).used >= self.expire_s:
                self._entries.popitem(last=False)
            sample = self._entries.get(key)
            if sample is None:
                if len(self._entries) >= self.max_entries:
                    self._entries.popitem(last=False)
                sample = self._entries[key] = _Sample()
            self._entries.move_to_end(key)
            sample.used = now
            return sample
