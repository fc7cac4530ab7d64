"""RESP2 and RESP3 replies, encoded once, to bytes, by `encode`. Requests are parsed in
`conveyor.protocol.requests`.

RESP3 (for clients that sent `HELLO 3`) changes only what Redis changes for the same
replies: one null (`_`) for every type, maps (`%`) where Redis sends maps (HELLO, CONFIG
GET), verbatim strings (`=`) where Redis sends them (INFO, CLIENT INFO/LIST). Everything
else keeps its RESP2 shape, so a RESP2 and a RESP3 client decode a reply to the same
values. `encode(value, resp3=True)` does that; the RESP2 path is unchanged.
"""

from __future__ import annotations

from typing import Any


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
