"""Each Disque error code raised as its typed exception, provoked on a real node."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from conveyor.client import (
    AuthError,
    BadIdError,
    Client,
    CommandError,
    ConnectionError,
    ConveyorError,
    LeavingError,
    LoadingError,
    MaxLenError,
    MisconfError,
    NoJobError,
    NoReplError,
    OutOfMemoryError,
    PausedError,
    ReplyError,
    TimeoutError,
    TooLateError,
)
from conveyor.client.errors import error_from_redis, error_from_reply
from tests.conftest import free_port
from tests.servers import NodeProcess, running_node

UNKNOWN_ID = "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"


def test_bad_id(client: Client) -> None:
    with pytest.raises(BadIdError) as caught:
        client.ack("not-an-id")
    assert caught.value.code == "BADID"
    assert str(caught.value) == "BADID Invalid Job ID format."
    for call in (
        lambda: client.show("nope"),
        lambda: client.working("nope"),
        lambda: client.nack(UNKNOWN_ID, "nope"),
        lambda: client.enqueue("x"),
        lambda: client.dequeue("x"),
        lambda: client.del_job("x"),
        lambda: client.fast_ack("x"),
    ):
        with pytest.raises(BadIdError):
            call()


def test_no_job(client: Client) -> None:
    with pytest.raises(NoJobError) as caught:
        client.working(UNKNOWN_ID)
    assert caught.value.code == "NOJOB"
    assert caught.value.message == "NOJOB Job not known in the context of this node."


def test_too_late(client: Client) -> None:
    job_id = client.add_job("q", b"x", ttl=2)
    time.sleep(1.1)
    with pytest.raises(TooLateError) as caught:
        client.working(job_id)
    assert caught.value.code == "TOOLATE"


def test_maxlen(client: Client) -> None:
    client.add_job("q", b"1", maxlen=1)
    with pytest.raises(MaxLenError) as caught:
        client.add_job("q", b"2", maxlen=1)
    assert caught.value.code == "MAXLEN"
    assert client.qlen("q") == 1


def test_paused(client: Client) -> None:
    client.pause("q", "in")
    with pytest.raises(PausedError) as caught:
        client.add_job("q", b"x")
    assert caught.value.code == "PAUSED"


def test_norepl(client: Client) -> None:
    with pytest.raises(NoReplError) as caught:
        client.add_job("q", b"x", replicate=3)
    assert caught.value.code == "NOREPL"
    assert "replication level" in str(caught.value)


def test_leaving(client: Client, raw: redis.Redis) -> None:
    raw.execute_command("CLUSTER", "LEAVING", "yes")
    try:
        with pytest.raises(LeavingError) as caught:
            client.get_job("empty")
        assert caught.value.code == "LEAVING"
    finally:
        raw.execute_command("CLUSTER", "LEAVING", "no")


def test_generic_errors_are_command_errors(client: Client) -> None:
    with pytest.raises(CommandError) as caught:
        client.execute_command("NOSUCHCOMMAND")
    assert caught.value.code == "ERR"
    assert str(caught.value) == "ERR unknown command 'NOSUCHCOMMAND'"
    with pytest.raises(CommandError, match="DELAY is greater than TTL"):
        client.add_job("q", b"x", delay=10, ttl=5)
    with pytest.raises(CommandError, match="COUNT must be"):
        client.get_jobs("q", count=0, nohang=True)
    with pytest.raises(CommandError, match="Invalid job state name"):
        list(client.scan_jobs(states="sleeping"))


def test_error_classes_are_also_redis_py_errors(client: Client) -> None:
    with pytest.raises(redis.ResponseError):
        client.ack("bad")
    assert issubclass(NoReplError, ReplyError) and issubclass(ReplyError, ConveyorError)
    assert issubclass(ConnectionError, redis.ConnectionError)
    assert issubclass(TimeoutError, ConnectionError)


def test_out_of_memory(tmp_path: Path) -> None:
    with (
        running_node(tmp_path / "oom", "--maxmemory", "1mb") as small,
        Client([f"127.0.0.1:{small.port}"]) as client,
    ):
        with pytest.raises(OutOfMemoryError) as caught:
            client.add_job("q", b"x" * 2_000_000)
        assert caught.value.code == "OOM"
        assert str(caught.value).startswith("OOM command not allowed")
        assert client.ping()  # the connection survives an error reply


@pytest.fixture(scope="module")
def secure_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with running_node(tmp_path_factory.mktemp("auth"), "--requirepass", "secret") as process:
        yield process


def test_missing_password_is_an_auth_error(secure_node: NodeProcess) -> None:
    with Client([f"127.0.0.1:{secure_node.port}"]) as client:
        with pytest.raises(AuthError) as caught:
            client.ping()
        assert caught.value.code == "NOAUTH"
        # redis-py's RESP3 handshake (`HELLO 3`) gets Redis' own NOAUTH text
        assert "must be called with the client already authenticated" in str(caught.value)


def test_wrong_password_is_an_auth_error(secure_node: NodeProcess) -> None:
    client = Client([f"127.0.0.1:{secure_node.port}"], password="wrong")
    with client, pytest.raises(AuthError, match="invalid username-password pair") as caught:
        client.ping()
    assert caught.value.code == "WRONGPASS"  # `HELLO 3 AUTH default wrong`, as Redis answers


def test_right_password_works(secure_node: NodeProcess) -> None:
    with Client([f"127.0.0.1:{secure_node.port}"], password="secret") as client:
        assert client.ping()
        assert client.qlen("q") == 0
    with Client.from_url(f"disque://:secret@127.0.0.1:{secure_node.port}") as client:
        assert client.ping()


def test_dead_port_is_a_connection_error() -> None:
    port = free_port()
    started = time.monotonic()
    client = Client([f"127.0.0.1:{port}"], socket_timeout=2)
    with client, pytest.raises(ConnectionError) as caught:
        client.ping()
    assert time.monotonic() - started < 3
    assert caught.value.address == f"127.0.0.1:{port}"
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert isinstance(caught.value, ConveyorError)


def test_unanswered_command_is_a_timeout(tmp_path: Path) -> None:
    """A server that accepts but never answers: TimeoutError after socket_timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with Client([f"127.0.0.1:{port}"], socket_timeout=0.3) as client:
            started = time.monotonic()
            with pytest.raises(ConnectionError) as caught:
                client.ping()
            assert time.monotonic() - started < 3
    assert caught.value.address == f"127.0.0.1:{port}"
    assert "imeout" in str(caught.value)


def test_slow_reply_is_a_timeout_error(node: NodeProcess, raw: redis.Redis) -> None:
    with Client([f"127.0.0.1:{node.port}"], socket_timeout=0.3) as client:
        assert client.ping()
        with pytest.raises(TimeoutError) as caught:
            client.execute_command("DEBUG", "SLEEP", "0.8")
        assert caught.value.address == f"127.0.0.1:{node.port}"
        time.sleep(0.6)
        assert client.ping()  # reconnects after the timeout


@pytest.mark.parametrize(
    ("text", "cls"),
    [
        ("ERR syntax error", CommandError),
        ("NOREPL Timeout reached", NoReplError),
        ("MAXLEN Queue is already longer", MaxLenError),
        ("PAUSED Queue paused in input, try later", PausedError),
        ("LEAVING This node is leaving", LeavingError),
        ("NOJOB Job not known", NoJobError),
        ("TOOLATE Half of job TTL", TooLateError),
        ("BADID Invalid Job ID format.", BadIdError),
        ("OOM command not allowed", OutOfMemoryError),
        ("NOAUTH Authentication required.", AuthError),
        ("ERR invalid password", AuthError),
        ("LOADING Disque is loading the dataset in memory", LoadingError),
        ("MISCONF Errors writing to the AOF file: No space", MisconfError),
        ("WHATEVER something new", ReplyError),
    ],
)
def test_every_code_maps_to_its_class(text: str, cls: type[ReplyError]) -> None:
    error = error_from_reply(text)
    assert type(error) is cls
    assert str(error) == text and error.message == text
    assert error.code == text.split(" ", 1)[0]


def test_redis_py_exceptions_are_translated() -> None:
    # redis-py strips the codes it knows and raises its own classes for some of them.
    loading = error_from_redis(
        redis.BusyLoadingError("Disque is loading the dataset in memory", status_code="LOADING"),
        "h:1",
    )
    assert type(loading) is LoadingError
    assert str(loading) == "LOADING Disque is loading the dataset in memory"
    oom = error_from_redis(redis.exceptions.OutOfMemoryError("command not allowed"), "h:1")
    assert type(oom) is OutOfMemoryError
    auth = error_from_redis(redis.AuthenticationError("Authentication required."), "h:1")
    assert type(auth) is AuthError and auth.code == "NOAUTH"
    timeout = error_from_redis(redis.TimeoutError("Timeout reading"), "h:1")
    assert type(timeout) is TimeoutError and timeout.address == "h:1"
    refused = error_from_redis(redis.ConnectionError("refused"), "h:2")
    assert type(refused) is ConnectionError and refused.address == "h:2"
    assert repr(refused) == "ConnectionError('h:2: refused')"
