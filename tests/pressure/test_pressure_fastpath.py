"""The Lua fast path does exactly what the command batches it replaced did.

`legacy_protocol.LegacyQueue` runs the pre-script step sequences. The same operations go
through it under one prefix and through `PressureQueue` under another, and the two
keyspaces (every key's type and full contents, token values included) must be identical
after every step, as must the outcomes.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from legacy_protocol import LegacyQueue
from pressure_helpers import RedisServer, spec_keys, wait_until
from pressure_spec_client import SpecClient

from conveyor.pressure import PressureError, PressureQueue, scripts

Dump = dict[str, tuple[str, object]]


def dump(raw: redis.Redis, prefix: str, name: str = "q") -> Dump:
    """Every specified key of the queue: ("string", value) or ("list", all elements)."""
    found: Dump = {}
    for suffix, key in spec_keys(prefix, name).items():
        kind = raw.type(key).decode()
        if kind == "string":
            found[suffix] = ("string", raw.get(key))
        elif kind == "list":
            found[suffix] = ("list", raw.lrange(key, 0, -1))
        else:
            assert kind == "none", f"{key} has type {kind}"
    return found


def outcome(action: Callable[[], Any]) -> object:
    """What an operation did: its result, or the name of the pressure error it raised."""
    try:
        return ("ok", action())
    except PressureError as exc:
        return ("error", type(exc).__name__)


class CountingRedis(redis.Redis):
    """A redis-py client that records each round trip: a command name, or PIPELINE."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.trips: list[str] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.trips.append(str(args[0]))
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Any:
        self.trips.append("PIPELINE")
        return super().pipeline(transaction, shard_hint)


@pytest.fixture
def pair(redis_server: RedisServer, raw: redis.Redis) -> Iterator[tuple[PressureQueue, ...]]:
    """(legacy, fast): the same queue name under two prefixes, one implementation each."""
    token = uuid.uuid4().hex[:8]
    legacy = LegacyQueue("q", redis_url=redis_server.url, prefix=f"L{token}", client_uid="u")
    fast = PressureQueue("q", redis_url=redis_server.url, prefix=f"F{token}", client_uid="u")
    yield legacy, fast
    legacy.disconnect()
    fast.disconnect()


def test_uncontended_put_and_get_are_one_round_trip_each(
    redis_server: RedisServer, prefix: str
) -> None:
    client = CountingRedis(host="127.0.0.1", port=redis_server.port)
    q = PressureQueue("q", redis_url=redis_server.url, prefix=prefix, client=client)
    q.create(bound=3)
    q.put("warm-up")  # the first call may find the script missing and EVAL it
    q.get()
    client.trips.clear()
    for item in ("a", "b", "c"):
        q.put(item)
    assert client.trips == ["EVALSHA"] * 3
    client.trips.clear()
    assert [q.get(), q.get_nowait(), q.get(timeout=1)] == [b"a", b"b", b"c"]
    assert client.trips == ["EVALSHA"] * 3
    # The reference sequence, for contrast: three MULTI/EXEC batches each way.
    legacy = LegacyQueue("q", redis_url=redis_server.url, prefix=prefix, client=client)
    client.trips.clear()
    legacy.put("x")
    assert legacy.get() == b"x"
    assert client.trips == ["PIPELINE"] * 6
    client.close()


def test_script_missing_on_the_server_is_sent_again(
    make_queue: Callable[..., PressureQueue], raw: redis.Redis
) -> None:
    q = make_queue()
    q.create()
    q.put("a")
    raw.script_flush()  # as after a restart or a failover
    assert raw.script_exists(scripts.PUT.sha, scripts.GET.sha) == [False, False]
    q.put("b")
    assert q.get() == b"a"
    assert raw.script_exists(scripts.PUT.sha, scripts.GET.sha) == [True, True]
    assert q.get() == b"b"


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.binary(max_size=6)),
        st.tuples(st.just("put_wait"), st.binary(max_size=6)),
        st.sampled_from(
            [
                ("get",),
                ("get_wait",),
                ("close",),
                ("take", "producer_free"),
                ("take", "consumer_free"),
                ("take", "not_full"),
                ("give", "producer_free"),
                ("give", "consumer_free"),
                ("give", "not_full"),
                ("drop_bound",),
                ("corrupt_stats",),
            ]
        ),
        st.tuples(st.just("bound"), st.sampled_from([b"0", b"1", b" 2 ", b"+3", b"x", b"-1"])),
    ),
    min_size=1,
    max_size=30,
)


def apply(op: tuple[Any, ...], q: PressureQueue, raw: redis.Redis) -> object:
    """One step, through the queue or, for the foreign ones, as raw commands."""
    kind = op[0]
    if kind == "put":
        return outcome(lambda: q.put(op[1], block=False))
    if kind == "put_wait":  # blocking, with no time to wait: the waiting paths' exits
        return outcome(lambda: q.put(op[1], timeout=0))
    if kind == "get":
        return outcome(lambda: q.get(block=False))
    if kind == "get_wait":
        return outcome(lambda: q.get(timeout=0))
    if kind == "close":
        return outcome(lambda: q.close(block=False))
    keys = spec_keys(q.prefix, q.name)
    if kind == "take":  # another client takes the role (and names itself), or the room
        if op[1] != "not_full":
            raw.set(keys[op[1].removesuffix("_free")], "other")
        return raw.rpop(keys[op[1]])
    if kind == "give":
        return raw.pipeline().lpush(keys[op[1]], 0).ltrim(keys[op[1]], 0, 0).execute()[0]
    if kind == "drop_bound":  # a delete has started
        return raw.delete(keys["bound"])
    if kind == "corrupt_stats":
        return raw.mset({keys["stats:produced_messages"]: "x", keys["stats:consumed_bytes"]: "x"})
    assert kind == "bound"
    return raw.set(keys["bound"], op[1])


@example(bound=1, ops=[("close",), ("take", "producer_free"), ("put", b"x")])
@example(bound=2, ops=[("put", b"a"), ("drop_bound",), ("get",), ("put_wait", b"b")])
@example(bound=1, ops=[("put", b"a"), ("bound", b" 2 "), ("put", b"b"), ("get",)])
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(bound=st.integers(min_value=0, max_value=3), ops=OPS)
def test_fast_path_matches_the_reference_sequence(
    pair: tuple[PressureQueue, PressureQueue], raw: redis.Redis, bound: int, ops: list[Any]
) -> None:
    legacy, fast = pair
    raw.flushdb()
    legacy.create(bound=bound)
    fast.create(bound=bound)
    for step, op in enumerate(ops):
        expected = apply(op, legacy, raw)
        assert apply(op, fast, raw) == expected, f"step {step}: {op}"
        assert dump(raw, fast.prefix) == dump(raw, legacy.prefix), f"after step {step}: {op}"


# The waiting paths, driven by a client that follows the specification's sequences: each
# scenario runs once with the reference implementation and once with the fast path, and
# both must leave the same keyspace and see the same outcomes.

Scenario = Callable[[type[PressureQueue], str, str, redis.Redis, redis.Redis], list[object]]


def in_thread(action: Callable[[], Any]) -> Callable[[], object]:
    """Start `action`; the returned function joins it and gives its outcome."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(outcome(action)), daemon=True)
    thread.start()

    def join() -> object:
        thread.join(10)
        assert not thread.is_alive()
        return result[0]

    return join


def wait_for_room(
    impl: type[PressureQueue], url: str, p: str, raw: redis.Redis, spec_r: redis.Redis
) -> list[object]:
    q = impl("q", redis_url=url, prefix=p, client_uid="lib")
    spec = SpecClient(spec_r, p, "q", "spec")
    q.create(bound=2)
    q.put("a")
    q.put("b")
    blocked = in_thread(lambda: q.put("c"))  # takes the role, finds no room, waits
    wait_until(lambda: raw.llen(f"{p}:q:producer_free") == 0)
    taken = spec.get()
    return [taken, blocked(), q.length()]


def wait_for_element(
    impl: type[PressureQueue], url: str, p: str, raw: redis.Redis, spec_r: redis.Redis
) -> list[object]:
    q = impl("q", redis_url=url, prefix=p, client_uid="lib")
    spec = SpecClient(spec_r, p, "q", "spec")
    q.create(bound=1)
    blocked = in_thread(q.get)
    wait_until(lambda: raw.llen(f"{p}:q:consumer_free") == 0)
    spec.put(b"element")
    return [blocked()]


def close_while_waiting(
    impl: type[PressureQueue], url: str, p: str, raw: redis.Redis, spec_r: redis.Redis
) -> list[object]:
    q = impl("q", redis_url=url, prefix=p, client_uid="lib")
    spec = SpecClient(spec_r, p, "q", "spec")
    q.create()
    blocked = in_thread(q.get)
    wait_until(lambda: raw.llen(f"{p}:q:consumer_free") == 0)
    spec.close()
    return [blocked()]


def wait_for_roles(
    impl: type[PressureQueue], url: str, p: str, raw: redis.Redis, spec_r: redis.Redis
) -> list[object]:
    q = impl("q", redis_url=url, prefix=p, client_uid="lib")
    q.create(bound=3)
    q.put("first")
    raw.rpop(f"{p}:q:producer_free")  # both roles held by someone else
    raw.rpop(f"{p}:q:consumer_free")
    blocked_before = raw.info("clients")["blocked_clients"]
    put = in_thread(lambda: q.put("second"))
    get = in_thread(lambda: impl("q", redis_url=url, prefix=p, client_uid="lib2").get())
    # Both in BRPOP for their role, so the scripts run from the "held" stage.
    wait_until(lambda: raw.info("clients")["blocked_clients"] == blocked_before + 2)
    for role in ("producer_free", "consumer_free"):
        raw.set(f"{p}:q:{role.split('_')[0]}", "other")
        raw.lpush(f"{p}:q:{role}", 0)  # ... who now gives them back
    return [put(), get(), q.get()]


@pytest.mark.parametrize(
    "scenario", [wait_for_room, wait_for_element, close_while_waiting, wait_for_roles]
)
def test_waiting_paths_match_the_reference_sequence(
    scenario: Scenario, redis_server: RedisServer, raw: redis.Redis
) -> None:
    spec_r = redis_server.client(socket_timeout=None)  # the reference blocks with BRPOP 0
    token = uuid.uuid4().hex[:8]
    try:
        expected = scenario(LegacyQueue, redis_server.url, f"L{token}", raw, spec_r)
        got = scenario(PressureQueue, redis_server.url, f"F{token}", raw, spec_r)
    finally:
        spec_r.close()
    assert got == expected
    assert dump(raw, f"F{token}") == dump(raw, f"L{token}")
    assert dump(raw, f"F{token}")["producer_free"] == ("list", [b"0"])
    assert dump(raw, f"F{token}")["consumer_free"] == ("list", [b"0"])
