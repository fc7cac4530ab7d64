"""hiredis Readers with a cap on the counts they preallocate for (`limited_reader_factory`).

RequestParser (protocol/requests.py) parses multi-bulk requests with hiredis where it can;
this module makes those readers safe to feed a stranger's bytes, or says it can't.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import hiredis

# hiredis allocates an aggregate's slots when it reads the count, before the elements come.
# Capped at this (as Redis 7 preallocates at most 1024 argv slots), a request costs at most
# 8 KiB per nesting level up front; longer requests are parsed by the walker.
HIREDIS_MAX_ELEMENTS = 1024


def limited_reader_factory() -> Callable[[], tuple[hiredis.Reader, Any]] | None:
    """A factory of hiredis Readers refusing counts over HIREDIS_MAX_ELEMENTS, or None.

    hiredis (C) has that limit, `redisReader.maxelements`, but hiredis-py does not expose
    it: it is set through ctypes, at the offset of hiredis 1.x's struct (err, errstr[128],
    buf, pos, len, maxbuf, maxelements) behind the Python object's header. The same
    ctypes view reads `pos`, where the last complete request ended. The layout is checked
    here once against values hiredis-py does expose (len, maxbuf) and the limit against
    hiredis' own error; on any other hiredis or platform there is no fast path, and the
    exact walker parses everything (correct, about twice the parsing cost).
    """
    if not hiredis.__version__.startswith("3.") or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    header = object.__basicsize__  # hiredis_ReaderObject: PyObject_HEAD, redisReader *

    def make() -> tuple[hiredis.Reader, Any]:
        reader = hiredis.Reader()
        base = ctypes.c_void_p.from_address(id(reader) + header).value or 0
        fields = (ctypes.c_int64 * 4).from_address(base + 144)  # pos len maxbuf maxelements
        fields[3] = HIREDIS_MAX_ELEMENTS
        return reader, fields

    try:
        probe = hiredis.Reader()
        probe.setmaxbuf(123_457)
        probe.feed(b"*1\r\n$1\r\na\r\n*2")
        if probe.gets() != [b"a"]:  # and stops where the next request starts
            return None
        base = ctypes.c_void_p.from_address(id(probe) + header).value
        if not base:
            return None
        pos, length, maxbuf, maxelements = (ctypes.c_int64 * 4).from_address(base + 144)
        if (pos, length, maxbuf, maxelements) != (11, probe.len(), 123_457, (1 << 32) - 1):
            return None
        limited, _ = make()
        limited.feed(b"*%d\r\n" % HIREDIS_MAX_ELEMENTS)
        if limited.gets() is not False:
            return None
        limited, _ = make()
        limited.feed(b"*%d\r\n" % (HIREDIS_MAX_ELEMENTS + 1))
        try:
            limited.gets()
        except hiredis.ProtocolError:
            return make
        return None
    except Exception:  # any surprise: no fast path, never a broken parser
        return None
