"""A Redis at its maxmemory (policy noeviction): clear errors, no stranded role, no lost element.

Over maxmemory Redis refuses every MULTI, and commands that may grow memory (LPUSH, SET,
INCR) alone or as a script's first write; single reads, pops and deletes still run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
from pressure_helpers import QueueFactory

from conveyor.pressure import PressureProtocolError, QueueEmpty, QueueFull


@contextmanager
def out_of_memory(raw: redis.Redis) -> Iterator[None]:
    """Every write that may grow memory is refused until the block ends."""
    assert raw.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    raw.config_set("maxmemory", 1)
    try:
        yield
    finally:
        raw.config_set("maxmemory", 0)


def test_failures_under_maxmemory_give_the_roles_back(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_queue()
    q.create(bound=1)
    with out_of_memory(raw):
        with pytest.raises(QueueEmpty):
            q.get(timeout=0.05)
        assert raw.llen(q.keys.consumer_free) == 1
        with pytest.raises(PressureProtocolError, match="maxmemory"):
            q.close()
        assert raw.llen(q.keys.producer_free) == 1
    q.put("a")
    with out_of_memory(raw):
        with pytest.raises(QueueFull):
            q.put("b", timeout=0.05)
        assert raw.llen(q.keys.producer_free) == 1
        assert not raw.exists(q.keys.not_full), "still full: no room was invented"
    # Memory is back: the roles are free for anyone, and nothing was lost.
    other = make_queue()
    assert other.get_nowait() == b"a"
    other.put_nowait("c")
    other.close()
    assert q.get_nowait() == b"c"


def test_delete_under_maxmemory_completes(make_queue: QueueFactory, raw: redis.Redis) -> None:
    q = make_queue()
    q.create(bound=2)
    q.put("a")
    with out_of_memory(raw):
        q.delete(timeout=2)  # deleting is how memory gets freed
    assert raw.keys(f"{q.prefix}:*") == []
