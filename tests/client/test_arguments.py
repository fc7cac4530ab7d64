"""Bad arguments are refused by both clients alike, before anything reaches the node."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis

from conveyor.client import AsyncClient, Client
from tests.servers import NodeProcess

JOB_ID = "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"

# (what is wrong, the call, the exception, words of its message)
BAD_CALLS: list[tuple[str, Callable[[Any], Any], type[Exception], str]] = [
    ("int body", lambda c: c.add_job("q", 5), TypeError, "job body must be bytes"),
    ("list body", lambda c: c.add_job("q", [1, 2]), TypeError, "not list"),
    ("None body", lambda c: c.add_job("q", None), TypeError, "not NoneType"),
    ("float retry", lambda c: c.add_job("q", b"x", retry=0.5), TypeError, "retry must be an int"),
    ("float delay", lambda c: c.add_job("q", b"x", delay=1.5), TypeError, "delay must be an int"),
    ("str ttl", lambda c: c.add_job("q", b"x", ttl="10"), TypeError, "ttl must be an int, not str"),
    ("bool replicate", lambda c: c.add_job("q", b"x", replicate=True), TypeError, "not bool"),
    ("float wait", lambda c: c.add_job("q", b"x", timeout_ms=1.5), TypeError, "timeout_ms"),
    ("negative wait", lambda c: c.add_job("q", b"x", timeout_ms=-1), ValueError, "timeout_ms"),
    ("None queue", lambda c: c.add_job(None, b"x"), TypeError, "queue name must be str or bytes"),
    ("batch None queue", lambda c: c.add_jobs(None, [b"x"]), TypeError, "queue name must be"),
    ("batch int body", lambda c: c.add_jobs("q", [b"x", 5]), TypeError, "job body must be"),
    ("batch float retry", lambda c: c.add_jobs("q", [b"x"], retry=0.5), TypeError, "retry"),
    ("float get wait", lambda c: c.get_jobs("q", timeout_ms=0.5), TypeError, "timeout_ms"),
    ("float count", lambda c: c.get_jobs("q", count=2.5, nohang=True), TypeError, "count"),
    ("None in queues", lambda c: c.get_jobs(["q", None], nohang=True), TypeError, "queue name"),
    ("float nack delay", lambda c: c.nack(JOB_ID, delay=0.5), TypeError, "delay must be an int"),
    ("float peek", lambda c: c.qpeek("q", 1.5), TypeError, "count must be an int"),
    ("int pause option", lambda c: c.pause("q", 5), ValueError, "unknown PAUSE option 5"),
    # An unset setting: a job no worker asks for, a GETJOB waiting forever.
    ("empty queue", lambda c: c.add_job("", b"x"), ValueError, "queue name must not be empty"),
    ("batch empty queue", lambda c: c.add_jobs(b"", [b"x"]), ValueError, "must not be empty"),
    ("get empty queue", lambda c: c.get_jobs(["q", ""]), ValueError, "must not be empty"),
    # str() of these went out as the ID, for a BADID from the node.
    (
        "ack a list",
        lambda c: c.ack([JOB_ID]),
        TypeError,
        r"not list \(several jobs .*ack\(\*jobs\)",
    ),
    ("ack None", lambda c: c.ack(None), TypeError, "job ID .* or a Job, not NoneType"),
    ("working int", lambda c: c.working(5), TypeError, "a job must be a job ID"),
    ("show a list", lambda c: c.show([JOB_ID]), TypeError, "not list"),
    ("fast_ack int", lambda c: c.fast_ack(JOB_ID, 5), TypeError, "not int"),
    # A dict's keys went as the bodies.
    (
        "batch dict",
        lambda c: c.add_jobs("q", {b"a": b"b"}),
        TypeError,
        "sequence of bodies, not dict",
    ),
    ("batch set", lambda c: c.add_jobs("q", {b"a"}), TypeError, "sequence of bodies, not set"),
    ("batch None", lambda c: c.add_jobs("q", None), TypeError, "sequence of bodies, not NoneType"),
    # redis-py refused these with a different message in each twin, or IndexError.
    ("raw None", lambda c: c.execute_command("ECHO", None), TypeError, "not NoneType"),
    ("raw bool", lambda c: c.execute_command("ECHO", True), TypeError, "str, bytes, int or float"),
    ("raw nothing", lambda c: c.execute_command(), ValueError, "needs a command name"),
    ("info list", lambda c: c.info(["server"]), TypeError, "INFO section must be a str, not list"),
    ("info int", lambda c: c.info(5), TypeError, "not int"),
]

# Scans are (async) generators: what they are given is checked on the first step.
BAD_SCANS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    (
        "state int",
        {"states": ["queued", 5]},
        TypeError,
        "a job state must be str or bytes, not int",
    ),
    ("states None", {"states": None}, TypeError, "a state name or several, not NoneType"),
]


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [case[1:] for case in BAD_SCANS],
    ids=[case[0] for case in BAD_SCANS],
)
def test_bad_scan_arguments_are_refused_before_sending(
    node: NodeProcess, options: dict[str, Any], error: type[Exception], words: str
) -> None:
    with Client([f"127.0.0.1:{node.port}"], socket_timeout=5) as client:
        with pytest.raises(error, match=words):
            next(client.scan_jobs(**options))
        assert list(client.scan_jobs(states=["QUEUED", b"active"])) == []

    async def the_async_twin() -> None:
        async with AsyncClient([f"127.0.0.1:{node.port}"], socket_timeout=5) as client:
            with pytest.raises(error, match=words):
                await anext(client.scan_jobs(**options))

    asyncio.run(the_async_twin())


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [case[1:] for case in BAD_CALLS],
    ids=[case[0] for case in BAD_CALLS],
)
def test_bad_arguments_are_refused_before_sending(
    node: NodeProcess,
    raw: redis.Redis,
    call: Callable[[Any], Any],
    error: type[Exception],
    words: str,
) -> None:
    raw.execute_command("ADDJOB", "q", "waiting", 0)  # a GETJOB sent by mistake would take it
    with (
        Client([f"127.0.0.1:{node.port}"], socket_timeout=5) as client,
        pytest.raises(error, match=words),
    ):
        call(client)

    async def the_async_twin() -> None:
        async with AsyncClient([f"127.0.0.1:{node.port}"], socket_timeout=5) as client:
            with pytest.raises(error, match=words):
                await call(client)

    asyncio.run(the_async_twin())
    assert raw.execute_command("QLEN", "q") == 1
    assert raw.execute_command("QPEEK", "q", 2)[0][2] == b"waiting"


def test_a_wait_longer_than_a_socket_can_wait_is_waiting_as_long_as_it_takes(
    node: NodeProcess, raw: redis.Redis
) -> None:
    # 10**13 ms is more than a socket timeout can hold; the node takes it.
    years = 10**13
    with Client([f"127.0.0.1:{node.port}"], socket_timeout=5) as client:
        job_id = client.add_job("q", b"x", timeout_ms=years)
        [job] = client.get_jobs("q", timeout_ms=years)
    assert job.id == job_id

    async def the_async_twin() -> str:
        async with AsyncClient([f"127.0.0.1:{node.port}"], socket_timeout=5) as client:
            added = await client.add_job("q", b"y", timeout_ms=years)
            [job] = await client.get_jobs("q", timeout_ms=years)
            assert job.id == added
            return added

    asyncio.run(the_async_twin())
    assert raw.execute_command("QLEN", "q") == 0


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"socket_timeout": 0}, ValueError, "socket_timeout must be a number of seconds > 0"),
        ({"socket_timeout": -1}, ValueError, "not -1"),
        ({"socket_timeout": float("nan")}, ValueError, "not nan"),
        ({"socket_timeout": float("inf")}, ValueError, "None: no timeout"),
        ({"socket_timeout": "5"}, TypeError, "not str"),
        ({"socket_connect_timeout": -0.5}, ValueError, "socket_connect_timeout"),
    ],
    ids=["zero", "negative", "nan", "inf", "str", "negative connect"],
)
def test_bad_socket_timeouts_are_refused_by_the_constructor(
    node: NodeProcess, options: dict[str, Any], error: type[Exception], words: str
) -> None:
    # Each used to fail on the first command, a different error in each twin.
    for cls in (Client, AsyncClient):
        with pytest.raises(error, match=words):
            cls([f"127.0.0.1:{node.port}"], **options)


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        (
            {"nodes": ("127.0.0.1", 7711)},
            TypeError,
            r"a list of addresses: \[\('127.0.0.1', 7711\)\]",
        ),
        ({"nodes": b"127.0.0.1:7711"}, TypeError, "not bytes"),
        ({"nodes": 7711}, TypeError, "not int"),
        ({"nodes": [None]}, TypeError, "'host:port' or a .host, port. tuple, not NoneType"),
        ({"nodes": [("h", 1, 2)]}, TypeError, "must be .host: str, port: int."),
        ({"nodes": [(7711, "h")]}, TypeError, "must be .host: str, port: int."),
        ({"nodes": [("h", 7711.9)]}, ValueError, "bad port"),
        ({"nodes": [("h", True)]}, ValueError, "bad port"),
        ({"nodes": "h:+12"}, ValueError, "bad port"),
        ({"nodes": "h:1_2"}, ValueError, "bad port"),
        (
            {"max_connections": 0},
            ValueError,
            "max_connections must be >= 1 .None: no limit., not 0",
        ),
        ({"max_connections": -1}, ValueError, "max_connections"),
        ({"max_connections": 1.5}, TypeError, "max_connections must be an int or None, not float"),
        ({"max_connections": "5"}, TypeError, "not str"),
        ({"socket_timout": 5}, TypeError, "unknown client option.s.: socket_timout"),
    ],
    ids=lambda value: repr(value) if isinstance(value, dict) else "",
)
def test_bad_constructor_arguments_are_refused_at_once(
    node: NodeProcess, options: dict[str, Any], error: type[Exception], words: str
) -> None:
    # Each used to be taken (a port cut to an int, 0 as no limit) or to fail as an
    # AttributeError, or on the first command only.
    options = {"nodes": [f"127.0.0.1:{node.port}"], **options}
    for cls in (Client, AsyncClient):
        with pytest.raises(error, match=words):
            cls(**options)


@pytest.mark.parametrize(
    ("url", "error", "words"),
    [
        ("disque://h:1?socket_timeout=abc", ValueError, "socket_timeout in the URL .* not 'abc'"),
        (7711, TypeError, "URL must be a str, not int"),
    ],
)
def test_bad_urls_are_refused_with_what_is_wrong(
    url: Any, error: type[Exception], words: str
) -> None:
    for cls in (Client, AsyncClient):
        with pytest.raises(error, match=words):
            cls.from_url(url)


def test_an_existing_empty_queue_can_still_be_looked_at(client: Client, raw: redis.Redis) -> None:
    # Made elsewhere (conveyor cli ADDJOB "" ...): the console lists it and asks QSTAT.
    raw.execute_command("ADDJOB", "", "x", 0)
    assert client.qlen("") == 1
    assert (client.qstat("") or {})["len"] == 1
    assert [job.body for job in client.qpeek("")] == [b"x"]
