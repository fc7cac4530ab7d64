"""After every step the keyspace holds exactly the specification's keys, types and lengths.

Read with raw KEYS/TYPE/LLEN/GET (see `pressure_helpers.keyspace`), never through the library.
"""

from __future__ import annotations

from collections import deque

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pressure_helpers import QueueFactory, keyspace

from conveyor.pressure import QueueClosed, QueueEmpty, QueueFull

UID = "keyspace-client"


def test_keyspace_through_a_queue_lifetime(make_queue: QueueFactory, raw: redis.Redis) -> None:
    q = make_queue("life", client_uid=UID)
    p, n = q.prefix, q.name
    assert keyspace(raw, p, n) == {}

    q.create(bound=2)
    fresh = {
        "bound": ("string", "2"),
        "producer_free": ("list", 1),
        "consumer_free": ("list", 1),
        "not_full": ("list", 1),
    }
    assert keyspace(raw, p, n) == fresh

    q.put("a")
    after_one = {
        **fresh,
        "": ("list", 1),
        "producer": ("string", UID),
        "stats:produced_messages": ("string", "1"),
        "stats:produced_bytes": ("string", "1"),
    }
    assert keyspace(raw, p, n) == after_one

    q.put("bb")  # now full: :not_full is empty, hence absent
    full = {
        **after_one,
        "": ("list", 2),
        "stats:produced_messages": ("string", "2"),
        "stats:produced_bytes": ("string", "3"),
    }
    del full["not_full"]
    assert keyspace(raw, p, n) == full
    assert raw.lrange(q.keys.queue, 0, -1) == [b"bb", b"a"], "LPUSH left, pop right"

    assert q.get() == b"a"
    after_get = {
        **full,
        "": ("list", 1),
        "not_full": ("list", 1),
        "consumer": ("string", UID),
        "stats:consumed_messages": ("string", "1"),
        "stats:consumed_bytes": ("string", "1"),
    }
    assert keyspace(raw, p, n) == after_get

    q.close()
    closed = {**after_get, "closed": ("list", 2)}
    assert keyspace(raw, p, n) == closed

    assert q.get() == b"bb"
    drained = {
        **closed,
        "stats:consumed_messages": ("string", "2"),
        "stats:consumed_bytes": ("string", "3"),
    }
    del drained[""]
    assert keyspace(raw, p, n) == drained

    with pytest.raises(QueueClosed):
        q.get()
    with pytest.raises(QueueClosed):
        q.put("late")
    assert keyspace(raw, p, n) == drained

    q.delete()
    assert keyspace(raw, p, n) == {}
    assert raw.keys("*") == []


def test_unbounded_queue_keeps_one_not_full(make_queue: QueueFactory, raw: redis.Redis) -> None:
    q = make_queue("unbounded", client_uid=UID)
    q.create()
    for i in range(5):
        q.put(str(i))
    state = keyspace(raw, q.prefix, q.name)
    assert state["bound"] == ("string", "0")
    assert state["not_full"] == ("list", 1)
    assert state[""] == ("list", 5)


def test_every_key_name_is_the_specs(make_queue: QueueFactory, raw: redis.Redis) -> None:
    q = make_queue("all", client_uid=UID)
    q.create(bound=1)
    q.put("x")
    q.get()
    q.put("y")
    q.close()
    base = f"{q.prefix}:all"
    assert sorted(k.decode() for k in raw.keys("*")) == sorted(
        [
            base,
            f"{base}:bound",
            f"{base}:producer",
            f"{base}:consumer",
            f"{base}:producer_free",
            f"{base}:consumer_free",
            f"{base}:stats:produced_messages",
            f"{base}:stats:produced_bytes",
            f"{base}:stats:consumed_messages",
            f"{base}:stats:consumed_bytes",
            f"{base}:closed",
        ]
    )  # :not_full is absent because the bound-1 queue is full: that makes all 12 but one


operations = st.lists(st.sampled_from(["put", "get", "close"]), min_size=1, max_size=25)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(bound=st.integers(min_value=0, max_value=3), ops=operations)
def test_non_blocking_operations_match_a_model(
    make_queue: QueueFactory, raw: redis.Redis, bound: int, ops: list[str]
) -> None:
    """Random put/get/close sequences agree with a deque model; invariants hold each step."""
    raw.flushdb()
    q = make_queue("model", client_uid=UID)
    q.create(bound=bound)
    model: deque[bytes] = deque()
    closed = False
    for i, op in enumerate(ops):
        item = f"item{i}".encode()
        if op == "put":
            if closed:
                with pytest.raises(QueueClosed):
                    q.put_nowait(item)
            elif bound and len(model) >= bound:
                with pytest.raises(QueueFull):
                    q.put_nowait(item)
            else:
                q.put_nowait(item)
                model.appendleft(item)
        elif op == "get":
            if model:
                assert q.get_nowait() == model.pop()
            else:
                with pytest.raises(QueueClosed if closed else QueueEmpty):
                    q.get_nowait()
        elif closed:
            with pytest.raises(QueueClosed):
                q.close()
        else:
            q.close()
            closed = True
        state = keyspace(raw, q.prefix, q.name)
        assert raw.lrange(q.keys.queue, 0, -1) == list(model)
        has_room = bound == 0 or len(model) < bound
        assert state.get("not_full") == (("list", 1) if has_room else None)
        assert state["producer_free"] == ("list", 1)
        assert state["consumer_free"] == ("list", 1)
        assert state.get("closed") == (("list", 2) if closed else None)
