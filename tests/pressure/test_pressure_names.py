"""Queue names and key prefixes: what is refused, and names that are not UTF-8."""

from __future__ import annotations

import pytest
import redis
from pressure_helpers import RedisServer

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
