"""Typed exceptions of the Conveyor client, one per Disque error code.

Every error reply a node sends starts with a code (`ERR`, `NOREPL`, `MAXLEN`, ...). The
client turns each code into its own exception class, so callers can write
`except PausedError:` instead of matching strings. All of them derive from
`ConveyorError`; error replies also derive from redis-py's `ResponseError` and connection
problems from redis-py's `ConnectionError`, so code written against plain redis-py keeps
working.
"""

from __future__ import annotations

import redis.exceptions

__all__ = [
    "AuthError",
    "BadIdError",
    "BatchError",
    "CommandError",
    "ConnectionError",
    "ConveyorError",
    "LeavingError",
    "LoadingError",
    "MaxLenError",
    "MisconfError",
    "NoJobError",
    "NoReplError",
    "OutOfMemoryError",
    "PausedError",
    "ReplyError",
    "TimeoutError",
    "TooLateError",
    "TooManyConnectionsError",
    "error_from_redis",
    "error_from_reply",
    "reply_error_from_redis",
]


class ConveyorError(Exception):
    """Base class of every error raised by `conveyor.client`."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class ReplyError(ConveyorError, redis.exceptions.ResponseError):
    """The node answered with an error reply.

    `code` is the first word of the reply (`NOREPL`), `message` the whole text as the
    node sent it (`NOREPL Not enough reachable nodes ...`); `str(error)` is `message`.
    """

    code: str = ""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        first = message.split(" ", 1)[0]
        self.code = first if first.isupper() else type(self).code


class CommandError(ReplyError):
    """`ERR ...`: a generic error (syntax, arity, bad value, unknown command)."""

    code = "ERR"


class NoReplError(ReplyError):
    """`NOREPL`: not enough reachable nodes, or replication timed out."""

    code = "NOREPL"


class MaxLenError(ReplyError):
    """`MAXLEN`: the queue is already as long as ADDJOB's MAXLEN."""

    code = "MAXLEN"


class PausedError(ReplyError):
    """`PAUSED`: the queue is paused for input."""

    code = "PAUSED"


class LeavingError(ReplyError):
    """`LEAVING`: the node is leaving the cluster; use another one."""

    code = "LEAVING"


class NoJobError(ReplyError):
    """`NOJOB`: the job is not known to this node."""

    code = "NOJOB"


class TooLateError(ReplyError):
    """`TOOLATE`: half of the job's TTL has elapsed, WORKING is refused."""

    code = "TOOLATE"


class BadIdError(ReplyError):
    """`BADID`: a job ID is not well formed."""

    code = "BADID"


class OutOfMemoryError(ReplyError):
    """`OOM`: the node is above its maxmemory."""

    code = "OOM"


class AuthError(ReplyError):
    """`NOAUTH`, or a refused AUTH (`ERR invalid password`)."""

    code = "NOAUTH"


class LoadingError(ReplyError):
    """`LOADING`: the node is still loading its AOF."""

    code = "LOADING"


class MisconfError(ReplyError):
    """`MISCONF`: the node cannot write its AOF and refuses writes."""

    code = "MISCONF"


class ConnectionError(ConveyorError, redis.exceptions.ConnectionError):
    """No usable connection to a node. `address` is the `host:port` that failed."""

    def __init__(self, message: str, address: str | None = None) -> None:
        text = f"{address}: {message}" if address else message
        super().__init__(text)
        self.address = address


class TimeoutError(ConnectionError):
    """The node did not answer within the socket timeout."""


class TooManyConnectionsError(ConnectionError):
    """Every connection `max_connections` allows is busy: nothing was sent, and the
    node is kept (it did not fail)."""


class BatchError(ConveyorError):
    """Some commands of a batch (`add_jobs`) got an error reply.

    `results` has one entry per body, in order: the new job's ID (`str`) where the ADDJOB
    succeeded, the typed `ReplyError` where it failed. The jobs with an ID exist; the
    others were not created. The message counts the failures and quotes the first one.
    """

    def __init__(self, message: str, results: list[str | ReplyError]) -> None:
        super().__init__(message)
        self.results = results

    @classmethod
    def from_results(cls, command: str, results: list[str | ReplyError]) -> BatchError:
        errors = [result for result in results if isinstance(result, ReplyError)]
        first = f": first error: {errors[0]}" if errors else ""
        return cls(f"{len(errors)} of {len(results)} {command}s failed{first}", results)

    @property
    def errors(self) -> list[ReplyError]:
        """The error replies only, in order."""
        return [result for result in self.results if isinstance(result, ReplyError)]

    @property
    def ids(self) -> list[str]:
        """The IDs of the jobs that were created, in order."""
        return [result for result in self.results if isinstance(result, str)]

    def __reduce__(self) -> tuple[type[BatchError], tuple[str, list[str | ReplyError]]]:
        return (type(self), (str(self), self.results))


_BY_CODE: dict[str, type[ReplyError]] = {
    cls.code: cls
    for cls in (
        CommandError,
        NoReplError,
        MaxLenError,
        PausedError,
        LeavingError,
        NoJobError,
        TooLateError,
        BadIdError,
        OutOfMemoryError,
        AuthError,
        LoadingError,
        MisconfError,
    )
}
_BY_CODE["WRONGPASS"] = AuthError
_BY_CODE["NOPERM"] = AuthError


def error_from_reply(message: str) -> ReplyError:
    """The typed exception for an error reply's full text, e.g. `PAUSED Queue paused`."""
    code = message.split(" ", 1)[0]
    if code == "ERR" and ("invalid password" in message or "no password is set" in message):
        return AuthError(message)
    return _BY_CODE.get(code, ReplyError)(message)


# The codes redis-py turns into its own exception classes.
_REDIS_PY_CODES: tuple[tuple[type[redis.exceptions.RedisError], str], ...] = (
    (redis.exceptions.OutOfMemoryError, "OOM"),
    (redis.exceptions.BusyLoadingError, "LOADING"),
    (redis.exceptions.AuthenticationError, "NOAUTH"),
)


def _full_text(exc: redis.exceptions.RedisError) -> str:
    # redis-py strips the codes it knows (ERR, OOM, NOAUTH, LOADING) and keeps them in
    # status_code; for the others the code is still part of the text.
    text = str(exc)
    status = getattr(exc, "status_code", None)
    if status:
        return text if text.startswith(status + " ") else f"{status} {text}"
    first = text.split(" ", 1)[0]
    if first.isupper() and first.isalpha():
        return text
    for cls, code in _REDIS_PY_CODES:
        if isinstance(exc, cls):
            return f"{code} {text}"
    return text


def error_from_redis(exc: redis.exceptions.RedisError, address: str | None) -> ConveyorError:
    """Translate an exception raised by redis-py into the matching `ConveyorError`."""
    if isinstance(exc, ConveyorError):
        return exc
    if isinstance(exc, redis.exceptions.AuthenticationError):
        return AuthError(_full_text(exc))
    if isinstance(exc, redis.exceptions.BusyLoadingError):
        return LoadingError(_full_text(exc))
    if isinstance(exc, redis.exceptions.MaxConnectionsError):
        return TooManyConnectionsError(str(exc) or "too many connections", address)
    if isinstance(exc, redis.exceptions.TimeoutError):
        return TimeoutError(str(exc) or "timed out", address)
    if isinstance(exc, redis.exceptions.ConnectionError):
        return ConnectionError(str(exc) or "connection failed", address)
    if isinstance(exc, redis.exceptions.ResponseError):
        return reply_error_from_redis(exc)
    return ConveyorError(str(exc))


def reply_error_from_redis(exc: redis.exceptions.ResponseError) -> ReplyError:
    """The typed exception for an error reply that redis-py raised as `ResponseError`."""
    if isinstance(exc, ReplyError):
        return exc
    return error_from_reply(_full_text(exc))
