"""Reading Disque's append-only file: a stream of RESP `LOADJOB`/`DELJOB` commands.

Shared by the node's loader and `conveyor check-aof`. The file is exactly what a client
would send (aof.c catAppendOnlyGenericCommand): `*2\\r\\n` then, per argument,
`$<len>\\r\\n<bytes>\\r\\n`. Only the framing and the command are checked here; decoding the
serialized job is the caller's business, reported at the record's offset.

Two parsers give the same answer. `_parse_one` is the exact, byte-by-byte definition: it
validates one record and, on damage, names the record's offset and what is wrong. `_fast`
only handles the shape Disque writes (`*2\\r\\n$7\\r\\nLOADJOB\\r\\n$<n>\\r\\n...`), using
C-level bytes methods, and hands anything else to `_parse_one`. It is a pure-Python scan
rather than hiredis.Reader: measured on 1,000,000 records, hiredis's per-reply list and
the unchecked CRLF after each bulk (which we must re-check anyway) made it ~2-3x slower.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import NamedTuple

__all__ = ["AofFormatError", "AofRecord", "read_records"]

_COMMANDS = (b"LOADJOB", b"DELJOB")
# Disque's own protocol limits (networking.c): a bigger bulk or argc is a protocol error.
_MAX_BULK = 512 * 1024 * 1024
_MAX_ARGC = 1024 * 1024
# Enough digits for either limit; more can only be garbage.
_MAX_DIGITS = 10
_CR, _LF, _STAR, _DOLLAR = 13, 10, 42, 36
_CRLF = b"\r\n"

# The record prefix up to the argument's length digits, for the two commands Disque writes.
_LOADJOB_HEAD = b"*2\r\n$7\r\nLOADJOB\r\n$"
_DELJOB_HEAD = b"*2\r\n$6\r\nDELJOB\r\n$"

# Non-bytes input (memoryview over an mmap, say) is scanned through bytes copies of this
# size, so the fast path keeps its C-level bytes methods without copying the whole file.
_WINDOW = 4 * 1024 * 1024
# After the fast path gives up on a record, this many records go through the exact parser
# before trying it again: a file in an odd-but-valid encoding (leading zeros, lower-case
# commands) then costs exact-parser speed, not one window copy per record.
_SLOW_RUN = 256


class AofRecord(NamedTuple):
    command: bytes  # as written (b"LOADJOB" / b"DELJOB"); compare case-insensitively
    argument: bytes  # a serialized job, or a job ID
    end: int  # file offset just past this record


class AofFormatError(Exception):
    """A record that is not a well-formed LOADJOB/DELJOB, or an unfinished one at the end."""

    def __init__(self, offset: int, reason: str, truncated: bool) -> None:
        self.offset = offset  # where the bad record starts: truncating here keeps the good ones
        self.reason = reason
        # True only when the data ends inside a record that is well formed so far.
        self.truncated = truncated
        if truncated:
            message = (
                "Bad file format reading the append only file: "
                f"unexpected end of file at offset {offset}"
            )
        else:
            message = f"Bad file format reading the append only file at offset {offset}: {reason}"
        super().__init__(message)

    def __reduce__(self) -> tuple[type[AofFormatError], tuple[int, str, bool]]:
        # Exception pickling replays self.args, which here is the message, not our fields.
        return (type(self), (self.offset, self.reason, self.truncated))


def read_records(data: bytes | memoryview, start: int = 0, origin: int = 0) -> Iterator[AofRecord]:
    """Yields every good record in order from `start`; raises AofFormatError at the first bad one.

    `start` is a position in `data`; every offset reported (record ends, errors and their
    reasons) is `origin` plus a position in `data`: `data` may be a piece of a file that
    begins `origin` bytes into it. An empty input yields nothing.
    """
    view = data if isinstance(data, bytes) else memoryview(data).cast("B")
    size = len(view)
    if not 0 <= start <= size:
        raise ValueError(f"start {start} is outside the {size}-byte input")
    pos = start
    while pos < size:
        if isinstance(view, bytes):
            window, base = view, 0
        else:
            window, base = bytes(view[pos : pos + _WINDOW]), pos
        stop = yield from _fast(window, pos - base, origin + base)
        if base + stop > pos:
            # Progress: the fast path stopped at a record it cannot take, or (windowed)
            # at the window's edge. Either way, look again from there.
            pos = base + stop
            continue
        for _ in range(_SLOW_RUN):
            record = _parse_one(view, pos, size, origin)
            yield record
            pos = record.end - origin
            if pos >= size:
                break


def _fast(buf: bytes, pos: int, base: int) -> Generator[AofRecord, None, int]:
    """Yields records of Disque's own shape from buf[pos:]; returns where it stopped.

    Everything that is not plainly good (another shape, a short tail, a bad CRLF) makes
    it stop without a word, so `_parse_one` alone decides what an error says.
    """
    size = len(buf)
    startswith = buf.startswith
    find = buf.find
    new = tuple.__new__
    loadjob, deljob = _COMMANDS
    while pos < size:
        if startswith(_LOADJOB_HEAD, pos):
            command, p = loadjob, pos + 18
        elif startswith(_DELJOB_HEAD, pos):
            command, p = deljob, pos + 17
        else:
            return pos
        eol = find(_CRLF, p, p + _MAX_DIGITS + 2)
        if eol < 0:
            return pos
        digits = buf[p:eol]
        # isdigit on bytes is ASCII only; int() alone would also take " 7", "+7" or "7_0".
        if not digits.isdigit():
            return pos
        n = int(digits)
        p = eol + 2
        end = p + n + 2
        if n > _MAX_BULK or end > size or not startswith(_CRLF, end - 2):
            return pos
        yield new(AofRecord, (command, buf[p : p + n], base + end))
        pos = end
    return pos


def _parse_one(buf: bytes | memoryview, pos: int, size: int, origin: int = 0) -> AofRecord:
    """The record at `pos`, checked byte by byte; `size` is where the data ends, `origin`
    the file offset of buf[0] (every offset reported is one in the file)."""
    reader = _Cursor(buf, pos, size, origin)
    if buf[pos] != _STAR:
        raise reader.fail(f"expected '*', got {_show_byte(buf[pos])}")
    argc = reader.number(pos + 1, "multibulk length")
    if not 1 <= argc <= _MAX_ARGC:
        raise reader.fail(f"invalid multibulk length {argc}")
    command = reader.command(argc)
    if argc != 2:
        # A known command is ASCII letters, so it prints as written.
        reason = f"wrong number of arguments ({argc}) for {command.decode('ascii')}"
        raise reader.fail(reason)
    argument = reader.argument()
    return AofRecord(command, argument, origin + reader.pos)


class _Cursor:
    """Walks one record; every error names the record's start, the detail its own offset."""

    def __init__(self, buf: bytes | memoryview, start: int, size: int, origin: int) -> None:
        self.buf = buf
        self.origin = origin  # the file offset of buf[0]: added to every offset reported
        self.start = start
        self.size = size
        self.pos = start
        self.argc = 2  # once known to be wrong, an early end of the data is no excuse

    def fail(self, reason: str) -> AofFormatError:
        return AofFormatError(self.origin + self.start, reason, False)

    def unexpected_end(self, what: str) -> AofFormatError:
        if self.argc != 2:
            reason = f"wrong number of arguments ({self.argc}), and the file ends in the {what}"
            return AofFormatError(self.origin + self.start, reason, False)
        reason = f"unexpected end of file in the {what}, at offset {self.origin + self.size}"
        return AofFormatError(self.origin + self.start, reason, True)

    def number(self, pos: int, what: str) -> int:
        """The decimal number at pos, ended by CRLF; sets self.pos just past the CRLF."""
        buf, size = self.buf, self.size
        p = pos
        while p < size and 48 <= buf[p] <= 57 and p - pos < _MAX_DIGITS:
            p += 1
        if p == size:
            raise self.unexpected_end(what)
        if buf[p] != _CR or p == pos:
            found = bytes(buf[pos : min(p + 1, size)])
            raise self.fail(f"invalid {what} {_show_bytes(found)} at offset {self.origin + pos}")
        if p + 1 == size:
            raise self.unexpected_end(what)
        if buf[p + 1] != _LF:
            raise self.fail(f"expected '\\r\\n' after the {what} at offset {self.origin + p}")
        self.pos = p + 2
        return int(bytes(buf[pos:p]))

    def bulk(self, what: str) -> tuple[bytes, int, bool]:
        """The `$<len>\\r\\n<bytes>\\r\\n` at self.pos: (bytes, declared length, complete).

        If the data ends inside the bytes, they come back partial with complete False.
        """
        buf, size, p = self.buf, self.size, self.pos
        if p == size:
            raise self.unexpected_end(what)
        if buf[p] != _DOLLAR:
            raise self.fail(f"expected '$' at offset {self.origin + p}, got {_show_byte(buf[p])}")
        n = self.number(p + 1, f"{what} length")
        if n > _MAX_BULK:
            raise self.fail(f"invalid {what} length {n} at offset {self.origin + p + 1}")
        p = self.pos
        end = p + n
        if end > size:
            return bytes(buf[p:size]), n, False
        tail = bytes(buf[end : min(end + 2, size)])
        if not _CRLF.startswith(tail):
            raise self.fail(
                f"expected '\\r\\n' after the {n}-byte {what} at offset {self.origin + end}, "
                f"got {_show_bytes(tail)}"
            )
        if len(tail) < 2:
            raise self.unexpected_end(what)
        self.pos = end + 2
        return bytes(buf[p:end]), n, True

    def command(self, argc: int) -> bytes:
        """The first bulk, which must name LOADJOB or DELJOB (any case)."""
        self.argc = argc
        command, length, complete = self.bulk("command")
        if complete:
            if command.upper() not in _COMMANDS:
                raise self.fail(f"unknown command {_show_bytes(command)}")
            return command
        # The data ends inside the name: a tail only if what is there could still become one.
        partial = command.upper()
        if not any(len(c) == length and c.startswith(partial) for c in _COMMANDS):
            raise self.fail(f"unknown command {_show_bytes(command)}... ({length} bytes)")
        raise self.unexpected_end("command")

    def argument(self) -> bytes:
        argument, _, complete = self.bulk("argument")
        if not complete:
            raise self.unexpected_end("argument")
        return argument


def _show_byte(value: int) -> str:
    return _show_bytes(bytes((value,)))


def _show_bytes(value: bytes, limit: int = 40) -> str:
    """A quoted rendering safe to print whatever the bytes are: b"A\\x00'" -> 'A\\x00\\''."""
    text = value[:limit].decode("latin-1").encode("unicode_escape").replace(b"'", b"\\'")
    return f"'{text.decode('ascii')}{'...' if len(value) > limit else ''}'"
