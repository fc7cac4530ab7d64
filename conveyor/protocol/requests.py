"""Request parsing: a client's byte stream into argument lists.

Requests come in two shapes, as in Redis: multi-bulk (`*2\\r\\n$4\\r\\nPING...`, what every
client library sends, parsed by hiredis in C where it can be, see `RequestParser`) and
inline (`PING\\r\\n`, what telnet sends, split like Redis' sdssplitargs). Every header is
checked against Redis' limits before anything it announces is buffered.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import hiredis

from conveyor.protocol.inline import split_args
from conveyor.protocol.limited_hiredis import limited_reader_factory

# Redis' own limits: a request line and a bulk may not grow without bound.
MAX_INLINE_BYTES = 64 * 1024
DEFAULT_MAX_BULK_BYTES = 512 * 1024 * 1024


class ProtocolError(Exception):
    """The byte stream can't be parsed; the connection must be closed after replying."""


# -- Request parsing ---------------------------------------------------------------------------
#
# Everything a client sends is checked against Redis' limits before it is buffered: a
# multi-bulk count before any argument is kept, a bulk's length before its payload is. A
# request costs memory in proportion to the bytes actually received, never to the sizes it
# announces: a 15-byte `*2147483647\r\n` used to make hiredis allocate a list of 2^31 slots
# up front, and freeing it stalled the node for seconds.
MAX_MULTIBULK_LENGTH = 1024 * 1024
# Redis 7 allows a client that has not authenticated only small requests, so a stranger
# cannot make the node hold much: at most 10 arguments, each at most 16 KiB.
UNAUTHENTICATED_MULTIBULK_LENGTH = 10
UNAUTHENTICATED_BULK_BYTES = 16 * 1024
# A header line still unterminated after this many bytes can't be valid: the longest number
# a header may carry is a sign and 19 digits (int64), and the CRLF follows it.
_HEADER_WINDOW = 32
_new_hiredis = limited_reader_factory()


def _header_number(text: bytes) -> int | None:
    """A header's number as Redis reads it (string2ll): an optional '-', then digits without
    a leading zero; no '+', spaces or underscores (which int() accepts). None if invalid."""
    if text.isdigit():  # ASCII digits only, and not empty
        if text[0] == 48 and len(text) > 1:
            return None
        value = int(text)
        return value if value < 1 << 63 else None
    if text[:1] == b"-" and text[1:].isdigit() and text[1] != 48:
        value = -int(text[1:])
        return value if value >= -(1 << 63) else None
    return None


_join_check = b"".join


def _unexpected(kind: int) -> str:
    return f"Protocol error: expected '$', got '{chr(kind)}'"


def _header_error(kind: int) -> str:
    """The error of a `$` or `=` header too long to be one."""
    return "Protocol error: invalid bulk length" if kind == 36 else _unexpected(kind)


def _verbatim_text(payload: bytes) -> bytes:
    """A `=` element's string: its payload after the 3-letter format and ':', which
    hiredis checks and drops."""
    if payload[3:4] != b":":
        raise ProtocolError(_unexpected(61))
    return payload[4:]


class RequestParser:
    """Turns a client's byte stream into argument lists, as Redis' processInputBuffer.

    A request is multi-bulk (`*2\\r\\n$4\\r\\nECHO\\r\\n$2\\r\\nhi\\r\\n`) when it starts
    with `*`, inline (`ECHO hi\\r\\n`) otherwise; both may be mixed in any order and split
    anywhere across reads.

    Every header of every request is checked before its contents are buffered, with
    Redis' errors: a count over 1024*1024 (`invalid multibulk length`), a bulk over
    `max_bulk_bytes` (`invalid bulk length`), an inline line over 64 KiB, terminated or not
    (`too big inline request`) and, while `authenticated` is false, Redis 7's limits for
    strangers (`unauthenticated multibulk length` over 10 arguments, `unauthenticated bulk
    length` over 16 KiB). The parser holds at most the bytes it was sent of the request not
    complete yet, and `buffered_bytes()` says how many, for the connection to cap.

    Two parsers, one grammar:
    - hiredis (C), for whole requests from a request boundary: a read of complete
      pipelined requests costs what it did before, plus one read of hiredis' position per
      request. Its counts are capped (HIREDIS_MAX_ELEMENTS, see protocol/limited_hiredis.py), and
      it never keeps anything between reads: where a read ends inside a request, that
      request is handed to the walker, from the position hiredis last stood at a boundary;
    - the walker (`_walk`), a state machine that keeps its place across reads and looks at
      each new byte at most once (a bulk's payload is sliced off, its chunks joined when
      complete), checking every header as it comes. It takes whatever hiredis does not:
      the request a read ends in, inline commands, counts over the cap, anything hiredis
      refuses (the walker then decides between an inline request and Redis' error), and
      every read while `authenticated` is false. It hands back to hiredis at the next
      request boundary.

    `feed` is a generator: the connection runs each request before the next is parsed, so
    an AUTH changes the limits of the requests behind it in the same read once the
    connection has updated `authenticated`. It must be exhausted before the next feed.
    """

    __slots__ = (
        "_args",
        "_have",
        "_held",
        "_hiredis",
        "_inline_len",
        "_inline_parts",
        "_left",
        "_line",
        "_line_kind",
        "_odd_end",
        "_parts",
        "_position",
        "_size",
        "_verbatim",
        "authenticated",
        "max_bulk_bytes",
    )

    def __init__(
        self, max_bulk_bytes: int = DEFAULT_MAX_BULK_BYTES, authenticated: bool = True
    ) -> None:
        # Both may be changed at any time; they apply from the next header on.
        self.max_bulk_bytes = max_bulk_bytes
        self.authenticated = authenticated
        self._hiredis: hiredis.Reader | None = None
        self._position: Any = None  # ctypes view of the reader's pos and len
        if _new_hiredis is not None:
            self._hiredis, self._position = _new_hiredis()
        self._line = b""  # the start of an unterminated `*` or `$` header (< 32 bytes)
        self._inline_parts: list[bytes] = []  # the start of an unterminated inline line
        self._inline_len = 0
        self._args: list[bytes] | None = None  # a multi-bulk request's arguments so far
        self._held = 0  # their bytes
        self._left = 0  # arguments still to come, the one being read included
        self._size = -1  # the length of the bulk being read; -1: its header is next
        self._parts: list[bytes] = []  # the payload received of that bulk (or line element)
        self._have = 0  # its bytes received, payload and CRLF
        self._line_kind = 0  # '+' or '(' while such an element's line is cut by reads
        self._verbatim = False  # the bulk being read is a `=` element's
        self._odd_end = 0  # see _line_element

    def buffered_bytes(self) -> int:
        """Bytes held for the request not complete yet (0 at a request boundary).

        Constant time; meant to be read after each feed, to cap a client's query buffer.
        (hiredis holds nothing between feeds.)
        """
        return len(self._line) + self._inline_len + self._held + self._have

    def feed_one(self, data: bytes) -> list[bytes] | None:
        """The request `data` holds when it is exactly one whole multi-bulk request that
        hiredis parses, from a request boundary; else None, having consumed nothing:
        `feed(data)` then parses it as always. A read of one request (a client waiting
        for each reply) costs ~0.4 µs less than through feed's generator."""
        reader = self._hiredis
        if (
            reader is None
            or not self.authenticated
            or self._args is not None
            or self._line
            or self._inline_len
            or data[:1] != b"*"
            or len(data) > self.max_bulk_bytes  # so no bulk in it can be over the limit
        ):
            return None
        reader.feed(data)
        try:
            request = reader.gets()
            # pos is where it ended, or 0 when hiredis dropped the bytes before it.
            if type(request) is list and request and reader.len() == self._position[0]:
                _join_check(request)  # strings only (TypeError otherwise)
                return request
        except (hiredis.ProtocolError, TypeError):
            pass
        # Anything else: a fresh reader holds nothing, and feed() starts over.
        self._hiredis, self._position = _new_hiredis()  # type: ignore[misc]
        return None

    def feed(self, data: bytes) -> Iterator[list[bytes]]:
        """Yield every complete request in data (plus what was buffered before).

        Raises ProtocolError at the first header that breaks the grammar or a limit; the
        requests before it have been yielded, and the connection must be closed.
        """
        pos: int | None = 0
        if self._args is not None or self._line or self._inline_len or data[:1] != b"*":
            pos = yield from self._walk(data, 0)
        while pos is not None:
            reader = self._hiredis
            if reader is None or not self.authenticated:
                pos = yield from self._walk(data, pos)
                continue
            # hiredis, from the request boundary at pos (it holds nothing from before).
            reader.feed(data, pos)
            position = self._position
            buffered = reader.len()  # what hiredis' buffer holds, data[pos:] at its end
            unparsed = len(data) - pos  # bytes after the last boundary hiredis reached
            big = unparsed > self.max_bulk_bytes  # else no bulk here can be over the limit
            try:
                while True:
                    request = reader.gets()
                    if request is False:
                        break
                    if type(request) is not list:
                        break  # `*-1`, or not an array: the walker decides
                    # A request holds strings only; join() checks every element in C.
                    _join_check(request)
                    if big and request and max(map(len, request)) > self.max_bulk_bytes:
                        break  # the walker refuses it at its header
                    at = position[0]  # hiredis' pos: where this request ended
                    if at:
                        unparsed = buffered - at
                    else:  # hiredis dropped the bytes before pos: it holds only the rest
                        buffered = unparsed = reader.len()
                    if request:  # `*0` is no request
                        yield request
                    if not unparsed:
                        return
                    if not self.authenticated:  # an AUTH failed: the walker checks limits
                        break
            except (hiredis.ProtocolError, TypeError):
                # Maybe an inline request, maybe garbage: the walker decides. TypeError:
                # an element not a string (join), or a RESP3 map keyed by an aggregate,
                # which hiredis fails to build as a dict.
                pass
            # hiredis stopped inside a request (or refused it). A fresh reader drops what
            # this one holds (at most HIREDIS_MAX_ELEMENTS slots per level); the walker
            # parses that request again from its start, and hands back after it.
            self._hiredis, self._position = _new_hiredis()  # type: ignore[misc]
            pos = yield from self._walk(data, len(data) - unparsed)

    def _walk(self, data: bytes, pos: int) -> Generator[list[bytes], None, int | None]:
        """The exact parser: carries on from its state with data[pos:], each byte looked at
        once. Returns None when it consumed data, or the next request boundary after at
        least one request where hiredis can take over."""
        shift = 0  # where data[pos] is in the bytes walked
        if self._line:  # a header cut by the previous read: at most 31 bytes to copy
            shift = len(self._line) - pos
            data = self._line + data[pos:]
            pos = 0
            self._line = b""
        start = pos
        length = len(data)
        while pos < length:
            args = self._args
            if args is None:  # at a request boundary
                if self._inline_len or data[pos] != 42:  # not '*': an inline request
                    newline = data.find(b"\n", pos)
                    if newline < 0:
                        # Keep the chunks: joining them on every read would be quadratic.
                        self._inline_parts.append(data[pos:])
                        self._inline_len += length - pos
                        if self._inline_len > MAX_INLINE_BYTES:
                            raise ProtocolError("Protocol error: too big inline request")
                        return None
                    line = data[pos:newline]
                    if self._inline_len:
                        self._inline_parts.append(line)
                        line = b"".join(self._inline_parts)
                        self._inline_parts = []
                        self._inline_len = 0
                    if len(line) > MAX_INLINE_BYTES:  # as it would be had a read cut it
                        raise ProtocolError("Protocol error: too big inline request")
                    pos = newline + 1
                    request = split_args(line)
                    if request is None:
                        raise ProtocolError("Protocol error: unbalanced quotes in request")
                    if request:  # an empty line is no request
                        yield request
                    continue
                if pos > start and self._hiredis is not None and self.authenticated:
                    return pos - shift  # a multi-bulk request at a boundary: back to hiredis
                end = data.find(b"\r\n", pos, pos + _HEADER_WINDOW)
                if end < 0:
                    self._keep_line(data, pos, "Protocol error: invalid multibulk length")
                    return None
                count = _header_number(data[pos + 1 : end])
                if count is None or count > MAX_MULTIBULK_LENGTH:
                    raise ProtocolError("Protocol error: invalid multibulk length")
                if count > UNAUTHENTICATED_MULTIBULK_LENGTH and not self.authenticated:
                    raise ProtocolError("Protocol error: unauthenticated multibulk length")
                pos = end + 2
                if count > 0:  # `*0` and `*-1` are no request, as in Redis
                    self._args = []
                    self._left = count
                continue
            size = self._size
            if size < 0:  # an element's header is next (or the rest of a cut line element)
                kind = self._line_kind or data[pos]
                if kind == 36 or kind == 61:  # '$', or '=': a verbatim string, read as a bulk
                    end = data.find(b"\r\n", pos, pos + _HEADER_WINDOW)
                    if end < 0:
                        self._keep_line(data, pos, _header_error(kind))
                        return None
                    size = self._bulk_size(data[pos + 1 : end], kind)
                    pos = end + 2
                    if length - pos < size + 2:  # the payload continues in later reads
                        self._size = size
                        self._verbatim = kind == 61
                        continue
                    arg = data[pos : pos + size]
                    pos += size + 2
                    if kind == 61:
                        arg = _verbatim_text(arg)
                else:
                    # hiredis returns `+s` and `(123` elements as the bytes they carry,
                    # indistinguishable from bulks: the walker reads them the same way,
                    # however reads cut them, so that where a read ends never changes
                    # what is accepted. No client sends them.
                    arg = self._line_element(data, pos, kind)
                    if arg is None:
                        return None
                    size = len(arg)
                    pos = self._odd_end
                args.append(arg)
            else:  # inside a bulk's payload (and its CRLF, which Redis skips unchecked)
                have = self._have
                take = min(size + 2 - have, length - pos)
                if have < size:
                    self._parts.append(data[pos : pos + min(size - have, take)])
                have += take
                pos += take
                if have < size + 2:
                    self._have = have
                    return None
                parts = self._parts
                arg = parts[0] if len(parts) == 1 else b"".join(parts)
                if self._verbatim:
                    arg = _verbatim_text(arg)
                    self._verbatim = False
                args.append(arg)
                self._parts = []
                self._have = 0
                self._size = -1
            self._held += size
            self._left -= 1
            if not self._left:
                self._args = None
                self._held = 0
                yield args
        return None

    def _bulk_size(self, text: bytes, kind: int) -> int:
        """The payload size a `$` or `=` header announces, checked against the limits."""
        size = _header_number(text)
        if kind == 36:
            if size is None or size < 0 or size > self.max_bulk_bytes:
                raise ProtocolError("Protocol error: invalid bulk length")
            content = size
        else:  # '=': the payload is `txt:` and the string, which hiredis returns alone
            if size is None or size < 4 or size - 4 > self.max_bulk_bytes:
                raise ProtocolError(_unexpected(kind))
            content = size - 4
        self._check_unauthenticated(content)
        return size

    def _line_element(self, data: bytes, pos: int, kind: int) -> bytes | None:
        """A `+` or `(` element's text, as hiredis reads it, from its type byte at pos or,
        when `_line_kind` is set, from where the previous read cut it. None while its CRLF
        has not come (its bytes are kept); `_odd_end` is set after it."""
        if kind != 43 and kind != 40:  # '+' '(' (any other type: Redis' error)
            raise ProtocolError(_unexpected(kind))
        parts = self._parts
        if parts and parts[-1][-1:] == b"\r" and data[pos] == 10:  # CRLF cut between reads
            parts[-1] = parts[-1][:-1]
            end = pos - 1
        else:
            start = pos if parts else pos + 1
            end = data.find(b"\r\n", start)
            if end < 0:  # cut by the read: kept, up to the limit a bulk has
                parts.append(data[start:])
                self._have += len(data) - start
                self._line_kind = kind
                self._check_line_size(self._have - (data[-1] == 13), kind)
                return None
            parts.append(data[start:end])
        text = parts[0] if len(parts) == 1 else b"".join(parts)
        self._parts = []
        self._have = 0
        self._line_kind = 0
        self._check_line_size(len(text), kind)
        if kind == 40 and text[1 if text[:1] == b"-" else 0 :].strip(b"0123456789"):
            raise ProtocolError(_unexpected(kind))  # hiredis' "Bad bignum value"
        self._odd_end = end + 2
        return text

    def _check_unauthenticated(self, size: int) -> None:
        """Redis 7's bulk limit for a client that has not authenticated yet."""
        if size > UNAUTHENTICATED_BULK_BYTES and not self.authenticated:
            raise ProtocolError("Protocol error: unauthenticated bulk length")

    def _check_line_size(self, size: int, kind: int) -> None:
        self._check_unauthenticated(size)
        if size > self.max_bulk_bytes:
            raise ProtocolError(_unexpected(kind))

    def _keep_line(self, data: bytes, pos: int, error_text: str) -> None:
        """Keep an unterminated header for the next read, unless it is too long to be one."""
        if len(data) - pos >= _HEADER_WINDOW:
            raise ProtocolError(error_text)
        self._line = data[pos:]
