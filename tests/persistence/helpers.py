"""Helpers shared by the AOF tests."""

from __future__ import annotations

import redis


def held_ids(client: redis.Redis) -> set[bytes]:
    """Every job ID the node holds (JSCAN to the end, bounded)."""
    cursor, found = 0, set()
    for _ in range(100_000):
        cursor, ids = client.execute_command("JSCAN", cursor, "COUNT", 5000)
        found.update(ids)
        if int(cursor) == 0:
            break
    return found
