"""Following a message's stdio.log while the worker writes and rotates it.

The worker (conveyor.worker.stdiolog) renames a full `stdio.log` to `stdio.log.1` (`.1` to
`.2`, ...) and starts a new one; with no backups kept it truncates the file in place. An
offset alone cannot tell the new file from the old: it is shorter (the reader would wait
for nothing), or it already grew past the offset (the reader would skip its start and the
old file's end). So a `LogCursor` carries the identity (device, inode) of the file it
points into: while `stdio.log` is still that file, reading goes on from the offset; once
it is not, the old file is finished from the `stdio.log.N` it was renamed to, then each
newer one from its start. A rename keeps the inode, so moving the message directory from
one state to another (active -> done) changes nothing.

A file truncated in place keeps its inode; the last bytes read before the offset (`seen`)
are read again with what follows, and when they changed the file was started over: it
is then read from its start.

The REST log (/api/v1/.../log) hands the cursor to its client as an opaque string
(`encode`, `decode`): URL-safe base64 of the identity, the offset and the bytes seen. It
needs no signature: a forged one only names some other place in this message's own logs.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

LOG_NAME = "stdio.log"
SEEN_BYTES = 64  # enough to tell a started-over log from the old one in all but freak cases
MAX_HOPS = 100  # the worker keeps at most 100 backups (conveyor.worker.stdiolog.MAX_BACKUPS)
_HEAD = struct.Struct(">QQQ")  # st_dev, st_ino, offset
MAX_OFFSET = 2**62  # past what seek() takes
# Unpadded base64 of 24 to 24 + SEEN_BYTES bytes: never a length of 4k + 1. Whatever
# matches it decodes (the schema promises so), so decode() refuses nothing it admits.
CURSOR_RE = r"(?:[A-Za-z0-9_-]{4}){8,29}(?:[A-Za-z0-9_-]{2,3})?"
NO_LOG = (0, 0)  # the identity in a cursor given before the log existed: no file has it


@dataclass(frozen=True)
class LogCursor:
    """Where a reader is: `offset` bytes into the file `ident` (st_dev, st_ino), whose
    bytes just before the offset were `seen`."""

    ident: tuple[int, int]
    offset: int
    seen: bytes = b""

    def after(self, data: bytes) -> LogCursor:
        seen = (self.seen + data)[-SEEN_BYTES:]
        return LogCursor(self.ident, self.offset + len(data), seen)


def encode(cursor: LogCursor) -> str:
    raw = _HEAD.pack(*cursor.ident, cursor.offset) + cursor.seen
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode(text: str) -> LogCursor:
    """The cursor `encode` gave; ValueError when `text` does not match CURSOR_RE. One that
    matches but no answer gave is some place in the message's logs, harmlessly: a file no
    log has is left for the newest, bytes seen that do not match read the file again."""
    if not re.fullmatch(CURSOR_RE, text):
        raise ValueError("not a log cursor (give back the X-Log-Cursor of an answer)")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not a log cursor (give back the X-Log-Cursor of an answer)") from None
    device, inode, offset = _HEAD.unpack_from(raw)
    return LogCursor((device, inode), min(offset, MAX_OFFSET), raw[_HEAD.size :][-SEEN_BYTES:])


def read(directory: Path, offset: int, limit: int) -> tuple[bytes, int, LogCursor]:
    """Up to `limit` bytes of stdio.log from `offset` (negative: from the end), its size,
    and the cursor after the bytes read (no log yet: at the start of the one to come)."""
    try:
        with open(directory / LOG_NAME, "rb") as log:
            ident = _ident(os.fstat(log.fileno()))
            size = log.seek(0, os.SEEK_END)
            start = max(0, size + offset) if offset < 0 else min(offset, size)
            back = min(start, SEEN_BYTES)  # the bytes before `start`, for the cursor
            log.seek(start - back)
            data = log.read(back + limit)
    except OSError:
        return b"", 0, LogCursor(NO_LOG, 0)
    return data[back:], size, LogCursor(ident, start - back).after(data)


def size(directory: Path) -> int:
    """The size of the message's stdio.log now (0: none yet)."""
    try:
        return os.stat(directory / LOG_NAME).st_size
    except OSError:
        return 0


def whole_chars(data: bytes, cursor: LogCursor) -> tuple[bytes, LogCursor]:
    """`data` without a UTF-8 character it ends in the middle of, and the cursor before
    that character's first bytes, so the next read gets it whole. Unchanged when those
    bytes are all of `data` (a read always moves on) or came from an older file."""
    cut = _unfinished(data)
    if not 0 < cut < len(data) or cut > min(cursor.offset, len(cursor.seen)):
        return data, cursor
    return data[:-cut], LogCursor(cursor.ident, cursor.offset - cut, cursor.seen[:-cut])


def _unfinished(data: bytes) -> int:
    """How many bytes at the end of `data` start a UTF-8 character they do not finish."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: the character's first
            length = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            return back if 0xC0 <= byte < 0xF8 and length > back else 0
    return 0


def _ident(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


def tail(directory: Path, limit: int) -> tuple[bytes, LogCursor | None]:
    """The last `limit` (> 0) bytes of the message's stdio.log and the cursor at its end
    (None: no log yet)."""
    data, _, cursor = read(directory, -limit, limit)
    return data, None if cursor.ident == NO_LOG else cursor


def start(directory: Path) -> LogCursor | None:
    """A cursor at the start of the message's stdio.log (None: no log yet)."""
    try:
        return LogCursor(_ident(os.stat(directory / LOG_NAME)), 0)
    except OSError:
        return None


def _read_at(path: Path, cursor: LogCursor, limit: int) -> tuple[bytes, LogCursor] | None:
    """Up to `limit` bytes of `path` at `cursor`; None when `path` is not the cursor's file
    (it was rotated away meanwhile). A file started over is read from its start."""
    try:
        with open(path, "rb") as log:
            if _ident(os.fstat(log.fileno())) != cursor.ident:
                return None
            back = len(cursor.seen)
            log.seek(max(0, cursor.offset - back))
            data = log.read(back + limit)
            if data[:back] == cursor.seen and len(data) >= back:
                return data[back:], cursor.after(data[back:])
            start = LogCursor(cursor.ident, 0)  # truncated in place: from the top
            log.seek(0)
            data = log.read(limit)
            return data, start.after(data)
    except OSError:
        return None


def _file_at(directory: Path, number: int) -> Path:
    return directory / (LOG_NAME if number == 0 else f"{LOG_NAME}.{number}")


def _rotated_to(directory: Path, ident: tuple[int, int]) -> int | None:
    """Which backup (1, 2, ...) the file `ident` is now; None if none is."""
    for number in range(1, MAX_HOPS + 1):
        try:
            if _ident(os.stat(_file_at(directory, number))) == ident:
                return number
        except OSError:
            return None  # backups are numbered without gaps: past the last one
    return None


def follow(directory: Path, cursor: LogCursor, limit: int) -> tuple[bytes, LogCursor]:
    """What was written after `cursor`, at most `limit` bytes, and the cursor after it;
    across rotations, the rest of the old file then the newer ones from their start."""
    data = b""
    for _ in range(MAX_HOPS + 2):  # each pass moves to a newer file, or returns
        read = _read_at(directory / LOG_NAME, cursor, limit - len(data))
        if read is not None:
            return data + read[0], read[1]
        number = _rotated_to(directory, cursor.ident)
        if number is not None:
            read = _read_at(_file_at(directory, number), cursor, limit - len(data))
            if read is None:  # rotated again between two looks: look again
                continue
            data += read[0]
            cursor = read[1]
            if len(data) >= limit:
                return data, cursor
        newer = _file_at(directory, number - 1 if number else 0)
        try:
            cursor = LogCursor(_ident(os.stat(newer)), 0)
        except OSError:
            return data, cursor  # no log any more (the message deleted): nothing new
    return data, cursor
