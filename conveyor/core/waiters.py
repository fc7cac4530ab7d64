"""Clients blocked in GETJOB, as data: the node keeps the socket, the core keeps the order."""

from __future__ import annotations

from typing import Any


class Waiter:
    __slots__ = ("count", "deadline_ms", "done", "queues", "timer", "token", "with_counters")

    def __init__(
        self,
        token: Any,
        queues: list[bytes],
        count: int,
        with_counters: bool,
        deadline_ms: int,
    ) -> None:
        self.token = token  # opaque to the core: the node's connection
        self.queues = queues
        self.count = count
        self.with_counters = with_counters
        self.deadline_ms = deadline_ms  # 0 means wait forever
        self.done = False
        self.timer: list[Any] | None = None  # the timeout's timer entry, while armed
