"""RequestParser: the same requests however a stream is split, Redis' errors for every bad
header, and memory bounded by the bytes received (never by the sizes announced).

Every test runs against both parsers: `fast` (hiredis for whole requests, the walker for
the rest, as the node runs) and `walker` (the exact state machine alone, as on a hiredis
whose struct layout could not be verified). Their results must be identical.
"""

from __future__ import annotations

import itertools
import tracemalloc
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor.protocol import requests as resp
from conveyor.protocol.limited_hiredis import HIREDIS_MAX_ELEMENTS
from conveyor.protocol.requests import (
    MAX_INLINE_BYTES,
    ProtocolError,
    RequestParser,
)

Factory = Callable[..., RequestParser]


def _walker_only(*args: object, **kwargs: object) -> RequestParser:
    parser = RequestParser(*args, **kwargs)  # type: ignore[arg-type]
    parser._hiredis = None  # what the parser does when hiredis' layout is unknown
    return parser


@pytest.fixture(params=["fast", "walker"])
def make(request: pytest.FixtureRequest) -> Factory:
    if request.param == "fast":
        assert resp._new_hiredis is not None, "hiredis' layout check failed: no fast path"
        return RequestParser
    return _walker_only


PARSERS: list[Factory] = [RequestParser, _walker_only]


def encode(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def feed_all(parser: RequestParser, chunks: list[bytes]) -> list[list[bytes]]:
    requests: list[list[bytes]] = []
    for chunk in chunks:
        requests.extend(parser.feed(chunk))
    return requests


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def error_of(parser: RequestParser, chunks: list[bytes]) -> str:
    with pytest.raises(ProtocolError) as info:
        feed_all(parser, chunks)
    return str(info.value)


# -- valid streams: any split, same requests -------------------------------------------------

# Arguments with the bytes that matter to framing: CR, LF, '*', '$', digits, NUL.
binary_args = st.binary(max_size=40) | st.sampled_from(
    [b"", b"\r\n", b"*1\r\n$1\r\nx\r\n", b"$5\r\n", b"\r", b"\n", b"\x00", b"PING\r\n"]
)
inline_words = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_:.",
    min_size=1,
    max_size=12,
).map(str.encode)


@st.composite
def requests_and_stream(draw: st.DrawFn) -> tuple[list[list[bytes]], bytes]:
    """Mixed multi-bulk and inline requests, with empty lines and `*0` between them."""
    expected: list[list[bytes]] = []
    stream: list[bytes] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["multibulk", "multibulk", "inline", "noise"]))
        if kind == "multibulk":
            args = draw(st.lists(binary_args, min_size=1, max_size=6))
            expected.append(args)
            stream.append(encode(*args))
        elif kind == "inline":
            words = draw(st.lists(inline_words, min_size=1, max_size=5))
            expected.append(words)
            stream.append(b" ".join(words) + draw(st.sampled_from([b"\r\n", b"\n"])))
        else:  # no request at all, as in Redis
            stream.append(draw(st.sampled_from([b"\r\n", b"\n", b" \r\n", b"*0\r\n", b"*-1\r\n"])))
    return expected, b"".join(stream)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=requests_and_stream(), cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_any_split_of_a_valid_stream_gives_the_same_requests(
    case: tuple[list[list[bytes]], bytes], cuts: list[int]
) -> None:
    expected, stream = case
    for factory in PARSERS:
        parser = factory()
        assert feed_all(parser, split_at(stream, cuts)) == expected
        assert parser.buffered_bytes() == 0
        # And byte by byte, the worst split there is.
        parser = factory()
        assert feed_all(parser, [stream[i : i + 1] for i in range(len(stream))]) == expected


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, 1 << 20), max_size=6))
def test_requests_over_the_hiredis_cap_and_back(cuts: list[int]) -> None:
    # Over HIREDIS_MAX_ELEMENTS arguments the walker parses the request, then hands back.
    many = [b"ACKJOB", *(b"id%d" % i for i in range(HIREDIS_MAX_ELEMENTS + 5))]
    stream = encode(b"PING") + encode(*many) + encode(b"ECHO", b"x") + b"PING\r\n"
    expected = [[b"PING"], many, [b"ECHO", b"x"], [b"PING"]]
    for factory in PARSERS:
        assert feed_all(factory(), split_at(stream, cuts)) == expected


def test_inline_after_a_big_multibulk_in_one_read(make: Factory) -> None:
    # Issue 9, defect 6: hiredis stopped keeping the read past 64 KiB of one request, so an
    # inline command behind a 140 KB request was read as RESP ("got 'P' as reply type").
    for size in (70_000, 140_000, 1_000_000):
        body = b"b" * size
        stream = encode(b"ECHO", body) + b"PING\r\n" + encode(b"ECHO", b"x") + b"QLEN q\r\n"
        expected = [[b"ECHO", body], [b"PING"], [b"ECHO", b"x"], [b"QLEN", b"q"]]
        assert list(make().feed(stream)) == expected
        for cut in (1, 5, 64 * 1024, size // 2, size + 10, size + 20, len(stream) - 3):
            assert feed_all(make(), [stream[:cut], stream[cut:]]) == expected


def test_big_bulk_in_many_reads_is_joined_once(make: Factory) -> None:
    body = bytes(range(256)) * 20_000  # 5 MB, CR and LF included
    stream = encode(b"ADDJOB", b"q", body, b"0") + encode(b"PING")
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]
    parser = make()
    requests = feed_all(parser, chunks)
    assert requests == [[b"ADDJOB", b"q", body, b"0"], [b"PING"]]


def test_empty_bulks_and_empty_requests(make: Factory) -> None:
    stream = b"*0\r\n*-1\r\n" + encode(b"ECHO", b"") + b"\r\n\r\n" + encode(b"", b"")
    assert list(make().feed(stream)) == [[b"ECHO", b""], [b"", b""]]


def outcome(parser: RequestParser, chunks: list[bytes]) -> tuple[list[list[bytes]], str | None]:
    """The requests yielded, and the error that stopped the parser (None if none)."""
    seen: list[list[bytes]] = []
    try:
        for chunk in chunks:
            seen.extend(parser.feed(chunk))
    except ProtocolError as exc:
        return seen, str(exc)
    return seen, None


ECHO = b"*2\r\n$4\r\nECHO\r\n"
PING = encode(b"PING")


@pytest.mark.parametrize(
    ("element", "expected", "authenticated"),
    [
        # hiredis can't tell these from `$` bulks in what it returns: the walker reads them
        # as the string they carry too, wherever reads cut them (Redis refuses them all).
        (b"+" + b"s" * 40 + b"\r\n", b"s" * 40, True),
        (b"+a\rb\nc\r\n", b"a\rb\nc", True),
        (b"+\r\n", b"", True),
        (b"(" + b"7" * 40 + b"\r\n", b"7" * 40, True),
        (b"(-12\r\n", b"-12", True),
        (b"=8\r\ntxt:abcd\r\n", b"abcd", True),
        (b"=10\r\nmkd:ab\r\ncd\r\n", b"ab\r\ncd", True),
        (b"=4\r\ntxt:\r\n", b"", True),
        (b"+" + b"s" * 16384 + b"\r\n", b"s" * 16384, False),
        (b"=16388\r\ntxt:" + b"v" * 16384 + b"\r\n", b"v" * 16384, False),
    ],
)
def test_a_line_or_verbatim_element_is_read_as_its_string_however_split(
    make: Factory, element: bytes, expected: bytes, authenticated: bool
) -> None:
    stream = ECHO + element + PING
    whole = ([[b"ECHO", expected], [b"PING"]], None)
    assert outcome(make(authenticated=authenticated), [stream]) == whole
    for cut in range(1, len(stream)):
        chunks = [stream[:cut], stream[cut:]]
        assert outcome(make(authenticated=authenticated), chunks) == whole, cut
    if len(stream) < 100:
        byte_by_byte = [stream[i : i + 1] for i in range(len(stream))]
        assert outcome(make(authenticated=authenticated), byte_by_byte) == whole


@pytest.mark.parametrize(
    ("element", "message", "max_bulk_bytes", "authenticated"),
    [
        (b"(1a2\r\n", "Protocol error: expected '$', got '('", 100, True),
        (b"=8\r\ntxtXabcd\r\n", "Protocol error: expected '$', got '='", 100, True),
        (b"=3\r\nabc\r\n", "Protocol error: expected '$', got '='", 100, True),
        # Over the bulk limit, counted as hiredis counts: the string it returns.
        (b"+" + b"s" * 101 + b"\r\n", "Protocol error: expected '$', got '+'", 100, True),
        (
            b"=105\r\ntxt:" + b"v" * 101 + b"\r\n",
            "Protocol error: expected '$', got '='",
            100,
            True,
        ),
        (
            b"+" + b"s" * 16385 + b"\r\n",
            "Protocol error: unauthenticated bulk length",
            1 << 20,
            False,
        ),
    ],
)
def test_a_bad_line_or_verbatim_element_gets_the_same_error_however_split(
    make: Factory, element: bytes, message: str, max_bulk_bytes: int, authenticated: bool
) -> None:
    stream = ECHO + element + PING

    def fresh() -> RequestParser:
        return make(max_bulk_bytes, authenticated=authenticated)

    assert outcome(fresh(), [stream]) == ([], message)
    for cut in range(1, len(stream), max(1, len(stream) // 40)):
        assert outcome(fresh(), [stream[:cut], stream[cut:]]) == ([], message), cut


# Pieces of valid and invalid streams, with limits made small (a bulk of 40 bytes, an
# inline line of 48) so that every limit is crossed by a few pieces.
SMALL_BULK = 40
SMALL_INLINE = 48
stream_pieces = st.sampled_from(
    [
        b"*1\r\n",
        b"*2\r\n",
        b"*11\r\n",
        b"*2000\r\n",
        b"*0\r\n",
        b"*-1\r\n",
        b"*x\r\n",
        b"$1\r\na\r\n",
        b"$4\r\nECHO\r\n",
        b"$40\r\n" + b"b" * 40 + b"\r\n",
        b"$41\r\n",
        b"$-1\r\n",
        b"+ab\r\n",
        b"+" + b"s" * 39 + b"\r\n",
        b"+" + b"s" * 41 + b"\r\n",
        b"(12\r\n",
        b"(1a\r\n",
        b"=5\r\ntxt:v\r\n",
        b"=44\r\ntxt:" + b"v" * 40 + b"\r\n",
        b"=45\r\n",
        b"=3\r\nabc\r\n",
        b"%1\r\n",
        b"~1\r\n",
        b"#t\r\n",
        b",1.5\r\n",
        b":1\r\n",
        b"_\r\n",
        b"PING\r\n",
        b"ECHO 'a b'\n",
        b'ECHO "x\r\n',
        b"i" * 47 + b"\r\n",
        b"i" * 49 + b"\n",
        b"\r\n",
        b"\r",
        b"\n",
        b" ",
    ]
) | st.binary(max_size=6)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stream=st.lists(stream_pieces, max_size=14).map(b"".join),
    cuts=st.lists(st.integers(0, 1000), max_size=6),
    authenticated=st.booleans(),
)
def test_the_outcome_never_depends_on_where_reads_split_the_stream(
    stream: bytes, cuts: list[int], authenticated: bool
) -> None:
    # The same requests and the same error (or none), from both parsers, whatever the reads.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(resp, "MAX_INLINE_BYTES", SMALL_INLINE)

        def fresh(factory: Factory) -> RequestParser:
            return factory(SMALL_BULK, authenticated=authenticated)

        whole = outcome(fresh(RequestParser), [stream])
        for factory in PARSERS:
            assert outcome(fresh(factory), split_at(stream, cuts)) == whole
        byte_by_byte = [stream[i : i + 1] for i in range(len(stream))]
        assert outcome(fresh(_walker_only), byte_by_byte) == whole


def test_an_inline_line_over_the_limit_is_refused_even_when_it_came_whole(make: Factory) -> None:
    # Redis refuses it as its query buffer passes 64 KiB without a newline; a read that
    # brought the newline along must not change that.
    stream = b"ECHO " + b"x" * MAX_INLINE_BYTES + b"\r\n"
    message = "Protocol error: too big inline request"
    assert outcome(make(), [stream]) == ([], message)
    assert outcome(make(), [stream[:1000], stream[1000:]]) == ([], message)
    at_limit = b"ECHO " + b"x" * (MAX_INLINE_BYTES - 6) + b"\r\n"
    assert outcome(make(), [at_limit]) == ([[b"ECHO", b"x" * (MAX_INLINE_BYTES - 6)]], None)


# -- bad headers: Redis' error, before anything is buffered ----------------------------------

INVALID_MULTIBULK = "Protocol error: invalid multibulk length"
INVALID_BULK = "Protocol error: invalid bulk length"


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        (b"*2147483647\r\n", INVALID_MULTIBULK),
        (b"*1073741824\r\n", INVALID_MULTIBULK),
        (b"*268435456\r\n", INVALID_MULTIBULK),
        (b"*4294967295\r\n", INVALID_MULTIBULK),
        (b"*4294967296\r\n", INVALID_MULTIBULK),
        (b"*18446744073709551616\r\n", INVALID_MULTIBULK),
        (b"*1048577\r\n", INVALID_MULTIBULK),
        (b"*abc\r\n", INVALID_MULTIBULK),
        (b"*+1\r\n", INVALID_MULTIBULK),
        (b"*01\r\n", INVALID_MULTIBULK),
        (b"* 1\r\n", INVALID_MULTIBULK),
        (b"*1_0\r\n", INVALID_MULTIBULK),
        (b"*\r\n", INVALID_MULTIBULK),
        (b"*" + b"1" * 40, INVALID_MULTIBULK),  # no CRLF within any valid header's length
        (b"*1\r\n$-1\r\n", INVALID_BULK),
        (b"*1\r\n$abc\r\n", INVALID_BULK),
        (b"*1\r\n$+4\r\nPING\r\n", INVALID_BULK),
        (b"*1\r\n$04\r\nPING\r\n", INVALID_BULK),
        (b"*1\r\n$536870913\r\n", INVALID_BULK),  # over the default 512 MiB
        (b"*1\r\n$99999999999999999999\r\n", INVALID_BULK),
        (b"*1\r\n$" + b"9" * 40, INVALID_BULK),
        (b"*1\r\n:1\r\n", "Protocol error: expected '$', got ':'"),
        (b"*1\r\n*1\r\n$1\r\na\r\n", "Protocol error: expected '$', got '*'"),
        (b"*1\r\n*99999\r\n", "Protocol error: expected '$', got '*'"),
        (b"*1\r\n~2147483647\r\n", "Protocol error: expected '$', got '~'"),
        (b"*1\r\n-ERR x\r\n", "Protocol error: expected '$', got '-'"),
        (b"*1\r\n_\r\n", "Protocol error: expected '$', got '_'"),
        (b"*2\r\n$1\r\na\r\nPING\r\n", "Protocol error: expected '$', got 'P'"),
        (b'ECHO "unbalanced\r\n', "Protocol error: unbalanced quotes in request"),
        (b"x" * (MAX_INLINE_BYTES + 1), "Protocol error: too big inline request"),
    ],
)
def test_bad_header_is_refused_with_redis_error(make: Factory, stream: bytes, message: str) -> None:
    assert error_of(make(), [stream]) == message
    # Byte by byte: the same error, as early as Redis gives it.
    assert error_of(make(), [stream[i : i + 1] for i in range(len(stream))]) == message


def test_requests_before_a_bad_header_are_yielded(make: Factory) -> None:
    parser = make()
    seen: list[list[bytes]] = []
    with pytest.raises(ProtocolError, match="invalid multibulk length"):
        for request in parser.feed(encode(b"PING") + b"PING\r\n" + b"*2147483647\r\n"):
            seen.append(request)
    assert seen == [[b"PING"], [b"PING"]]


@pytest.mark.parametrize("limit", [1024, 1024 * 1024])
def test_every_bulk_header_is_checked_against_proto_max_bulk_len(make: Factory, limit: int) -> None:
    # Issue 9, defect 5: only the first 64 KiB of a request were checked, so a 5 MB bulk
    # behind a 70 KB one passed a 1 MB limit.
    first = b"a" * (limit - 1 if limit < 70_000 else 70_000)
    head = b"*3\r\n$6\r\nADDJOB\r\n$%d\r\n%s\r\n$5000000\r\n" % (len(first), first)
    stream = head + b"x" * 10_000
    for cut in (1, 3, len(head) - 5, len(head) - 1, len(head), 65536, 65537):
        parser = make(limit)
        assert error_of(parser, [stream[:cut], stream[cut:]]) == INVALID_BULK
    # Many requests per read: the bad header is the tenth request's.
    ok = encode(b"ECHO", b"b" * (limit // 2))
    parser = make(limit)
    seen: list[list[bytes]] = []
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        for request in parser.feed(ok * 9 + encode(b"ECHO", b"c" * (limit + 1)) + ok):
            seen.append(request)
    assert len(seen) == 9
    # Exactly at the limit is fine, complete in one read or not.
    at_limit = encode(b"ECHO", b"d" * limit)
    assert list(make(limit).feed(at_limit)) == [[b"ECHO", b"d" * limit]]
    assert feed_all(make(limit), [at_limit[:100], at_limit[100:]]) == [[b"ECHO", b"d" * limit]]


def test_max_bulk_bytes_can_change(make: Factory) -> None:
    parser = make(1024)
    assert list(parser.feed(encode(b"ECHO", b"x" * 1024))) == [[b"ECHO", b"x" * 1024]]
    parser.max_bulk_bytes = 2048
    assert list(parser.feed(encode(b"ECHO", b"x" * 2048))) == [[b"ECHO", b"x" * 2048]]


# -- before AUTH: Redis 7's limits for strangers ---------------------------------------------


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        (b"*11\r\n", "Protocol error: unauthenticated multibulk length"),
        (b"*2147483647\r\n", INVALID_MULTIBULK),
        (b"*1\r\n$16385\r\n", "Protocol error: unauthenticated bulk length"),
        (b"*1\r\n$536870913\r\n", INVALID_BULK),
    ],
)
def test_unauthenticated_limits(make: Factory, stream: bytes, message: str) -> None:
    assert error_of(make(authenticated=False), [stream]) == message
    parser = make(authenticated=False)
    assert error_of(parser, [stream[i : i + 1] for i in range(len(stream))]) == message


def test_unauthenticated_within_limits(make: Factory) -> None:
    request = [b"AUTH", *(b"x" * 16384 for _ in range(9))]
    assert list(make(authenticated=False).feed(encode(*request))) == [request]


def test_auth_applies_to_the_requests_behind_it_in_the_same_read(make: Factory) -> None:
    # feed() parses lazily: the connection runs AUTH before the next header is read.
    big = [b"ACKJOB", *(b"id%d" % i for i in range(20))]
    parser = make(authenticated=False)
    seen: list[list[bytes]] = []
    for request in parser.feed(b"AUTH secret\r\n" + encode(*big) + encode(b"PING")):
        seen.append(request)
        if request[0] == b"AUTH":
            parser.authenticated = True
    assert seen == [[b"AUTH", b"secret"], big, [b"PING"]]
    # And a failed AUTH: the limits are back for what follows.
    parser = make(authenticated=True)
    with pytest.raises(ProtocolError, match="unauthenticated multibulk length"):
        for request in parser.feed(encode(b"AUTH", b"wrong") + encode(*big)):
            if request[0] == b"AUTH":
                parser.authenticated = False


# -- memory: bounded by the bytes received --------------------------------------------------


def test_buffered_bytes_counts_the_unfinished_request(make: Factory) -> None:
    parser = make()
    assert parser.buffered_bytes() == 0
    stream = encode(b"ADDJOB", b"q", b"y" * 100_000, b"0")
    fed = 0
    for start in range(0, len(stream) - 1, 7000):
        chunk = stream[start : min(start + 7000, len(stream) - 1)]
        assert list(parser.feed(chunk)) == []
        fed += len(chunk)
        # Headers aside (at most 31 bytes of an unterminated one are kept), what was sent.
        assert fed - 64 <= parser.buffered_bytes() <= fed
    assert list(parser.feed(stream[-1:])) == [[b"ADDJOB", b"q", b"y" * 100_000, b"0"]]
    assert parser.buffered_bytes() == 0
    parser.feed(b"PING")  # not a generator step: nothing happens until iterated
    assert list(parser.feed(b"PIN")) == []
    assert parser.buffered_bytes() == 3
    assert list(parser.feed(b"G\r\n")) == [[b"PING"]]
    assert parser.buffered_bytes() == 0


def _peak_bytes(run: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "stream",
    [
        b"*2147483647\r\n",
        b"*4294967295\r\n",
        b"*1048576\r\n$1\r\na\r\n",  # valid, and incomplete: no 8 MB of slots up front
        b"*1024\r\n*1024\r\n*1024\r\n*1024\r\n*1024\r\n*1024\r\n*1024\r\n*1024\r\n",
        b"*1\r\n~2147483647\r\n",
        b"*1\r\n>2147483647\r\n",
        b"*1\r\n$536870912\r\n" + b"x" * 1000,
    ],
)
def test_memory_follows_bytes_received_not_sizes_announced(make: Factory, stream: bytes) -> None:
    def run() -> None:
        parser = make()
        try:
            feed_all(parser, [stream])
        except ProtocolError:
            pass

    assert _peak_bytes(run) < 200_000


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stream=st.lists(
        st.sampled_from(
            [
                b"*",
                b"$",
                b"\r\n",
                b"\r",
                b"\n",
                b"1",
                b"0",
                b"-",
                b"9" * 12,
                b"2147483647",
                b"4294967295",
                b"*1\r\n",
                b"*3\r\n",
                b"$1\r\n",
                b"$5\r\n",
                b"x",
                b"PING",
                b" ",
                b'"',
                b"'",
                b":",
                b"+",
                b"~",
                b"%",
                b">",
                b"|",
                b"_",
                b"=",
                b"#",
                b"\x00",
            ]
        )
        | st.binary(max_size=8),
        max_size=40,
    ).map(b"".join),
    cuts=st.lists(st.integers(0, 500), max_size=5),
)
def test_garbage_yields_requests_or_protocol_error_only(stream: bytes, cuts: list[int]) -> None:
    outcomes = []
    for factory in PARSERS:
        parser = factory()
        seen: list[list[bytes]] = []
        error: str | None = None
        try:
            for chunk in split_at(stream, cuts):
                for request in parser.feed(chunk):
                    assert type(request) is list and request
                    assert all(type(arg) is bytes for arg in request)
                    seen.append(request)
        except ProtocolError as exc:
            error = str(exc)
        assert parser.buffered_bytes() <= len(stream)
        outcomes.append((seen, error is not None))
    # Both parsers frame garbage alike: the same requests, then both stop (or neither).
    assert outcomes[0] == outcomes[1]


def _chunks(stream: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(stream), size):
        yield stream[start : start + size]


def test_pipelined_requests_split_across_reads_stay_on_the_fast_path() -> None:
    # A big pipeline read in 64 KiB pieces: each read's last request is cut, handed to
    # the walker, and hiredis takes the next request boundary back.
    requests = [[b"ADDJOB", b"q", b"job%d" % i * 7, b"0"] for i in range(5000)]
    stream = b"".join(encode(*request) for request in requests)
    for factory in PARSERS:
        parser = factory()
        assert feed_all(parser, list(_chunks(stream, 65536))) == requests


# -- feed_one: a read of exactly one request, without the generator ---------------------------


def feed_one_first(parser: RequestParser, chunks: list[bytes]) -> list[list[bytes]]:
    """As a connection reads: feed_one, and feed when it declines."""
    requests: list[list[bytes]] = []
    for chunk in chunks:
        one = parser.feed_one(chunk)
        if one is not None:
            requests.append(one)
        else:
            requests.extend(parser.feed(chunk))
    return requests


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=requests_and_stream(), cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_feed_one_then_feed_gives_the_same_requests(
    case: tuple[list[list[bytes]], bytes], cuts: list[int]
) -> None:
    expected, stream = case
    for factory in PARSERS:
        parser = factory()
        assert feed_one_first(parser, split_at(stream, cuts)) == expected
        assert parser.buffered_bytes() == 0


def test_feed_one_takes_reads_of_one_request_and_declines_the_rest() -> None:
    parser = RequestParser()
    # Sizes around hiredis' buffer compaction (at 1 KiB consumed) and across it.
    requests = [[b"ADDJOB", b"q", b"x" * (i * 37 % 3000), b"0"] for i in range(3000)]
    assert [parser.feed_one(encode(*request)) for request in requests] == requests
    one = encode(b"PING")
    assert parser.feed_one(one + one) is None  # two requests
    assert list(parser.feed(one + one)) == [[b"PING"], [b"PING"]]
    assert parser.feed_one(one[:5]) is None  # a part of one
    assert list(parser.feed(one[:5])) == [] and parser.buffered_bytes() > 0
    assert parser.feed_one(one[5:]) is None  # the parser is mid-request: feed() finishes it
    assert list(parser.feed(one[5:])) == [[b"PING"]]
    for declined in (b"PING\r\n", b"*0\r\n"):  # inline, no request
        assert parser.feed_one(declined) is None
        list(parser.feed(declined))
    assert parser.feed_one(one) == [b"PING"]
    for refused in (b"*1\r\n*1\r\n$1\r\na\r\n", b"*1\r\n:1\r\n"):  # feed's errors
        fresh = RequestParser()
        assert fresh.feed_one(refused) is None
        with pytest.raises(ProtocolError):
            list(fresh.feed(refused))
    assert RequestParser(authenticated=False).feed_one(one) is None  # strangers' limits
    small = RequestParser(max_bulk_bytes=10)
    assert small.feed_one(encode(b"ECHO", b"x" * 11)) is None
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        list(small.feed(encode(b"ECHO", b"x" * 11)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stream=st.lists(
        st.sampled_from([b"*", b"$", b"\r\n", b"1", b"2", b"0", b"-", b"*1\r\n", b"$1\r\n", b"x"])
        | st.binary(max_size=8),
        max_size=30,
    ).map(b"".join),
    cuts=st.lists(st.integers(0, 300), max_size=5),
)
def test_feed_one_frames_garbage_as_feed_does(stream: bytes, cuts: list[int]) -> None:
    outcomes = []
    for read in (feed_all, feed_one_first):
        parser = RequestParser()
        try:
            outcomes.append((read(parser, split_at(stream, cuts)), None))
        except ProtocolError as exc:
            outcomes.append(([], str(exc)))
    assert outcomes[0] == outcomes[1]
