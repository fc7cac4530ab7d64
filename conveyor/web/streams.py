"""What the live streams share: a bounded number of open streams.

A stream is a task that renders templates every second for as long as its client stays,
so a client that is not a browser could open thousands; past `max_streams` a new one is
refused (503 with Retry-After) until one ends.
"""

from __future__ import annotations

import threading

from conveyor.web.gateway import ApiError

RETRY_AFTER_S = 15  # the pages' script waits as long before asking again


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
