"""Connections the node closed, both twins alike (each test runs on `Client` and on
`AsyncClient`, through `Twin`): an idle pooled connection the node closed is replaced
before anything is sent on it; a command in flight when the node closes is not sent
again; when no node answers, the error names each address tried and why it failed."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from conveyor.client import AsyncClient, Client, ConnectionError
from conveyor.client._base import NAMED_FAILURES
from tests.client.twins import Twin, where
from tests.conftest import free_port
from tests.servers import NodeProcess

TWINS = pytest.mark.parametrize("kind", [Client, AsyncClient], ids=["sync", "async"])


@pytest.fixture(params=[Client, AsyncClient], ids=["sync", "async"])
def solo(request: pytest.FixtureRequest, node: NodeProcess, raw: redis.Redis) -> Iterator[Twin]:
    """A client of each kind in turn on the module's node."""
    client = Twin(request.param, [where(node)])
    yield client
    client.close()


def listed(raw: redis.Redis, client_id: int) -> str:
    """The node's CLIENT LIST line of `client_id`, empty once it is gone."""
    reply = raw.execute_command("CLIENT", "LIST", "ID", str(client_id))
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def wait_until(check: Callable[[], bool], what: str) -> None:
    for _ in range(500):  # bounded: at most about 5 s
        if check():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def kill_idle(raw: redis.Redis, client_id: int) -> None:
    """CLIENT KILL `client_id`, and wait until the node has closed its socket (it drops
    the client from its list as it closes it): the EOF is then waiting on the client's
    socket, unread, as when the node closes a connection between two commands."""
    assert raw.execute_command("CLIENT", "KILL", "ID", str(client_id)) == 1
    wait_until(lambda: listed(raw, client_id) == "", f"client {client_id} closed")


def calls_on(raw: redis.Redis, command: str) -> int:
    stats = raw.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def test_a_pooled_connection_the_node_closed_is_replaced_before_sending(
    solo: Twin, raw: redis.Redis
) -> None:
    first = solo.execute_command("CLIENT", "ID")
    kill_idle(raw, first)
    # An ADDJOB is safe to send on a new connection: nothing went on the closed one. The
    # async twin raised ConnectionError here (its event loop had not read the EOF yet).
    solo.add_job("q", b"x")
    assert raw.execute_command("QLEN", "q") == 1  # added once
    second = solo.execute_command("CLIENT", "ID")
    assert second != first
    kill_idle(raw, second)
    assert solo.qlen("q") == 1
    assert solo.address is not None

    # Closed while a GETJOB waits on it: the GETJOB may have taken a job, so it fails and
    # is not sent again (sent again, it would wait its 5 s and return []).
    third = solo.execute_command("CLIENT", "ID")
    getjobs = calls_on(raw, "getjob")

    def kill_blocked() -> None:
        wait_until(lambda: " flags=b " in listed(raw, third), "the GETJOB blocked")
        raw.execute_command("CLIENT", "KILL", "ID", str(third))

    killer = threading.Thread(target=kill_blocked)
    killer.start()
    try:
        with pytest.raises(ConnectionError):
            solo.get_jobs("empty", timeout_ms=5000)
    finally:
        killer.join(10)
    assert calls_on(raw, "getjob") == getjobs + 1
    assert solo.qlen("q") == 1  # the next command connects again


def dead_addresses(count: int) -> list[str]:
    """`count` distinct local addresses nothing listens on."""
    ports: set[int] = set()
    for _ in range(count * 10):  # bounded: free_port may give a port twice
        ports.add(free_port())
        if len(ports) == count:
            return [f"127.0.0.1:{port}" for port in sorted(ports)]
    raise AssertionError("not enough free ports")


def ping_failure(kind: type[Client], nodes: list[str]) -> ConnectionError:
    """The error of a PING from a client of `kind` given `nodes`, none of them up."""
    client = Twin(kind, nodes)
    try:
        with pytest.raises(ConnectionError) as caught:
            client.ping()
    finally:
        client.close()
    return caught.value


def named_failures(message: str) -> dict[str, str]:
    """address -> reason, as the "no reachable node" message names them."""
    return dict(re.findall(r"(127\.0\.0\.1:\d+) \(([^)]*)\)", message))


@TWINS
def test_no_reachable_node_names_each_address_tried(kind: type[Client]) -> None:
    dead = dead_addresses(2)
    error = ping_failure(kind, dead)
    message = str(error)
    assert message.startswith("no reachable node of 2 tried: ")
    failures = named_failures(message)
    assert sorted(failures) == dead
    assert set(failures.values()) == {"Connection refused"}  # the same words in both twins
    # Several failed: none of them alone is the error's address.
    assert error.address is None


@TWINS
def test_no_reachable_node_names_a_bounded_number_of_addresses(kind: type[Client]) -> None:
    dead = dead_addresses(NAMED_FAILURES + 3)
    error = ping_failure(kind, dead)
    message = str(error)
    assert message.startswith(f"no reachable node of {len(dead)} tried: ")
    assert message.endswith("; and 3 more")
    failures = named_failures(message)
    assert len(failures) == NAMED_FAILURES and set(failures) <= set(dead)
    assert set(failures.values()) == {"Connection refused"}  # the same words in both twins


@TWINS
def test_one_dead_node_is_the_errors_address(kind: type[Client]) -> None:
    (dead,) = dead_addresses(1)
    error = ping_failure(kind, [dead])
    assert error.address == dead
    assert str(error) == f"{dead}: no reachable node (Connection refused)"
