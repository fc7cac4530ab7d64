"""Queue names and key prefixes: what is refused, and names that are not UTF-8."""

from __future__ import annotations

import asyncio

import pytest
import redis
from click.testing import CliRunner, Result
from pressure_helpers import QueueFactory, RedisServer, keyspace

from conveyor.cli import main
from conveyor.pressure import AsyncPressureQueue, PressureQueue, list_queues


@pytest.mark.parametrize("prefix", [b"pp", bytearray(b"pp"), 7])
def test_a_prefix_that_is_not_a_string_is_refused(
    redis_server: RedisServer, raw: redis.Redis, prefix: object
) -> None:
    for make in (PressureQueue, AsyncPressureQueue):
        with pytest.raises(ValueError, match="prefix must be a string, not"):
            make("q", redis_url=redis_server.url, prefix=prefix)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefix must be a string"):
        list_queues(redis_url=redis_server.url, prefix=prefix)  # type: ignore[arg-type]
    assert raw.keys("*") == []


# How Python hands over argv bytes that are not UTF-8 (b"\xff" -> "\udcff").
NAME = b"jobs-\xff\xfe".decode("utf-8", "surrogateescape")


def test_a_name_that_is_not_utf8_keeps_its_bytes_sync_and_async(
    redis_server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    with PressureQueue(NAME, redis_url=redis_server.url, prefix=prefix) as q:
        q.create(bound=2)
        q.put("a")
        assert raw.get(f"{prefix}:".encode() + b"jobs-\xff\xfe:bound") == b"2"
        assert q.stats().length == 1
    assert list_queues(redis_url=redis_server.url, prefix=prefix) == [NAME]

    async def drain() -> bytes:
        async with AsyncPressureQueue(NAME, redis_url=redis_server.url, prefix=prefix) as aq:
            item = await aq.get()
            await aq.close()
            await aq.delete()
            return item

    assert asyncio.run(drain()) == b"a"
    assert raw.keys("*") == []


def test_a_lone_surrogate_that_stands_for_no_byte_is_refused(redis_server: RedisServer) -> None:
    with pytest.raises(ValueError, match="cannot be a Redis key"):
        PressureQueue("a\ud800", redis_url=redis_server.url)
    with pytest.raises(ValueError, match="cannot be a Redis key"):
        AsyncPressureQueue("q", redis_url=redis_server.url, prefix="\ud800")


def test_cli_names_that_are_not_utf8_round_trip(
    redis_server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    def cli(*args: str) -> Result:
        base = ["pressure", "--redis", redis_server.url, "--prefix", prefix]
        return CliRunner().invoke(main, [*base, *args])

    assert cli("create", NAME, "--bound", "3").exit_code == 0
    assert cli("put", NAME, "x").exit_code == 0
    # A queue another client named with bytes that are not UTF-8.
    raw.set(f"{prefix}:".encode() + b"\x80raw:bound", 0)
    assert cli("ls").stdout_bytes == b"jobs-\xff\xfe\n\x80raw\n"  # in the keys' byte order
    assert cli("ls", "-l").stdout_bytes.splitlines() == [
        b"jobs-\xff\xfe\tbound=3\tlength=1\topen",
        b"\x80raw\tbound=0\tlength=0\topen",
    ]
    assert b"name               jobs-\xff\xfe\n" in cli("stat", NAME).stdout_bytes
    got = cli("get", NAME)
    assert got.exit_code == 0 and got.stdout == "x\n"


# -- element and identity text: strict UTF-8 ------------------------------------------------


@pytest.mark.parametrize("element", ["\udcff", "ok \ud800 then"])
def test_a_str_element_with_a_lone_surrogate_is_refused_before_anything_is_sent(
    make_queue: QueueFactory, raw: redis.Redis, prefix: str, element: str
) -> None:
    # Elements are text, stored as strict UTF-8: a surrogate (from surrogateescape, or
    # none at all) gets the package's ValueError naming it, not an encoder's traceback.
    q = make_queue()
    q.create(bound=3)
    before = keyspace(raw, prefix, "q")
    at = element.index(next(ch for ch in element if "\ud800" <= ch <= "\udfff"))
    message = f"a str queue element must be UTF-8 text: .* at index {at} is a lone surrogate"
    with pytest.raises(ValueError, match=message) as caught:
        q.put(element)
    assert type(caught.value) is ValueError  # not the codec's UnicodeEncodeError

    async def put_async() -> None:
        async with AsyncPressureQueue("q", redis_url=q.redis_url, prefix=prefix) as aq:
            with pytest.raises(ValueError, match=message) as caught:
                await aq.put(element)
            assert type(caught.value) is ValueError

    asyncio.run(put_async())
    assert keyspace(raw, prefix, "q") == before
    q.put("ok é")  # and the queue works on
    assert q.get() == "ok é".encode()


def test_a_client_uid_with_a_lone_surrogate_is_refused_before_anything_is_sent(
    redis_server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    message = "client_uid must be UTF-8 text: '\\\\udcff' at index 4 is a lone surrogate"
    for make in (PressureQueue, AsyncPressureQueue):
        with pytest.raises(ValueError, match=message) as caught:
            make("q", redis_url=redis_server.url, prefix=prefix, client_uid="host\udcff")
        assert type(caught.value) is ValueError
    assert raw.keys("*") == []
