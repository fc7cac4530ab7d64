"""What `conveyor cli` reads from a node and how it prints it (split from client/cli.py).

Replies are read by a small RESP2 parser plugged into redis-py's `Connection`, which
keeps what redis-py's own parsers merge: status replies print unquoted (`OK`, job IDs),
bulk strings quoted (`"hello"`), errors as `(error) ...`, as redis-cli prints them.
"""

from __future__ import annotations

from typing import Any, Union

import redis
from redis._parsers import _RESP2Parser
from redis.exceptions import InvalidResponse
from redis.utils import SENTINEL

from conveyor.protocol.inline import sds_repr


class StatusReply(bytes):
    """A `+...` reply (printed unquoted), as opposed to a bulk string."""


class ErrorReply(str):
    """A `-...` reply; its text includes the error code."""


Reply = Union[int, bytes, StatusReply, ErrorReply, None, list["Reply"]]  # noqa: UP007


class TypedRESP2Parser(_RESP2Parser):
    """redis-py's RESP2 parser, except that status and error replies keep their kind:
    `StatusReply` and `ErrorReply` values instead of bytes and raised exceptions."""

    def _read_response(self, disable_decoding: bool = False, timeout: Any = SENTINEL) -> Any:
        line = self._buffer.readline(timeout=timeout)
        if not line:
            raise redis.ConnectionError("Server closed the connection")
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return StatusReply(rest)
        if kind == b"-":
            return ErrorReply(rest.decode("utf-8", errors="replace"))
        if kind == b":":
            return _number(line)
        if kind == b"$":
            length = _number(line)
            return None if length < 0 else self._buffer.read(length, timeout=timeout)
        if kind == b"*":
            count = _number(line)
            if count < 0:
                return None
            return [self._read_response(timeout=timeout) for _ in range(count)]
        raise InvalidResponse(f"Protocol error, got {line!r}")


def _number(line: bytes) -> int:
    # A RedisError, not int()'s ValueError: the caller shows it as one line, no traceback.
    try:
        return int(line[1:])
    except ValueError:
        raise InvalidResponse(f"Protocol error, got {line!r}") from None


# -- formatting, as redis-cli does it --------------------------------------------------------
def quote(data: bytes) -> str:
    """A bulk string the way redis-cli shows it (sdscatrepr)."""
    return f'"{sds_repr(data)}"'


def format_reply(reply: Reply, prefix: str = "") -> str:
    """redis-cli's human format (cliFormatReplyTTY), without the final newline."""
    return _format_tty(reply, prefix).removesuffix("\n")


def _format_tty(reply: Reply, prefix: str) -> str:
    if isinstance(reply, ErrorReply):
        return f"(error) {reply}\n"
    if isinstance(reply, StatusReply):
        return reply.decode("utf-8", errors="replace") + "\n"
    if isinstance(reply, bool | int):
        return f"(integer) {int(reply)}\n"
    if isinstance(reply, bytes):
        return quote(reply) + "\n"
    if reply is None:
        return "(nil)\n"
    if not reply:
        return "(empty array)\n"
    width = len(str(len(reply)))
    child_prefix = prefix + " " * (width + 2)
    parts: list[str] = []
    for index, item in enumerate(reply):
        parts.append(f"{'' if index == 0 else prefix}{index + 1:>{width}}) ")
        parts.append(_format_tty(item, child_prefix))
    return "".join(parts)


def format_raw(reply: Reply) -> bytes:
    """redis-cli's --raw format: strings as they are, one array element per line.

    Bytes, not text: a binary body or queue name must come out byte for byte (piped to a
    file, say), not with U+FFFD in place of what is not UTF-8."""
    if isinstance(reply, ErrorReply):
        return reply.encode("utf-8")
    if isinstance(reply, bytes):
        return bytes(reply)
    if isinstance(reply, bool | int):
        return str(int(reply)).encode("ascii")
    if reply is None:
        return b""
    return b"\n".join(format_raw(item) for item in reply)
