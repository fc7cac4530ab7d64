"""Helpers shared by the AOF tests."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis


def held_ids(client: redis.Redis) -> set[bytes]:
    """Every job ID the node holds (JSCAN to the end, bounded), once it has loaded its
    AOF: a node answers PING (so NodeProcess finds it ready) and -LOADING to the rest
    while it loads, and a large file on a busy machine outlasts redis-py's retries."""
    deadline = time.monotonic() + 60
    while True:
        try:
            client.execute_command("PING")
            break
        except redis.BusyLoadingError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    cursor, found = 0, set()
    for _ in range(100_000):
        cursor, ids = client.execute_command("JSCAN", cursor, "COUNT", 5000)
        found.update(ids)
        if int(cursor) == 0:
            break
    return found


def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Whether `predicate` came true within `timeout_s` (polled every 20 ms)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()
