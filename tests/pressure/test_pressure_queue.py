"""Semantics of the blocking `PressureQueue` against a real Redis."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
from pressure_helpers import QueueFactory, keyspace, spec_keys, wait_until

from conveyor.pressure import (
    PressureQueue,
    QueueAlreadyExists,
    QueueClosed,
    QueueDoesNotExist,
    QueueEmpty,
    QueueFull,
    QueueInUse,
)

STILL_BLOCKED = 0.3  # how long something must stay blocked to count as blocked
DONE = 5.0  # generous bound for something that must finish


class Background:
    """Run `func` in a thread; remember its result or exception."""

    def __init__(self, func: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._func = func
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self._func()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    def finished(self, timeout: float = DONE) -> bool:
        return self.done.wait(timeout)


def test_create_twice_raises(make_queue: QueueFactory) -> None:
    q = make_queue()
    assert not q.exists()
    q.create(bound=5)
    assert q.exists()
    with pytest.raises(QueueAlreadyExists):
        q.create()
    with pytest.raises(QueueAlreadyExists):
        make_queue().create(bound=1)
    assert q.stats().bound == 5


@pytest.mark.parametrize(
    "operation",
    [
        lambda q: q.length(),
        lambda q: q.len(),
        lambda q: q.closed(),
        lambda q: q.put("x"),
        lambda q: q.put_nowait("x"),
        lambda q: q.put("x", timeout=0.1),
        lambda q: q.get(),
        lambda q: q.get_nowait(),
        lambda q: q.get(timeout=0.1),
        lambda q: q.close(),
        lambda q: q.delete(),
        lambda q: q.delete(force=True),
        lambda q: q.stats(),
        lambda q: q.unlock(),
        lambda q: list(q),
    ],
)
def test_operations_on_missing_queue_raise(
    make_queue: QueueFactory, raw: redis.Redis, prefix: str, operation: Callable[[Any], Any]
) -> None:
    q = make_queue("missing")
    with pytest.raises(QueueDoesNotExist):
        operation(q)
    assert q.exists() is False
    assert raw.keys(f"{prefix}:*") == []


def test_fifo_order_and_types(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.create()
    items: list[bytes | str] = ["text", b"\x00\xffbinary", "é", b"", bytearray(b"ba")]
    for item in items:
        q.put(item)
    assert q.length() == 5
    got = [q.get() for _ in items]
    assert got == [b"text", b"\x00\xffbinary", "é".encode(), b"", b"ba"]
    assert all(type(item) is bytes for item in got)
    with pytest.raises(TypeError):
        q.put(42)  # type: ignore[arg-type]


def test_bound_blocks_third_put_until_get(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.create(bound=2)
    q.put("1")
    q.put("2")
    third = Background(lambda: q.put("3"))
    assert not third.finished(STILL_BLOCKED), "third put must wait for room"
    assert q.length() == 2
    assert q.get() == b"1"
    assert third.finished(), "third put must complete once a get frees room"
    assert third.error is None
    assert [q.get(), q.get()] == [b"2", b"3"]


def test_put_nowait_full_and_get_nowait_empty(make_queue: QueueFactory, raw: redis.Redis) -> None:
    q = make_queue()
    q.create(bound=1)
    with pytest.raises(QueueEmpty):
        q.get_nowait()
    q.put_nowait("a")
    with pytest.raises(QueueFull):
        q.put_nowait("b")
    with pytest.raises(QueueFull):
        q.put("b", timeout=0.2)
    assert q.get_nowait() == b"a"
    with pytest.raises(QueueEmpty):
        q.get(timeout=0.2)
    q.put_nowait("c")
    assert q.get_nowait() == b"c"
    # Every failure above handed both role tokens back.
    assert raw.llen(f"{q.keys.producer_free}") == 1
    assert raw.llen(f"{q.keys.consumer_free}") == 1


def test_second_producer_blocks_while_first_holds_role(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_queue()
    q.create(bound=1)
    q.put("a")
    first_q = make_queue(client_uid="producer-1")
    second_q = make_queue(client_uid="producer-2")
    first = Background(lambda: first_q.put("b"))  # waits for room, holding the role
    wait_until(lambda: raw.get(q.keys.producer) == b"producer-1")
    assert raw.llen(q.keys.producer_free) == 0
    with pytest.raises(QueueInUse):
        q.put_nowait("x")
    with pytest.raises(QueueInUse):
        q.put("x", timeout=0.2)
    second = Background(lambda: second_q.put("c"))
    assert not second.finished(STILL_BLOCKED)
    assert q.get() == b"a"
    assert first.finished() and first.error is None
    # The second producer now has the role but the queue is full again.
    wait_until(lambda: raw.get(q.keys.producer) == b"producer-2")
    assert not second.finished(STILL_BLOCKED)
    assert q.get() == b"b"
    assert second.finished() and second.error is None
    assert q.get() == b"c"


def test_second_consumer_blocks_while_first_holds_role(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_queue()
    q.create()
    first = Background(make_queue(client_uid="consumer-1").get)
    wait_until(lambda: raw.get(q.keys.consumer) == b"consumer-1")
    with pytest.raises(QueueInUse):
        q.get_nowait()
    second = Background(make_queue(client_uid="consumer-2").get)
    assert not second.finished(STILL_BLOCKED)
    q.put("one")
    assert first.finished() and first.result == b"one"
    assert not second.finished(STILL_BLOCKED)
    q.put("two")
    assert second.finished() and second.result == b"two"


def test_close_drains_then_raises(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.create(bound=3)
    for item in ("a", "b", "c"):
        q.put(item)
    assert q.closed() is False
    q.close()
    assert q.closed() is True
    with pytest.raises(QueueClosed):
        q.put("d")
    with pytest.raises(QueueClosed):
        q.put_nowait("d")
    with pytest.raises(QueueClosed):
        q.close()
    assert q.get() == b"a"
    assert list(q) == [b"b", b"c"]
    with pytest.raises(QueueClosed):
        q.get()
    with pytest.raises(QueueClosed):
        q.get_nowait()
    assert list(q) == []


def test_close_wakes_blocked_consumer(make_queue: QueueFactory, raw: redis.Redis) -> None:
    q = make_queue()
    q.create()
    consumer = Background(make_queue().get)
    assert not consumer.finished(STILL_BLOCKED)
    q.close()
    assert consumer.finished()
    assert isinstance(consumer.error, QueueClosed)
    assert raw.llen(q.keys.closed) == 2, "the close marker popped by BRPOP is put back"
    assert raw.llen(q.keys.consumer_free) == 1


def test_iteration_ends_when_closed_and_drained(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.create(bound=2)
    producer_q = make_queue()

    def produce() -> None:
        for i in range(20):
            producer_q.put(f"m{i}")
        producer_q.close()

    producer = Background(produce)
    assert list(q) == [f"m{i}".encode() for i in range(20)]
    assert producer.finished() and producer.error is None


def test_delete_releases_blocked_consumer(make_queue: QueueFactory, raw: redis.Redis) -> None:
    q = make_queue()
    q.create()
    consumer = Background(make_queue(client_uid="waiting-consumer").get)
    wait_until(lambda: raw.get(q.keys.consumer) == b"waiting-consumer")
    waiting_for_role = Background(make_queue().get)
    assert not consumer.finished(STILL_BLOCKED)
    q.delete()
    assert consumer.finished()
    assert isinstance(consumer.error, QueueDoesNotExist)
    assert waiting_for_role.finished()
    assert isinstance(waiting_for_role.error, QueueDoesNotExist)
    assert raw.keys("*") == []


def test_delete_releases_blocked_producer_without_pushing(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_queue()
    q.create(bound=1)
    q.put("a")
    producer = Background(lambda: make_queue().put("b"))
    assert not producer.finished(STILL_BLOCKED)
    q.delete()
    assert producer.finished()
    assert isinstance(producer.error, QueueDoesNotExist)
    assert raw.keys("*") == []
    q.create(bound=1)
    assert q.length() == 0


def test_stats_count_messages_and_bytes(make_queue: QueueFactory) -> None:
    q = make_queue(client_uid="me")
    q.create(bound=10)
    for item in ("abc", b"\x00\xff", "é"):
        q.put(item)
    q.get()
    q.get()
    stats = q.stats()
    assert stats.as_dict() == {
        "name": "q",
        "bound": 10,
        "length": 1,
        "closed": False,
        "producer": "me",
        "consumer": "me",
        "producer_busy": False,
        "consumer_busy": False,
        "produced_messages": 3,
        "produced_bytes": 7,
        "consumed_messages": 2,
        "consumed_bytes": 5,
    }
    q.close()
    assert q.stats().closed is True


def test_default_uid_names_host_pid_thread(make_queue: QueueFactory, raw: redis.Redis) -> None:
    import os
    import socket

    q = make_queue()
    q.create()
    q.put("x")
    uid = raw.get(q.keys.producer).decode()  # type: ignore[union-attr]
    assert uid == f"{socket.gethostname()}:{os.getpid()}:{threading.get_native_id()}"
    other = Background(lambda: q.put("y"))
    assert other.finished() and other.error is None
    assert raw.get(q.keys.producer).decode() != uid  # type: ignore[union-attr]


def test_queue_names_with_colons_and_spaces(make_queue: QueueFactory, raw: redis.Redis) -> None:
    q = make_queue("jobs:high priority")
    q.create()
    q.put("x")
    assert set(keyspace(raw, q.prefix, q.name)) >= {"", "bound"}
    assert raw.llen(spec_keys(q.prefix, q.name)[""]) == 1


def test_invalid_arguments(make_queue: QueueFactory) -> None:
    with pytest.raises(ValueError):
        make_queue("")
    q = make_queue()
    with pytest.raises(ValueError):
        q.create(bound=-1)
    q.create()
    with pytest.raises(ValueError):
        q.get(timeout=-1)


def test_timeout_that_is_no_number_of_seconds_is_refused(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_queue()
    q.create()
    q.put("a")
    # NaN compares false with everything: it used to pass as "not negative" and then wait
    # forever once the call had to wait at all.
    for timeout in (float("nan"), "1"):
        with pytest.raises(ValueError, match="timeout must be"):
            q.get(timeout=timeout)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="timeout must be"):
            q.put("b", timeout=timeout)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="timeout must be"):
            q.close(timeout=timeout)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="timeout must be"):
            q.delete(timeout=timeout)  # type: ignore[arg-type]
    assert raw.lrange(q.keys.queue, 0, -1) == [b"a"]
    assert q.get(timeout=float("inf")) == b"a"


def test_many_items_through_two_threads(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.create(bound=5)
    count = 300
    producer_q = make_queue()

    def produce() -> None:
        for i in range(count):
            producer_q.put(str(i))
        producer_q.close()

    producer = Background(produce)
    received = [int(item) for item in q]
    assert producer.finished(30) and producer.error is None
    assert received == list(range(count))
    stats = q.stats()
    assert stats.produced_messages == stats.consumed_messages == count


def test_constructor_reads_environment(
    monkeypatch: pytest.MonkeyPatch, redis_server: Any, raw: redis.Redis
) -> None:
    monkeypatch.setenv("REDIS_SERVER", "127.0.0.1")
    monkeypatch.setenv("REDIS_PORT", str(redis_server.port))
    monkeypatch.setenv("REDIS_DB", "3")
    monkeypatch.setenv("PRESSURE_PREFIX", "envprefix")
    with PressureQueue("env") as q:
        assert q.redis_url == f"redis://127.0.0.1:{redis_server.port}/3"
        q.create()
        q.put("x")
    db3 = redis_server.client(db=3)
    try:
        assert db3.llen("envprefix:env") == 1
        assert db3.get("envprefix:env:bound") == b"0"
        db3.flushdb()
    finally:
        db3.close()
    assert raw.keys("*") == []
    # An explicit URL and prefix beat the environment.
    with PressureQueue("env", redis_url=redis_server.url, prefix="explicit") as q:
        assert q.keys.bound == "explicit:env:bound"
        assert q.redis_url == redis_server.url
