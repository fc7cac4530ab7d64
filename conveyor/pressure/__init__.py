"""The pressure protocol (bounded, blocking, exclusive, closable FIFO queues) over Redis.

`PressureQueue` is the blocking client, `AsyncPressureQueue` its asyncio twin; both follow
the pressure specification's 12-key layout and command sequences, so they share queues with
any other conforming client. An uncontended put or get runs its sequence as one Lua script
(one round trip) with the same effects. See docs/pressure.md.
"""

from conveyor.pressure.aio import AsyncPressureQueue
from conveyor.pressure.errors import (
    PressureConnectionError,
    PressureError,
    PressureProtocolError,
    QueueAlreadyExists,
    QueueClosed,
    QueueDoesNotExist,
    QueueEmpty,
    QueueFull,
    QueueInUse,
)
from conveyor.pressure.keys import QueueKeys
from conveyor.pressure.protocol import QueueStats, UnlockResult
from conveyor.pressure.queue import PressureQueue, list_queues

__all__ = [
    "AsyncPressureQueue",
    "PressureConnectionError",
    "PressureError",
    "PressureProtocolError",
    "PressureQueue",
    "QueueAlreadyExists",
    "QueueClosed",
    "QueueDoesNotExist",
    "QueueEmpty",
    "QueueFull",
    "QueueInUse",
    "QueueKeys",
    "QueueStats",
    "UnlockResult",
    "list_queues",
]
