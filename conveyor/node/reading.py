"""What a connection reads with before and after its parser: the one placeholder parser
of every connection that has not sent a byte yet, and the stand-in for the rest of a read
whose parser failed. (Split from node/connection.py, which owns the reading itself.)
"""

from __future__ import annotations

from collections.abc import Iterator

from conveyor.protocol.requests import ProtocolError, RequestParser


class FirstRead(Exception):
    """Raised by `NO_PARSER_YET.feed`: the connection's first bytes have come."""


class NoParserYet(RequestParser):
    """The parser of every connection that has not sent a byte yet (one, shared).

    Its `feed` raises FirstRead, which `data_received` catches to make the connection's
    own parser: a try costs nothing in CPython 3.11+ where an `is None` test on every read
    would not. What the server sets on it (`authenticated`, `max_bulk_bytes`) is unused:
    the real parser takes both from the connection and the config when it is made.
    """

    __slots__ = ()

    def feed(self, data: bytes) -> Iterator[list[bytes]]:
        raise FirstRead

    def feed_one(self, data: bytes) -> list[bytes] | None:
        return None  # feed() makes the connection's parser


NO_PARSER_YET = NoParserYet()


def raising(exc: ProtocolError) -> Iterator[list[bytes]]:
    """The rest of a read whose parser failed: `_run` answers the error."""
    raise exc
    yield  # a generator: raises when iterated, as the parser did
