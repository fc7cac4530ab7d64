"""Fuzz target: `RequestParser` fed arbitrary bytes in arbitrary splits, with small limits.

Run: `.venv/bin/python -m fuzz.fuzz_resp [libFuzzer flags] [corpus dirs]` (or `make fuzz`).

Input layout (decoded with FuzzedDataProvider, which reads integers from the end): the
stream is the front of the input; the tail holds up to 8 cut points and, rarely, a filler
that repeats a slice of the stream up to 96 KiB (so a small input can make a 70 KB bulk
or a 90 KB pipeline). `encode_input` builds inputs in that layout for seeds and tests.

Allowed outcomes: requests (non-empty lists of `bytes`) and `ProtocolError`. A crash:
any other exception (MemoryError, IndexError, a hiredis error leaking), an element that is
not bytes, an empty request, a stall (one input taking over `STALL_S`), and:
- differential: the stream fed whole and in pieces gives the same requests (when one of
  the two stops at a protocol error, its requests are a prefix of the other's);
- reference: for streams a small, conservative Redis-style reference parser accepts
  (canonical lengths, counts and bulks within the parser's limits, short inline lines),
  both feeds give exactly its requests and no error, and the parser holds no more than
  the unfinished request's bytes (`buffered_bytes()`); a count or bulk length over the
  limit after a valid prefix must end in a ProtocolError by the end of the stream (the
  parser must not go on buffering the request), after exactly the prefix's requests.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import time
from typing import Any

import atheris

from conveyor.protocol.resp import error as error_reply
from fuzz.harness import Guard, Violation, main_args, no_known_issues
from fuzz.resp_check import Malformed, check_reply

MAX_BULK = 256  # proto-max-bulk-len for the parser under test
MAX_INLINE = 1024  # inline request limit (patched over resp.MAX_INLINE_BYTES)
MAX_ARGS = 64  # a multibulk count limit, passed only if the parser takes one
QUERY_LIMIT = 64 * 1024  # passed only if the parser takes a buffer limit
# One input may not keep the node busy longer than this (plus a per-byte allowance: the
# instrumented parser runs ~10x slower than in the node).
# CONVEYOR_FUZZ_STALL_SCALE relaxes both on a loaded machine (the bounded run in `make test`).
_SCALE = float(os.environ.get("CONVEYOR_FUZZ_STALL_SCALE", "1"))
STALL_S = 1.0 * _SCALE
STALL_S_PER_BYTE = 30e-6 * _SCALE
FILL_UNIT = 8 * 1024  # the filler grows the stream by 8..96 KiB
FILL_UNITS = 12  # more: a stream of tiny requests nears libFuzzer's 5 s timeout

resp: Any = None  # conveyor.protocol.requests, imported by load()
_parser_kwargs: dict[str, int] = {}


def load(instrument: bool = False) -> None:
    """Import the parser (instrumented for coverage when fuzzing) and set small limits."""
    global resp
    if resp is not None:
        return
    if instrument:
        with atheris.instrument_imports(include=["conveyor"]):
            import conveyor.protocol.requests as module
    else:
        import conveyor.protocol.requests as module
    if hasattr(module, "MAX_INLINE_BYTES"):
        module.MAX_INLINE_BYTES = MAX_INLINE
    # Whatever limits the parser takes, small: matched by name, so a parser that grows
    # new limits keeps being fuzzed with them small.
    for name in inspect.signature(module.RequestParser).parameters:
        lowered = name.lower()
        if "inline" in lowered:
            _parser_kwargs[name] = MAX_INLINE
        elif "multibulk" in lowered or "arg" in lowered or "count" in lowered:
            _parser_kwargs[name] = MAX_ARGS
        elif "bulk" in lowered:
            _parser_kwargs[name] = MAX_BULK
        elif "buffer" in lowered or "query" in lowered:
            _parser_kwargs[name] = QUERY_LIMIT
    resp = module


def make_parser() -> Any:
    return resp.RequestParser(**_parser_kwargs)


# -- input layout -------------------------------------------------------------------------
def decode_input(data: bytes) -> tuple[bytes, list[int], bool]:
    """(stream, sorted cut positions, authenticated) from a fuzz input."""
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, 255)
    cuts = [fdp.ConsumeIntInRange(0, 0xFFFF) for _ in range(fdp.ConsumeIntInRange(0, 8))]
    fill_code = fdp.ConsumeIntInRange(0, 255)
    fill = None
    if fill_code >= 250:  # rare: a big stream costs ~100 small ones
        fill = (
            fdp.ConsumeIntInRange(1, FILL_UNITS) * FILL_UNIT,
            fdp.ConsumeIntInRange(0, 0xFFFF),
            fdp.ConsumeIntInRange(0, 63),
            fdp.ConsumeIntInRange(0, 255),
        )
    stream = fdp.ConsumeBytes(fdp.remaining_bytes())
    if fill is not None:
        size, where, unit_len, byte = fill
        where %= len(stream) + 1
        unit = stream[where : where + unit_len] or bytes([byte])
        stream = stream[:where] + unit * max(1, size // len(unit)) + stream[where:]
    length = len(stream)
    if length <= 0xFFFF:
        positions = [cut % (length + 1) for cut in cuts]
    else:
        positions = [cut * length // 0x10000 for cut in cuts]
    return stream, sorted(positions), mode % 4 != 3


def encode_input(
    stream: bytes,
    cuts: list[int] | None = None,
    fill: tuple[int, int, int, int] | None = None,
    authenticated: bool = True,
) -> bytes:
    """The fuzz input `decode_input` turns into `stream` cut at `cuts` (positions in the
    final stream, exact up to 64 KiB, within a byte or two beyond), for a client
    that has authenticated or not (when the parser knows the difference). `fill` is
    (size in 8 KiB units 1..12, position, unit length 0..63, filler byte)."""
    cuts = sorted(cuts or [])
    assert len(cuts) <= 8

    def build(values: list[int]) -> bytes:
        consumed = [0 if authenticated else 3, len(values)]
        for value in values:
            consumed += [value >> 8, value & 0xFF]
        if fill is None:
            consumed.append(0)
        else:
            units, where, unit_len, byte = fill
            consumed += [255, units - 1, where >> 8, where & 0xFF, unit_len, byte]
        return stream + bytes(reversed(consumed))

    length = len(decode_input(build([]))[0])
    if length > 0xFFFF:  # cut points are scaled to the stream: find each one's code
        cuts = [min(-(-cut * 0x10000 // length), 0xFFFF) for cut in cuts]
    data = build(cuts)
    return data


def split(stream: bytes, positions: list[int]) -> list[bytes]:
    chunks = []
    start = 0
    for position in positions:
        chunks.append(stream[start:position])
        start = position
    chunks.append(stream[start:])
    return chunks


# -- the reference ------------------------------------------------------------------------
_CANONICAL = re.compile(rb"(0|[1-9][0-9]*)\Z")
# How a stream ends, per the reference: on a request boundary; inside a valid request; at
# something the parser must refuse (a count or bulk length over its limit); or at
# something a conservative reference won't judge.
OK, INCOMPLETE, REFUSE, UNSURE = "ok", "incomplete", "refuse", "unsure"


def limits(authenticated: bool) -> tuple[int, int]:
    """(the parser's multibulk count limit, its bulk limit) for this client."""
    count_limit = getattr(resp, "MAX_MULTIBULK_LENGTH", 1024 * 1024)
    if any(_parser_kwargs.get(name) == MAX_ARGS for name in _parser_kwargs):
        count_limit = MAX_ARGS
    bulk_limit = MAX_BULK
    if not authenticated:
        count_limit = min(count_limit, getattr(resp, "UNAUTHENTICATED_MULTIBULK_LENGTH", 10))
        bulk_limit = min(bulk_limit, getattr(resp, "UNAUTHENTICATED_BULK_BYTES", 16 * 1024))
    return count_limit, bulk_limit


def _partial_header(text: bytes, maximum: int) -> str:
    """A `*`/`$` header cut before its CRLF: INCOMPLETE if what came is a plausible start."""
    digits = text[:-1] if text.endswith(b"\r") else text
    if not digits:
        return INCOMPLETE
    if len(digits) <= 19 and _CANONICAL.match(digits) and int(digits) <= maximum:
        return INCOMPLETE
    return UNSURE


def reference(stream: bytes, authenticated: bool = True) -> tuple[list[list[bytes]], str, int]:
    """Requests in `stream` as Redis would parse them, how the stream ends (see OK...),
    and where the last complete request ends."""
    count_limit, bulk_limit = limits(authenticated)
    requests: list[list[bytes]] = []
    pos = boundary = 0
    length = len(stream)
    names = "".join(_parser_kwargs)
    if ("query" in names or "buffer" in names) and length > QUERY_LIMIT:
        return requests, UNSURE, boundary
    while pos < length:
        boundary = pos
        if stream[pos] == 42:  # '*'
            end = stream.find(b"\r\n", pos)
            if end < 0:
                return requests, _partial_header(stream[pos + 1 :], count_limit), boundary
            count_text = stream[pos + 1 : end]
            if not _CANONICAL.match(count_text) or len(count_text) > 18:
                return requests, UNSURE, boundary
            count = int(count_text)
            if count > count_limit:
                return requests, REFUSE, boundary
            if count == 0:
                return requests, UNSURE, boundary
            pos = end + 2
            args = []
            for _ in range(count):
                if pos >= length:
                    return requests, INCOMPLETE, boundary
                if stream[pos] != 36:  # '$'
                    return requests, UNSURE, boundary
                end = stream.find(b"\r\n", pos)
                if end < 0:
                    return requests, _partial_header(stream[pos + 1 :], bulk_limit), boundary
                size_text = stream[pos + 1 : end]
                if not _CANONICAL.match(size_text) or len(size_text) > 18:
                    return requests, UNSURE, boundary
                size = int(size_text)
                if size > bulk_limit:
                    return requests, REFUSE, boundary
                start = end + 2
                if start + size + 2 > length:
                    after = stream[start + size :]
                    status = INCOMPLETE if b"\r\n".startswith(after) else UNSURE
                    return requests, status, boundary
                if stream[start + size : start + size + 2] != b"\r\n":
                    return requests, UNSURE, boundary
                args.append(stream[start : start + size])
                pos = start + size + 2
            requests.append(args)
        else:
            newline = stream.find(b"\n", pos)
            line = stream[pos:newline] if newline >= 0 else stream[pos:]
            if len(line) > MAX_INLINE // 2:
                return requests, UNSURE, boundary
            if newline < 0:
                return requests, INCOMPLETE, boundary
            if line.endswith(b"\r"):
                line = line[:-1]
            if b"\r" in line:
                return requests, UNSURE, boundary
            args = resp.split_args(line)
            if args is None:
                return requests, UNSURE, boundary
            if args:
                if not authenticated and len(args) > count_limit:
                    return requests, UNSURE, boundary
                requests.append(args)
            pos = newline + 1
    return requests, OK, length


# -- the target ---------------------------------------------------------------------------
def feed_all(
    chunks: list[bytes], authenticated: bool = True, one_first: bool = False
) -> tuple[list[list[bytes]], str | None, int]:
    """Feed the chunks to a new parser: (requests, protocol error text or None, the bytes
    the parser says it holds at the end, -1 if it can't say). `one_first`: each chunk is
    first offered to `feed_one`, as a connection in a cluster does, then to `feed`."""
    parser = make_parser()
    feed_one = getattr(parser, "feed_one", None) if one_first else None
    if not authenticated and hasattr(parser, "authenticated"):
        parser.authenticated = False
    measure = getattr(parser, "buffered_bytes", None)
    requests: list[list[bytes]] = []
    fed = 0
    for chunk in chunks:
        fed += len(chunk)
        try:
            one = feed_one(chunk) if feed_one is not None else None
            for request in parser.feed(chunk) if one is None else (one,):
                if type(request) is not list or not request:
                    raise Violation(f"request is not a non-empty list: {request!r:.200}")
                for element in request:
                    if type(element) is not bytes:
                        raise Violation(f"request element is {type(element).__name__}")
                requests.append(request)
        except resp.ProtocolError as exc:
            text = str(exc)
            try:  # what the connection sends before closing
                check_reply(error_reply(f"ERR {text}"))
            except Malformed as bad:
                raise Violation(f"protocol error reply: {bad}") from None
            return requests, text, -1
        if measure is not None:
            held = measure()
            if not 0 <= held <= fed:
                raise Violation(f"buffered_bytes() is {held} after {fed} bytes fed")
    return requests, None, measure() if measure is not None else -1


def _is_prefix(short: list[list[bytes]], long: list[list[bytes]]) -> bool:
    return long[: len(short)] == short


def _describe(requests: list[list[bytes]]) -> str:
    return f"{len(requests)} requests, last {requests[-1:]!r:.160}"


def check_stream(stream: bytes, positions: list[int], authenticated: bool = True) -> None:
    """Every property of the module docstring, for one stream and one way to cut it."""
    started = time.perf_counter()
    whole, whole_error, whole_held = feed_all([stream], authenticated)
    pieces, pieces_error, pieces_held = feed_all(
        split(stream, positions), authenticated, one_first=True
    )
    elapsed = time.perf_counter() - started
    if elapsed > STALL_S + STALL_S_PER_BYTE * len(stream):
        raise Violation(f"stall: {elapsed:.2f} s for {len(stream)} bytes")
    if whole_error is None and pieces_error is None:
        if whole != pieces:
            raise Violation(
                f"whole vs pieces differ: {_describe(whole)} / {_describe(pieces)} "
                f"(cuts {positions[:8]})"
            )
        if whole_held != pieces_held:
            raise Violation(f"whole vs pieces hold {whole_held} / {pieces_held} bytes")
    elif whole_error is not None and pieces_error is None:
        if not _is_prefix(whole, pieces):
            raise Violation(f"whole stopped ({whole_error}) off the pieces' requests")
    elif pieces_error is not None and whole_error is None:
        if not _is_prefix(pieces, whole):
            raise Violation(f"pieces stopped ({pieces_error}) off the whole's requests")
    elif not (_is_prefix(whole, pieces) or _is_prefix(pieces, whole)):
        raise Violation("whole and pieces stopped at errors after different requests")
    expected, status, boundary = reference(stream, authenticated)
    outcomes = (
        ("whole", whole, whole_error, whole_held),
        ("pieces", pieces, pieces_error, pieces_held),
    )
    if status in (OK, INCOMPLETE):
        for mode, got, error, held in outcomes:
            if error is not None:
                raise Violation(f"valid stream refused ({mode}): {error} after {len(got)}")
            if got != expected:
                raise Violation(
                    f"valid stream misparsed ({mode}): {_describe(got)}, "
                    f"expected {_describe(expected)}"
                )
            if held > len(stream) - boundary:
                raise Violation(
                    f"holds {held} bytes ({mode}), the unfinished request has "
                    f"{len(stream) - boundary}"
                )
    elif status == REFUSE:
        for mode, got, error, _held in outcomes:
            if error is None:
                raise Violation(
                    f"a count or bulk length over the limit accepted ({mode}): the parser "
                    "keeps buffering the request instead of refusing it"
                )
            if got != expected:
                raise Violation(f"over the limit: wrong requests before the error ({mode})")


# -- known issues -------------------------------------------------------------------------
def _huge_count_still_breaks() -> bool:
    """Issue 9, defect 2: `*4294967295` makes hiredis raise MemoryError (and `*2147483647`
    stalls for seconds) instead of a prompt ProtocolError."""
    try:
        list(make_parser().feed(b"*4294967295\r\n"))
    except resp.ProtocolError:
        return False
    except Exception:
        return True
    return True


# Known defects, tracked by xfail regression tests in tests/fuzz/test_regressions.py:
# (label, does the code still have it?, the stream shape that reaches it). Streams of
# that shape are skipped (and counted) only while the probe says the defect is there, so
# a fix re-arms the fuzzer by itself. Stalls must be skipped before running: a 5 s
# stall is a libFuzzer timeout, not an exception.
KNOWN_ISSUES: list[tuple[str, Any, re.Pattern[bytes]]] = [
    (
        "issue 9.2: an aggregate count over 10^7 stalls or MemoryErrors in hiredis",
        _huge_count_still_breaks,
        re.compile(rb"[*%~>|]-?[0-9]{8}"),
    ),
]
_active_known: list[tuple[str, re.Pattern[bytes]]] | None = None


def known_shape(stream: bytes) -> str | None:
    """The label of an open known issue this stream would hit, if any."""
    global _active_known
    if _active_known is None:
        _active_known = [(label, shape) for label, probe, shape in KNOWN_ISSUES if probe()]
    for label, shape in _active_known:
        if shape.search(stream):
            return label
    return None


def check_input(data: bytes) -> None:
    load()
    stream, positions, authenticated = decode_input(data)
    label = known_shape(stream)
    if label is not None:
        GUARD.note_known(label)
        return
    check_stream(stream, positions, authenticated)


GUARD = Guard(no_known_issues)


def one_input(data: bytes) -> None:
    GUARD.run(check_input, data)


def main() -> None:
    load(instrument=True)
    atheris.Setup(main_args(), one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    sys.exit(main())
