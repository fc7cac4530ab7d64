"""CONFIG SET with values that are not text: refused with Disque's error, nothing changed."""

from __future__ import annotations

import pytest
import redis

from tests.node.helpers import error_of


@pytest.mark.parametrize("name", ["requirepass", "deadletter-queue", "event-log"])
def test_config_set_refuses_a_value_that_is_not_utf8(r: redis.Redis, name: str) -> None:
    # These directives keep text: a value that is not UTF-8 used to be stored with
    # U+FFFD in place of its bytes, so the node then asked for a password, or moved jobs
    # to a queue, or wrote a directory, other than the one given.
    before = r.execute_command("CONFIG", "GET", name)
    expected = f"ERR Invalid argument '\\xff\\xfeok' for CONFIG SET '{name}': not UTF-8 text"
    try:
        assert error_of(r, "CONFIG", "SET", name, b"\xff\xfeok") == expected
        assert r.execute_command("CONFIG", "GET", name) == before
    finally:  # this connection stays authenticated: it can always put the value back
        r.execute_command("CONFIG", "SET", name, before[1])


def test_config_set_takes_utf8_text(r: redis.Redis) -> None:
    queue = "lettres mortes é".encode()
    try:
        assert r.execute_command("CONFIG", "SET", "deadletter-queue", queue) == b"OK"
        assert r.execute_command("CONFIG", "GET", "deadletter-queue") == [
            b"deadletter-queue",
            queue,
        ]
    finally:
        r.execute_command("CONFIG", "SET", "deadletter-queue", "")
