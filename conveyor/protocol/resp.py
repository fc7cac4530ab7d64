"""RESP2 and RESP3 replies, and request parsing.

Requests come in two shapes, as in Redis: multi-bulk (`*2\\r\\n$4\\r\\nPING...`, what every
client library sends, parsed by hiredis in C) and inline (`PING\\r\\n`, what telnet sends,
split like Redis' sdssplitargs). Replies are encoded once, to bytes, by `encode`.

RESP3 (for clients that sent `HELLO 3`) changes only what Redis changes for the same
replies: one null (`_`) for every type, maps (`%`) where Redis sends maps (HELLO, CONFIG
GET), verbatim strings (`=`) where Redis sends them (INFO, CLIENT INFO/LIST). Everything
else keeps its RESP2 shape, so a RESP2 and a RESP3 client decode a reply to the same
values. `encode(value, resp3=True)` does that; the RESP2 path is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import hiredis

# Redis' own limits: a request line and a bulk may not grow without bound.
MAX_INLINE_BYTES = 64 * 1024
DEFAULT_MAX_BULK_BYTES = 512 * 1024 * 1024


class Status(bytes):
    """A simple-string reply (`+OK`), as opposed to a bulk string."""


class Error(str):
    """An error reply; the text includes the code, e.g. `ERR syntax error`."""


class _NullArray:
    pass


class Map(dict):  # type: ignore[type-arg]
    """A map reply: `%n` in RESP3, a flat [key, value, ...] array in RESP2 (as Redis).

    A plain dict encodes the same way; Map only says so explicitly.
    """


class Verbatim(bytes):
    """Text Redis sends as a verbatim string: `=n\\r\\ntxt:...` in RESP3, a bulk in RESP2.

    Clients strip the `txt:` format prefix, so both protocols decode to the same bytes.
    """


NULL_ARRAY = _NullArray()
OK = b"+OK\r\n"
PONG = b"+PONG\r\n"
NULL_BULK_BYTES = b"$-1\r\n"
NULL_ARRAY_BYTES = b"*-1\r\n"
# RESP3 has one null for every type.
NULL_RESP3_BYTES = b"_\r\n"


def encode(value: Any, resp3: bool = False) -> bytes:
    parts: list[bytes] = []
    if resp3:
        _encode3_into(value, parts)
    else:
        _encode_into(value, parts)
    return b"".join(parts)


def _encode_into(value: Any, parts: list[bytes]) -> None:
    kind = type(value)
    if kind is bytes:
        parts.append(b"$%d\r\n%s\r\n" % (len(value), value))
    elif kind is int:
        parts.append(b":%d\r\n" % value)
    elif kind is list or kind is tuple:
        parts.append(b"*%d\r\n" % len(value))
        for item in value:
            _encode_into(item, parts)
    elif value is None:
        parts.append(NULL_BULK_BYTES)
    elif kind is Status:
        parts.append(b"+%s\r\n" % value)
    elif kind is Error:
        parts.append(b"-%s\r\n" % error_line(value))
    elif kind is str:
        data = value.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    elif value is NULL_ARRAY:
        parts.append(NULL_ARRAY_BYTES)
    elif kind is bool:
        parts.append(b":1\r\n" if value else b":0\r\n")
    elif kind is float:
        data = repr(value).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    elif kind is Verbatim:
        parts.append(b"$%d\r\n%s\r\n" % (len(value), value))
    elif isinstance(value, dict):
        parts.append(b"*%d\r\n" % (2 * len(value)))
        for key, item in value.items():
            _encode_into(key, parts)
            _encode_into(item, parts)
    else:
        raise TypeError(f"cannot encode {kind.__name__} as RESP")


def _encode3_into(value: Any, parts: list[bytes]) -> None:
    """RESP3: `_` for every null, `%` for maps, `=` for Verbatim; the rest as RESP2."""
    kind = type(value)
    if kind is list or kind is tuple:
        parts.append(b"*%d\r\n" % len(value))
        for item in value:
            _encode3_into(item, parts)
    elif value is None or value is NULL_ARRAY:
        parts.append(NULL_RESP3_BYTES)
    elif kind is Verbatim:
        parts.append(b"=%d\r\ntxt:%s\r\n" % (len(value) + 4, value))
    elif isinstance(value, dict):
        parts.append(b"%%%d\r\n" % len(value))
        for key, item in value.items():
            _encode3_into(key, parts)
            _encode3_into(item, parts)
    else:
        _encode_into(value, parts)


def verbatim(text: bytes, resp3: bool) -> bytes:
    """A verbatim text reply (INFO, CLIENT LIST): `=` in RESP3, a bulk in RESP2."""
    if resp3:
        return b"=%d\r\ntxt:%s\r\n" % (len(text) + 4, text)
    return b"$%d\r\n%s\r\n" % (len(text), text)


def null_bulk(resp3: bool) -> bytes:
    """The null reply where RESP2 sends a null bulk (`$-1`)."""
    return NULL_RESP3_BYTES if resp3 else NULL_BULK_BYTES


def null_array(resp3: bool) -> bytes:
    """The null reply where RESP2 sends a null array (`*-1`)."""
    return NULL_RESP3_BYTES if resp3 else NULL_ARRAY_BYTES


def error_line(message: str) -> bytes:
    # A newline inside an error would end the reply early and desync the client.
    return message.replace("\r", " ").replace("\n", " ").encode()


def error(message: str) -> bytes:
    return b"-%s\r\n" % error_line(message)


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def integer(number: int) -> bytes:
    return b":%d\r\n" % number


class ProtocolError(Exception):
    """The byte stream can't be parsed; the connection must be closed after replying."""


_ESCAPES = {
    ord("n"): b"\n",
    ord("r"): b"\r",
    ord("t"): b"\t",
    ord("b"): b"\b",
    ord("a"): b"\a",
}
_HEX = b"0123456789abcdefABCDEF"


def split_args(line: bytes) -> list[bytes] | None:
    """Split like Redis' sdssplitargs; None when quotes are unbalanced."""
    args: list[bytes] = []
    pos = 0
    length = len(line)
    while True:
        while pos < length and line[pos] in b" \t\r\n\v\f":
            pos += 1
        if pos >= length:
            return args
        current = bytearray()
        in_double = in_single = False
        while True:
            if in_double:
                if pos >= length:
                    return None
                char = line[pos]
                if (
                    char == 92  # backslash
                    and pos + 3 < length
                    and line[pos + 1] == ord("x")
                    and line[pos + 2] in _HEX
                    and line[pos + 3] in _HEX
                ):
                    current.append(int(line[pos + 2 : pos + 4], 16))
                    pos += 3
                elif char == 92 and pos + 1 < length:
                    pos += 1
                    current += _ESCAPES.get(line[pos], bytes([line[pos]]))
                elif char == 34:  # closing "
                    if pos + 1 < length and line[pos + 1] not in b" \t\r\n\v\f":
                        return None  # the closing quote must be followed by a space
                    in_double = False
                    pos += 1
                    break
                else:
                    current.append(char)
            elif in_single:
                if pos >= length:
                    return None
                char = line[pos]
                if char == 92 and pos + 1 < length and line[pos + 1] == 39:
                    pos += 1
                    current.append(39)
                elif char == 39:
                    if pos + 1 < length and line[pos + 1] not in b" \t\r\n\v\f":
                        return None
                    in_single = False
                    pos += 1
                    break
                else:
                    current.append(char)
            else:
                if pos >= length:
                    break
                char = line[pos]
                if char in b" \t\r\n\v\f":
                    break
                if char == 34:
                    in_double = True
                elif char == 39:
                    in_single = True
                else:
                    current.append(char)
            pos += 1
        args.append(bytes(current))


_join_check = b"".join


def _unexpected_element(request: list[object]) -> str:
    element = next(item for item in request if type(item) is not bytes)
    if element is None:
        return "Protocol error: invalid bulk length"
    kind = {int: ":", list: "*"}.get(type(element), "-")
    return f"Protocol error: expected '$', got '{kind}'"


class RequestParser:
    """Turns a client's byte stream into argument lists.

    The fast path hands multi-bulk data to hiredis. hiredis knows only one format per
    stream, so when an inline request follows a multi-bulk one in the same read (telnet
    users, hand-written tests), the bytes since the last request boundary are parsed
    again in Python, skipping what hiredis already returned.
    """

    __slots__ = ("_checked", "_chunks", "_inline", "_max_bulk", "_reader", "_yielded")

    def __init__(self, max_bulk_bytes: int = DEFAULT_MAX_BULK_BYTES) -> None:
        self._reader = hiredis.Reader()
        self._inline = b""
        self._max_bulk = max_bulk_bytes
        self._chunks: list[bytes] = []  # fed to hiredis since the last request boundary
        self._yielded = 0  # requests hiredis returned from those chunks
        self._checked = False  # the pending request's announced sizes were checked

    def feed(self, data: bytes) -> Iterator[list[bytes]]:
        """Yield every complete request in data (plus what was buffered before)."""
        if self._inline:
            data = self._inline + data
            self._inline = b""
        if not data:
            return
        if not self._chunks and data[0] != 42:  # not '*' at a boundary: inline
            yield from self._parse_python(data, skip=0)
            return
        reader = self._reader
        reader.feed(data)
        if not self._checked:
            # Past the checked headers of a big request, keeping its payload twice (here
            # and in hiredis) would only serve the inline fallback, which can't apply.
            self._chunks.append(data)
        while True:
            try:
                request = reader.gets()
            except hiredis.ProtocolError as exc:
                if self._checked:
                    self._reset_reader()
                    raise ProtocolError(f"Protocol error: {exc}") from None
                # Not necessarily garbage: maybe an inline request. Python decides.
                buffered = b"".join(self._chunks)
                skip = self._yielded
                self._reset_reader()
                yield from self._parse_python(buffered, skip)
                return
            if request is False:
                if self._chunks and not self._checked:
                    self._check_pending_sizes()
                return
            if type(request) is not list:
                self._reset_reader()
                raise ProtocolError("Protocol error: expected '*', got something else")
            try:
                # hiredis reads any RESP type; a request holds bulk strings only. join()
                # checks every element in C (and refuses anything but bytes-like).
                _join_check(request)
            except TypeError:
                self._reset_reader()
                raise ProtocolError(_unexpected_element(request)) from None
            if not reader.has_data():
                self._chunks.clear()
                self._yielded = 0
                self._checked = False
            else:
                self._yielded += 1
            if request:
                yield request

    def _reset_reader(self) -> None:
        self._reader = hiredis.Reader()
        self._chunks = []
        self._yielded = 0
        self._checked = False

    def _parse_python(self, data: bytes, skip: int) -> Iterator[list[bytes]]:
        pos = 0
        length = len(data)
        while pos < length:
            if data[pos] == 42:  # '*'
                parsed = self._parse_multibulk(data, pos)
                if parsed is None:
                    # Incomplete: hand the rest back to hiredis, which is at a boundary.
                    rest = data[pos:]
                    self._reader.feed(rest)
                    self._chunks.append(rest)
                    return
                request, pos = parsed
            else:
                newline = data.find(b"\n", pos)
                if newline < 0:
                    if length - pos > MAX_INLINE_BYTES:
                        raise ProtocolError("Protocol error: too big inline request")
                    self._inline = data[pos:]
                    return
                args = split_args(data[pos:newline])
                pos = newline + 1
                if args is None:
                    raise ProtocolError("Protocol error: unbalanced quotes in request")
                request = args
            if skip:
                skip -= 1
            elif request:
                yield request

    def _parse_multibulk(self, data: bytes, pos: int) -> tuple[list[bytes], int] | None:
        end = data.find(b"\r\n", pos)
        if end < 0:
            return None
        try:
            count = int(data[pos + 1 : end])
        except ValueError:
            raise ProtocolError("Protocol error: invalid multibulk length") from None
        if count > 1024 * 1024:
            raise ProtocolError("Protocol error: invalid multibulk length")
        pos = end + 2
        args: list[bytes] = []
        for _ in range(max(count, 0)):
            if pos >= len(data):
                return None
            if data[pos] != 36:  # '$'
                raise ProtocolError(f"Protocol error: expected '$', got '{chr(data[pos])}'")
            end = data.find(b"\r\n", pos)
            if end < 0:
                return None
            try:
                size = int(data[pos + 1 : end])
            except ValueError:
                raise ProtocolError("Protocol error: invalid bulk length") from None
            if size < 0 or size > self._max_bulk:
                raise ProtocolError("Protocol error: invalid bulk length")
            start = end + 2
            if start + size + 2 > len(data):
                return None
            args.append(data[start : start + size])
            pos = start + size + 2
        return args, pos

    def _check_pending_sizes(self) -> None:
        """Refuse a request announcing a bulk over the limit before buffering all of it.

        Only runs when a read ends inside a request (hiredis then waits for more), so the
        hot path of complete pipelined requests never pays for it.
        """
        buffered = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
        pos = 0
        try:
            while pos < len(buffered):
                parsed = self._parse_multibulk(buffered, pos)
                if parsed is None:
                    break
                pos = parsed[1]
        except ProtocolError:
            self._reset_reader()
            raise
        # The incomplete request starts at pos: walk its announced sizes.
        end = buffered.find(b"\r\n", pos)
        if end < 0:
            return
        cursor = end + 2
        while cursor < len(buffered):
            if buffered[cursor] != 36:  # '$'
                return
            end = buffered.find(b"\r\n", cursor)
            if end < 0:
                return
            try:
                size = int(buffered[cursor + 1 : end])
            except ValueError:
                return
            if size > self._max_bulk:
                self._reset_reader()
                raise ProtocolError("Protocol error: invalid bulk length")
            cursor = end + 2 + size + 2
        if len(buffered) > 65536:
            self._checked = True  # headers seen; the rest is payload
