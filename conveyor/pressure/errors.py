"""Typed errors of the pressure protocol; every one is a `PressureError`."""

from __future__ import annotations


class PressureError(Exception):
    """Base class of every error raised by `conveyor.pressure`."""


class QueueAlreadyExists(PressureError):
    """`create` found the queue's `:bound` key already set."""


class QueueDoesNotExist(PressureError):
    """The queue has no `:bound` key: never created, or deleted (possibly while we waited)."""


class QueueClosed(PressureError):
    """Producers: the queue is closed. Consumers: it is closed and drained."""


class QueueFull(PressureError):
    """A non-blocking or timed-out put found no room (`:not_full` stayed empty)."""


class QueueEmpty(PressureError):
    """A non-blocking or timed-out get found no element."""


class QueueInUse(PressureError):
    """The role (producer or consumer) is held by another client and was not freed in time."""


class PressureConnectionError(PressureError):
    """The Redis server is unreachable; the message names its address."""


class PressureProtocolError(PressureError):
    """Redis rejected a command, e.g. a queue key holds a value of the wrong type."""
