"""A strict RESP2/RESP3 reply validator: the oracle the fuzz targets check replies with.

`check_reply(data, resp3)` raises `Malformed` unless `data` is exactly one or more complete,
well-formed replies of the client's protocol: RESP2 clients get no RESP3 type, RESP3
clients get `_` rather than `$-1`/`*-1` (conveyor.protocol.resp's contract), and no error
reply is the `ERR internal error ...` a handler's Python exception turns into.
"""

from __future__ import annotations

import re

INTERNAL_ERROR = b"ERR internal error"

_INT = re.compile(rb"-?(0|[1-9][0-9]*)\Z")
_DOUBLE = re.compile(rb"(-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|inf|-inf|nan)\Z")
_RESP2_TYPES = b"+-:$*"
_MAX_DEPTH = 32


class Malformed(AssertionError):
    """A reply a client could not parse, or an internal error sent as a reply."""


def _line(data: bytes, pos: int) -> tuple[bytes, int]:
    end = data.find(b"\r\n", pos)
    if end < 0:
        raise Malformed(f"unterminated line at {pos}: {data[pos : pos + 40]!r}")
    line = data[pos:end]
    if b"\r" in line or b"\n" in line:
        raise Malformed(f"CR or LF inside a line at {pos}: {line[:80]!r}")
    return line, end + 2


def _int(text: bytes, what: str) -> int:
    if not _INT.match(text):
        raise Malformed(f"bad {what}: {text[:40]!r}")
    return int(text)


def _reply(data: bytes, pos: int, resp3: bool, depth: int) -> int:
    if depth > _MAX_DEPTH:
        raise Malformed("nesting too deep")
    if pos >= len(data):
        raise Malformed("reply ends early")
    kind = data[pos : pos + 1]
    if not resp3 and kind not in (b"+", b"-", b":", b"$", b"*"):
        raise Malformed(f"type byte {kind!r} in a RESP2 reply at {pos}")
    line, pos = _line(data, pos + 1)
    if kind == b"+":
        return pos
    if kind == b"-":
        # An empty error is legal (Redis' DEBUG ERROR "" sends `-\r\n` too).
        if line.startswith(INTERNAL_ERROR):
            raise Malformed(f"internal error reply: {line.decode(errors='replace')}")
        return pos
    if kind in (b":", b"("):
        _int(line, "integer")
        return pos
    if kind in (b"$", b"=", b"!"):
        size = _int(line, "bulk length")
        if size == -1 and kind == b"$":
            if resp3:
                raise Malformed("$-1 sent to a RESP3 client (expected _)")
            return pos
        if size < 0:
            raise Malformed(f"negative length {size}")
        if data[pos + size : pos + size + 2] != b"\r\n":
            raise Malformed(f"bulk of {size} bytes not followed by CRLF at {pos}")
        if kind == b"=" and (size < 4 or data[pos + 3 : pos + 4] != b":"):
            raise Malformed("verbatim string without a 3-byte format and ':'")
        return pos + size + 2
    if kind in (b"*", b"%", b"~", b">", b"|"):
        count = _int(line, "aggregate length")
        if count == -1 and kind == b"*":
            if resp3:
                raise Malformed("*-1 sent to a RESP3 client (expected _)")
            return pos
        if count < 0:
            raise Malformed(f"negative aggregate length {count}")
        items = count * 2 if kind in (b"%", b"|") else count
        for _ in range(items):
            pos = _reply(data, pos, resp3, depth + 1)
        if kind == b"|":  # attributes precede the reply they describe
            pos = _reply(data, pos, resp3, depth + 1)
        return pos
    if kind == b"_":
        if line:
            raise Malformed(f"null with a payload: {line[:40]!r}")
        return pos
    if kind == b"#":
        if line not in (b"t", b"f"):
            raise Malformed(f"bad boolean {line[:40]!r}")
        return pos
    if kind == b",":
        if not _DOUBLE.match(line.lower()):
            raise Malformed(f"bad double {line[:40]!r}")
        return pos
    raise Malformed(f"unknown type byte {kind!r} at {pos - len(line) - 3}")


def check_reply(data: bytes, resp3: bool = False) -> int:
    """Validate `data` as complete replies; returns how many. Raises Malformed."""
    if type(data) is not bytes:
        raise Malformed(f"reply is {type(data).__name__}, not bytes")
    pos = 0
    count = 0
    while pos < len(data):
        pos = _reply(data, pos, resp3, 0)
        count += 1
    return count


def is_error(data: bytes) -> bool:
    return data[:1] == b"-"
