"""RESP3 and Redis 6/7's connection handshake: `HELLO protover [AUTH] [SETNAME]`, CLIENT.

redis-py 8 opens every connection with `HELLO 3` (RESP3) unless told `protocol=2`. Both
must decode Disque's replies to the same Python values; Disque's bare `HELLO` is unchanged.
Redis 7.2's texts are the reference for every error checked here.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis._parsers import _RESP3Parser
from redis.backoff import NoBackoff
from redis.retry import Retry

from conveyor import __version__
from conveyor.protocol.resp import (
    NULL_ARRAY,
    Map,
    Status,
    Verbatim,
    encode,
    null_array,
    null_bulk,
    verbatim,
)
from tests.node.helpers import JOB_ID_RE, UNKNOWN_ID, RawClient, error_of, wait_until
from tests.servers import NodeProcess, running_node

HELLO_NOAUTH = (
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
    "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
    "select the RESP protocol version at the same time"
)
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
NOPROTO = "NOPROTO unsupported protocol version"
BAD_NAME = "ERR Client names cannot contain spaces, newlines or special characters."
SYNTAX = "ERR syntax error"
UNKNOWN_SUB = "ERR unknown subcommand '{}'. Try CLIENT HELP."
NOT_INT = "ERR Protocol version is not an integer or out of range"


def sub_arity(sub: str) -> str:
    return f"ERR wrong number of arguments for 'client|{sub}' command"


def attr_error(attr: str) -> str:
    return f"ERR {attr} cannot contain spaces, newlines or special characters."


# The three ways redis-py may read Conveyor: RESP2, RESP3 through hiredis (the default
# when hiredis is installed), and RESP3 through redis-py's own parser, which is stricter:
# a RESP2 null (`$-1`, `*-1`) in a RESP3 reply breaks it.
KINDS = ("resp2", "resp3", "resp3-python-parser")


def make_client(node: NodeProcess, kind: str, **options: Any) -> redis.Redis:
    """A redis-py 8 client with its defaults, except what `kind` says."""
    base: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": node.port,
        "socket_timeout": 10,
        "retry": Retry(NoBackoff(), 0),
        **options,
    }
    if kind == "resp2":
        return redis.Redis(protocol=2, **base)
    if kind == "resp3":
        return redis.Redis(**base)  # no protocol argument: redis-py 8 speaks RESP3
    pool = redis.ConnectionPool(protocol=3, parser_class=_RESP3Parser, **base)
    return redis.Redis(connection_pool=pool)


@pytest.fixture
def clients(node: NodeProcess, r: redis.Redis) -> Iterator[dict[str, redis.Redis]]:
    made = {kind: make_client(node, kind) for kind in KINDS}
    yield made
    for client in made.values():
        client.close()


@pytest.fixture(scope="module")
def auth_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with running_node(tmp_path_factory.mktemp("auth3"), "--requirepass", "s3cret") as process:
        yield process


# -- raw RESP3 --------------------------------------------------------------------------------
def _reply_end3(data: bytes, pos: int = 0) -> int | None:
    """Where the RESP2/RESP3 reply at pos ends, or None if it is incomplete."""
    line_end = data.find(b"\r\n", pos)
    if line_end < 0:
        return None
    kind = data[pos : pos + 1]
    if kind in (b"+", b"-", b":", b"_", b",", b"#", b"("):
        return line_end + 2
    size = int(data[pos + 1 : line_end])
    if kind in (b"$", b"=", b"!"):
        if size < 0:
            return line_end + 2
        end = line_end + 2 + size + 2
        return end if len(data) >= end else None
    if kind in (b"*", b"~", b">", b"%", b"|"):
        items = size * 2 if kind in (b"%", b"|") else size
        pos = line_end + 2
        for _ in range(max(items, 0)):
            next_pos = _reply_end3(data, pos)
            if next_pos is None:
                return None
            pos = next_pos
        return pos
    raise AssertionError(f"not a RESP reply: {data[pos : pos + 50]!r}")


class Raw3(RawClient):
    """A bare socket that also frames RESP3 replies."""

    def read_raw(self, timeout_s: float = 5.0) -> bytes:
        deadline = time.monotonic() + timeout_s
        while True:
            end = _reply_end3(self.buffer) if self.buffer else None
            if end is not None:
                reply, self.buffer = self.buffer[:end], self.buffer[end:]
                return reply
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no complete reply, got {self.buffer!r}")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"closed by the node after {self.buffer!r}")
            self.buffer += chunk

    def line(self, *args: str | bytes | int) -> str:
        """The reply as text (for one-line replies: errors, status)."""
        return self.call_raw(*args).decode().removesuffix("\r\n")


def handshake_bytes(proto: int, client_id: int) -> bytes:
    version = __version__.encode()
    fields = (
        b"$6\r\nserver\r\n$8\r\nconveyor\r\n"
        b"$7\r\nversion\r\n$%d\r\n%s\r\n"
        b"$5\r\nproto\r\n:%d\r\n"
        b"$2\r\nid\r\n:%d\r\n"
        b"$4\r\nmode\r\n$10\r\nstandalone\r\n"
        b"$4\r\nrole\r\n$6\r\nmaster\r\n"
        b"$7\r\nmodules\r\n*0\r\n"
    ) % (len(version), version, proto, client_id)
    return (b"%7\r\n" if proto == 3 else b"*14\r\n") + fields


def disque_hello_bytes(node: NodeProcess, node_id: bytes) -> bytes:
    port = str(node.port).encode()
    return b"*3\r\n:1\r\n$40\r\n%s\r\n*4\r\n$40\r\n%s\r\n$0\r\n\r\n$%d\r\n%s\r\n$1\r\n1\r\n" % (
        node_id,
        node_id,
        len(port),
        port,
    )


def test_hello_3_exact_bytes_and_resp3_nulls(node: NodeProcess, r: redis.Redis) -> None:
    with Raw3(node.port) as raw:
        client_id = int(raw.line("CLIENT", "ID")[1:])
        assert raw.call_raw("HELLO", "3") == handshake_bytes(3, client_id)
        # One null for every type, where RESP2 has $-1 and *-1.
        assert raw.call_raw("CLIENT", "GETNAME") == b"_\r\n"
        assert raw.call_raw("SHOW", UNKNOWN_ID) == b"_\r\n"
        assert raw.call_raw("QSTAT", "nosuchqueue") == b"_\r\n"
        assert raw.call_raw("GETJOB", "NOHANG", "FROM", "empty") == b"_\r\n"
        assert raw.call_raw("GETJOB", "TIMEOUT", "10", "FROM", "empty") == b"_\r\n"  # woken
        assert raw.call_raw("COMMAND", "INFO", "nosuch") == b"*1\r\n_\r\n"
        # Maps and verbatim strings where Redis 7 sends them.
        assert raw.call_raw("CONFIG", "GET", "maxmemory-policy") == (
            b"%1\r\n$16\r\nmaxmemory-policy\r\n$4\r\nacks\r\n"
        )
        assert raw.call_raw("CONFIG", "GET", "nosuch") == b"%0\r\n"
        text = r.execute_command(b"INFO", "jobs")
        assert raw.call_raw("INFO", "jobs") == b"=%d\r\ntxt:%s\r\n" % (len(text) + 4, text)
        assert raw.call_raw("COMMAND", "DOCS") == b"%0\r\n"
        # The rest keeps its RESP2 shape.
        assert raw.call_raw("QLEN", "q") == b":0\r\n"
        assert raw.call_raw("PING") == b"+PONG\r\n"
        added = raw.call_raw("ADDJOB", "q", "x", "0")
        assert added.startswith(b"+D-")  # a status, as in Disque
        job_id = added[1:-2]
        assert raw.call_raw("GETJOB", "FROM", "q") == (
            b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n" + job_id + b"\r\n$1\r\nx\r\n"
        )
        # SHOW stays a flat array; a null inside it is `_` too (a queued job: no requeue)
        queued = raw.call_raw("ADDJOB", "queued", "y", "0")[1:-2]
        shown = raw.call_raw("SHOW", queued)
        assert shown.startswith(b"*30\r\n$2\r\nid\r\n$40\r\n" + queued)
        fix = "SHOW and JSCAN REPLY all must encode their fields with resp3 (cmd_jobs)"
        assert b"$19\r\nnext-requeue-within\r\n_\r\n" in shown, fix
        assert b"$-1" not in raw.call_raw("JSCAN", "0", "QUEUE", "queued", "REPLY", "all"), fix
        # HELLO 2 goes back to RESP2.
        assert raw.call_raw("HELLO", "2") == handshake_bytes(2, client_id)
        assert raw.call_raw("CLIENT", "GETNAME") == b"$-1\r\n"
        assert raw.call_raw("SHOW", UNKNOWN_ID) == b"$-1\r\n"
        assert raw.call_raw("QSTAT", "nosuchqueue") == b"*-1\r\n"
        assert raw.call_raw("CONFIG", "GET", "maxmemory-policy") == (
            b"*2\r\n$16\r\nmaxmemory-policy\r\n$4\r\nacks\r\n"
        )
        text = r.execute_command(b"INFO", "jobs")
        assert raw.call_raw("INFO", "jobs") == b"$%d\r\n%s\r\n" % (len(text), text)


def test_blocked_getjob_times_out_with_the_resp3_null(node: NodeProcess, r: redis.Redis) -> None:
    with Raw3(node.port) as raw:
        raw.call_raw("HELLO", "3")
        raw.send_command("GETJOB", "TIMEOUT", "200", "FROM", "empty")
        assert raw.read_raw() == b"_\r\n"


def test_disque_hello_is_unchanged(node: NodeProcess, r: redis.Redis) -> None:
    node_id = r.execute_command("CLUSTER", "MYID")
    expected = disque_hello_bytes(node, node_id)
    with Raw3(node.port) as raw:
        assert raw.call_raw("HELLO") == expected
        raw.call_raw("HELLO", "3")
        assert raw.call_raw("HELLO") == expected  # the same array in RESP3
        assert raw.call_raw("hello") == expected
    for client in (make_client(node, "resp2"), make_client(node, "resp3")):
        with client:
            assert client.execute_command("HELLO") == [
                1,
                node_id,
                [node_id, b"", str(node.port).encode(), b"1"],
            ]


# -- redis-py decodes both protocols alike ------------------------------------------------------
def test_redis_py_defaults_speak_resp3(node: NodeProcess, r: redis.Redis) -> None:
    assert int(redis.__version__.split(".")[0]) >= 8
    with make_client(node, "resp3") as client:
        info = client.client_info()
        assert info["resp"] == "3"
        # redis-py's CLIENT SETINFO, sent on connect, is kept
        assert info["lib-name"] == "redis-py"
        assert info["lib-ver"] == redis.__version__
        connection = client.connection_pool.get_connection()
        try:
            assert connection.handshake_metadata == {
                b"server": b"conveyor",
                b"version": __version__.encode(),
                b"proto": 3,
                b"id": connection.handshake_metadata[b"id"],
                b"mode": b"standalone",
                b"role": b"master",
                b"modules": [],
            }
        finally:
            client.connection_pool.release(connection)
    with make_client(node, "resp2") as client:
        assert client.client_info()["resp"] == "2"


_SHOW_VOLATILE = {b"id", b"ctime", b"ttl", b"next-requeue-within", b"next-awake-within"}
_QSTAT_VOLATILE = {b"age", b"idle"}


def _pairs(reply: Any, volatile: set[bytes]) -> Any:
    """A flat key/value array as a list of pairs; time-dependent values by type only."""
    if reply is None:
        return None
    assert isinstance(reply, list), reply
    return [
        (key, type(value).__name__ if key in volatile else value)
        for key, value in zip(reply[::2], reply[1::2], strict=True)
    ]


_TOTALS = {b"delivered_jobs", b"acked_jobs", b"nacked_jobs", b"requeued_jobs"}


def _disque_session(client: redis.Redis) -> dict[str, Any]:
    """Every Disque reply shape, from one client on an empty node. Job IDs (which differ
    from run to run) are replaced by their position."""
    out: dict[str, Any] = {}
    first = client.execute_command("ADDJOB", "q", "body one", "0", "RETRY", "60")
    second = client.execute_command("ADDJOB", "q", b"\x00\xffbinary", "0", "TTL", "300")
    third = client.execute_command("ADDJOB", "other", "queued", "0")
    ids = [first, second, third]
    for job_id in ids:
        assert isinstance(job_id, bytes) and JOB_ID_RE.match(job_id), job_id

    def named(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: named(item) for key, item in value.items()}
        if isinstance(value, list):
            return [named(item) for item in value]
        if isinstance(value, tuple):
            return tuple(named(item) for item in value)
        if value in ids:
            return f"job{ids.index(value)}"
        return value

    out["getjob"] = client.execute_command("GETJOB", "FROM", "q")
    out["getjob_withcounters"] = client.execute_command(
        "GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "q"
    )
    out["getjob_nohang_empty"] = client.execute_command("GETJOB", "NOHANG", "FROM", "q")
    out["getjob_timeout"] = client.execute_command("GETJOB", "TIMEOUT", "10", "FROM", "q")
    out["show_active"] = _pairs(client.execute_command("SHOW", first), _SHOW_VOLATILE)
    out["show_queued"] = _pairs(client.execute_command("SHOW", third), _SHOW_VOLATILE)
    out["show_body"] = dict(_pairs(client.execute_command("SHOW", second), set()))[b"body"]
    out["show_missing"] = client.execute_command("SHOW", UNKNOWN_ID)
    out["qstat"] = _pairs(client.execute_command("QSTAT", "other"), _QSTAT_VOLATILE)
    out["qstat_missing"] = client.execute_command("QSTAT", "nosuchqueue")
    out["qpeek"] = client.execute_command("QPEEK", "other", "1")
    out["qlen"] = client.execute_command("QLEN", "other")
    cursor, queues = client.execute_command("QSCAN", "0", "COUNT", "100")
    out["qscan"] = (cursor, sorted(queues))
    cursor, jobs = client.execute_command("JSCAN", "0", "COUNT", "100")
    out["jscan"] = (cursor, sorted(named(jobs)))
    cursor, shown = client.execute_command("JSCAN", "0", "COUNT", "100", "REPLY", "all")
    out["jscan_all"] = (cursor, sorted(repr(_pairs(item, _SHOW_VOLATILE)) for item in shown))
    # Raw, no redis-py parsing; the totals since start grow from one session to the next.
    text = client.execute_command(b"INFO", "jobs")
    out["info_text"] = b"\r\n".join(
        line for line in text.split(b"\r\n") if line.split(b":")[0] not in _TOTALS
    )
    out["info"] = {k: v for k, v in client.info("jobs").items() if k.encode() not in _TOTALS}
    out["config_get"] = client.config_get("maxmemory*")
    out["config_get_none"] = client.config_get("nosuch")
    out["command_info"] = client.execute_command(b"COMMAND", "INFO", "ackjob", "nosuch")
    out["getname"] = client.execute_command("CLIENT", "GETNAME")
    out["ackjob"] = client.execute_command("ACKJOB", first, second, third, UNKNOWN_ID)
    out["fastack"] = client.execute_command("FASTACK", first)
    out["after"] = client.execute_command("JSCAN", "0", "COUNT", "100")
    return named(out)


def test_disque_replies_decode_to_the_same_values(
    clients: dict[str, redis.Redis], r: redis.Redis
) -> None:
    sessions: dict[str, dict[str, Any]] = {}
    for kind, client in clients.items():
        r.execute_command("DEBUG", "FLUSHALL")
        sessions[kind] = _disque_session(client)
    reference = sessions["resp2"]
    # what RESP2 gives, for the record
    assert reference["getjob"] == [[b"q", "job0", b"body one"]]
    assert reference["getjob_nohang_empty"] is None
    assert reference["getjob_timeout"] is None
    assert reference["show_missing"] is None and reference["qstat_missing"] is None
    assert reference["show_body"] == b"\x00\xffbinary"
    assert dict(reference["show_queued"])[b"next-requeue-within"] == "NoneType"
    assert dict(reference["show_active"])[b"next-requeue-within"] == "int"
    assert reference["config_get"]["maxmemory-policy"] == "acks"
    assert reference["config_get_none"] == {}
    assert reference["info"]["registered_jobs"] == 3
    assert reference["command_info"][1] is None
    assert reference["getname"] is None
    assert reference["ackjob"] == 3
    assert reference["after"] == [b"0", []]
    for kind in KINDS[1:]:
        for key, value in reference.items():
            assert sessions[kind][key] == value, (kind, key)


def test_redis_py_command_helpers_agree(clients: dict[str, redis.Redis]) -> None:
    """redis-py's own parsers of COMMAND, CONFIG GET, INFO and CLIENT work in both."""
    results = {}
    for kind, client in clients.items():
        table = client.command()
        results[kind] = (
            table["addjob"]["arity"],
            sorted(table["addjob"]["flags"]),
            client.command_count(),
            client.config_get("maxmemory-policy"),
            client.info("jobs"),
            client.client_getname(),
            sorted(client.client_info()),
        )
    assert results["resp2"][0] == -4
    assert "denyoom" in results["resp2"][1]
    for kind in KINDS[1:]:
        assert results[kind] == results["resp2"], kind


def test_resp3_connection_keeps_working_after_errors(node: NodeProcess, r: redis.Redis) -> None:
    with make_client(node, "resp3-python-parser") as client:
        assert error_of(client, "GETJOB", "FROM") == "ERR syntax error"
        assert error_of(client, "SHOW", "nope") == "BADID Invalid Job ID format."
        assert client.execute_command("SHOW", UNKNOWN_ID) is None
        assert client.ping() is True


# -- HELLO protover ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("HELLO", "1"), NOPROTO),
        (("HELLO", "4"), NOPROTO),
        (("HELLO", "0"), NOPROTO),
        (("HELLO", "-1"), NOPROTO),
        (("HELLO", "99999999999999999999"), NOT_INT),
        (("HELLO", "abc"), NOT_INT),
        (("HELLO", "03"), NOT_INT),
        (("HELLO", "+3"), NOT_INT),
        (("HELLO", "3.0"), NOT_INT),
        (("HELLO", "AUTH", "default", "x"), NOT_INT),
        (("HELLO", "3", "FOO"), "ERR Syntax error in HELLO option 'FOO'"),
        (("HELLO", "3", "AUTH", "default"), "ERR Syntax error in HELLO option 'AUTH'"),
        (("HELLO", "3", "SETNAME"), "ERR Syntax error in HELLO option 'SETNAME'"),
        (("HELLO", "3", "SETNAME", "a b"), BAD_NAME),
        (("HELLO", "3", "SETNAME", "new\nline"), BAD_NAME),
        (("HELLO", "3", "AUTH", "bob", "x"), WRONGPASS),
        (("HELLO", "3", "AUTH", "Default", "x"), WRONGPASS),
        (("HELLO", "7", "FOO"), NOPROTO),  # the version is checked first
    ],
)  # fmt: skip
def test_hello_errors(
    node: NodeProcess, r: redis.Redis, argv: tuple[str, ...], expected: str
) -> None:
    with Raw3(node.port) as raw:
        assert raw.line(*argv) == f"-{expected}"
        # nothing changed: still RESP2, unnamed
        assert raw.call_raw("CLIENT", "GETNAME") == b"$-1\r\n"


def test_hello_setname_and_options(node: NodeProcess, r: redis.Redis) -> None:
    with Raw3(node.port) as raw:
        client_id = int(raw.line("CLIENT", "ID")[1:])
        assert raw.call_raw("hello", "3", "setname", "w-1") == handshake_bytes(3, client_id)
        assert raw.call_raw("CLIENT", "GETNAME") == b"$3\r\nw-1\r\n"
        # without a password the default user takes any (Redis' nopass default user)
        reply = raw.call_raw("HELLO", "2", "AUTH", "default", "anything", "SETNAME", "w-2")
        assert reply == handshake_bytes(2, client_id)
        assert raw.call_raw("CLIENT", "GETNAME") == b"$3\r\nw-2\r\n"
        assert raw.call_raw("HELLO", "3", "SETNAME", "") == handshake_bytes(3, client_id)
        assert raw.call_raw("CLIENT", "GETNAME") == b"_\r\n"  # an empty name removes it
        # the last of repeated options wins, as in Redis
        raw.call_raw("HELLO", "3", "SETNAME", "a", "SETNAME", "b")
        assert raw.call_raw("CLIENT", "GETNAME") == b"$1\r\nb\r\n"


def test_redis_py_client_name_in_both_protocols(node: NodeProcess, r: redis.Redis) -> None:
    for kind in KINDS:
        with make_client(node, kind, client_name=f"named-{kind}") as client:
            # redis-py's own parser leaves this one as bytes (with Redis too)
            name = client.client_getname()
            assert (name.decode() if isinstance(name, bytes) else name) == f"named-{kind}"
            assert f"name=named-{kind}" in client.execute_command("CLIENT", "INFO").decode()


# -- AUTH -------------------------------------------------------------------------------------
def test_hello_before_auth(auth_node: NodeProcess) -> None:
    with Raw3(auth_node.port) as raw:
        assert raw.line("HELLO", "3") == f"-{HELLO_NOAUTH}"
        assert raw.line("HELLO", "2", "SETNAME", "x") == f"-{HELLO_NOAUTH}"
        assert raw.line("HELLO") == "-NOAUTH Authentication required."  # Disque's, as before
        assert raw.line("HELLO", "9") == f"-{NOPROTO}"
        assert raw.line("HELLO", "3", "SETNAME", "a b") == f"-{BAD_NAME}"
        assert raw.line("HELLO", "3", "AUTH", "default", "wrong") == f"-{WRONGPASS}"
        assert raw.line("HELLO", "3", "AUTH", "bob", "s3cret") == f"-{WRONGPASS}"
        assert raw.line("PING") == "-NOAUTH Authentication required."
        assert raw.line("CLIENT", "ID") == "-NOAUTH Authentication required."
        reply = raw.call_raw("HELLO", "3", "AUTH", "default", "s3cret", "SETNAME", "w1")
        assert reply.startswith(b"%7\r\n$6\r\nserver\r\n$8\r\nconveyor\r\n")
        assert raw.line("PING") == "+PONG"
        assert raw.call_raw("CLIENT", "GETNAME") == b"$2\r\nw1\r\n"
        assert raw.call_raw("SHOW", UNKNOWN_ID) == b"_\r\n"
        # A failed HELLO AUTH afterwards leaves the connection authenticated, as in Redis.
        assert raw.line("HELLO", "3", "AUTH", "default", "wrong") == f"-{WRONGPASS}"
        assert raw.line("PING") == "+PONG"
        assert raw.call_raw("HELLO").startswith(b"*3\r\n:1\r\n")  # Disque's, once authenticated


def test_redis_py_with_password(auth_node: NodeProcess) -> None:
    for kind in KINDS:
        # RESP3: `HELLO 3 AUTH default s3cret`; RESP2: `AUTH s3cret` (Disque's AUTH)
        with make_client(auth_node, kind, password="s3cret") as client:
            job_id = client.execute_command("ADDJOB", "q", "x", "0")
            assert client.execute_command("GETJOB", "FROM", "q") == [[b"q", job_id, b"x"]]
            assert client.execute_command("ACKJOB", job_id) == 1
        with make_client(auth_node, kind, username="default", password="s3cret") as client:
            assert client.ping() is True
    refused = [
        ({"password": "wrong"}, "invalid username-password"),
        ({"username": "bob", "password": "s3cret"}, "invalid username-password"),
        ({}, "HELLO must be called"),
    ]
    for kind in ("resp3", "resp3-python-parser"):
        for options, message in refused:
            client = make_client(auth_node, kind, **options)
            with client, pytest.raises(redis.AuthenticationError, match=message):
                client.ping()


# -- CLIENT -----------------------------------------------------------------------------------
_LINE_RE = re.compile(
    r"id=(?P<id>\d+) addr=127\.0\.0\.1:(?P<port>\d+) laddr=127\.0\.0\.1:(?P<lport>\d+) "
    r"fd=(?P<fd>\d+) name=(?P<name>\S*) age=(?P<age>\d+) idle=(?P<idle>\d+) "
    r"flags=(?P<flags>[A-Za-z]+) db=0 sub=0 psub=0 ssub=0 multi=-1 watch=0 user=default "
    r"redir=-1 resp=(?P<resp>[23]) lib-name=(?P<lib_name>\S*) lib-ver=(?P<lib_ver>\S*)\Z"
)


def _lines(reply: bytes) -> list[re.Match[str]]:
    text = reply.decode()
    assert text.endswith("\n") or text == ""
    matches = [_LINE_RE.match(line) for line in text.splitlines()]
    assert all(matches), text
    return matches  # type: ignore[return-value]


def test_client_info_list_and_setinfo(node: NodeProcess, r: redis.Redis) -> None:
    with Raw3(node.port) as raw, Raw3(node.port) as other:
        my_id = int(raw.line("CLIENT", "ID")[1:])
        other_id = int(other.line("CLIENT", "ID")[1:])
        assert raw.line("CLIENT", "SETINFO", "LIB-NAME", "mylib") == "+OK"
        assert raw.line("CLIENT", "setinfo", "lib-ver", "1.2.3") == "+OK"
        assert raw.line("CLIENT", "SETNAME", "me") == "+OK"
        other.call_raw("HELLO", "3")
        reply = raw.call_raw("CLIENT", "INFO")
        (mine,) = _lines(reply.split(b"\r\n", 1)[1][: -len(b"\r\n")])
        assert int(mine["id"]) == my_id
        assert (mine["name"], mine["lib_name"], mine["lib_ver"]) == ("me", "mylib", "1.2.3")
        assert (mine["flags"], mine["resp"], int(mine["lport"])) == ("N", "2", node.port)
        assert int(mine["port"]) == raw.sock.getsockname()[1]
        assert int(mine["fd"]) > 2
        everyone = {int(m["id"]): m for m in _lines(r.execute_command("CLIENT", "LIST"))}
        assert {my_id, other_id} <= set(everyone)
        assert everyone[other_id]["resp"] == "3"
        assert r.execute_command("CLIENT", "LIST", "TYPE", "normal").count(b"\n") == len(everyone)
        assert r.execute_command("CLIENT", "LIST", "TYPE", "replica") == b""
        by_id = _lines(r.execute_command("CLIENT", "LIST", "ID", other_id, my_id, 999999))
        assert [int(m["id"]) for m in by_id] == [other_id, my_id]
        # RESP3: verbatim strings, same text
        listed = other.call_raw("CLIENT", "LIST", "ID", my_id)
        assert listed.startswith(b"=") and b"\r\ntxt:id=%d " % my_id in listed
        # an empty value removes the attribute
        assert raw.line("CLIENT", "SETINFO", "lib-ver", "") == "+OK"
        assert "lib-ver=\n" in r.execute_command("CLIENT", "LIST", "ID", my_id).decode()


def test_client_blocked_flag(node: NodeProcess, r: redis.Redis) -> None:
    with Raw3(node.port) as blocked:
        blocked_id = int(blocked.line("CLIENT", "ID")[1:])
        blocked.send_command("GETJOB", "FROM", "nothing-here")

        def flags() -> str:
            (line,) = _lines(r.execute_command("CLIENT", "LIST", "ID", blocked_id))
            return line["flags"]

        wait_until(lambda: flags() == "b")
        assert r.execute_command("CLIENT", "KILL", "ID", blocked_id) == 1
        assert blocked.is_closed_by_peer()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("CLIENT",), "ERR wrong number of arguments for 'client' command"),
        (("CLIENT", "FOO"), UNKNOWN_SUB.format("FOO")),
        (("CLIENT", "MAINT_NOTIFICATIONS", "ON"), UNKNOWN_SUB.format("MAINT_NOTIFICATIONS")),
        (("CLIENT", "setname"), sub_arity("setname")),
        (("CLIENT", "SETNAME", "a", "b"), sub_arity("setname")),
        (("CLIENT", "GETNAME", "x"), sub_arity("getname")),
        (("CLIENT", "ID", "x"), sub_arity("id")),
        (("CLIENT", "INFO", "x"), sub_arity("info")),
        (("CLIENT", "KILL"), sub_arity("kill")),
        (("CLIENT", "SETINFO", "lib-name"), sub_arity("setinfo")),
        (("CLIENT", "HELP", "x"), sub_arity("help")),
        (("CLIENT", "SETNAME", "a b"), BAD_NAME),
        (("CLIENT", "SETINFO", "lib-nom", "x"), "ERR Unrecognized option 'lib-nom'"),
        (("CLIENT", "SETINFO", "LIB-NAME", "a b"), attr_error("LIB-NAME")),
        (("CLIENT", "SETINFO", "lib-ver", "1\n"), attr_error("lib-ver")),
        (("CLIENT", "LIST", "foo"), SYNTAX),
        (("CLIENT", "LIST", "ID"), SYNTAX),
        (("CLIENT", "LIST", "TYPE", "normal", "ID", "1"), SYNTAX),
        (("CLIENT", "LIST", "TYPE", "foo"), "ERR Unknown client type 'foo'"),
        (("CLIENT", "LIST", "ID", "1", "abc"), "ERR Invalid client ID"),
        (("CLIENT", "KILL", "127.0.0.1:1"), "ERR No such client"),
        (("CLIENT", "KILL", "ID", "0"), "ERR client-id should be greater than 0"),
        (("CLIENT", "KILL", "ID", "-5"), "ERR client-id should be greater than 0"),
        (("CLIENT", "KILL", "ID", "abc"), "ERR client-id should be greater than 0"),
        (("CLIENT", "KILL", "ID", "99999", "extra"), SYNTAX),
        (("CLIENT", "KILL", "FOO", "bar"), SYNTAX),
        (("CLIENT", "KILL", "ADDR", "1.1.1.1:1", "SKIPME", "maybe"), SYNTAX),
        (("CLIENT", "KILL", "TYPE", "foo"), "ERR Unknown client type 'foo'"),
        (("CLIENT", "KILL", "USER", "bob"), "ERR No such user 'bob'"),
        (("CLIENT", "KILL", "MAXAGE", "0"), "ERR maxage should be greater than 0"),
        (("CLIENT", "KILL", "MAXAGE", "x"), "ERR maxage is not an integer or out of range"),
    ],
)  # fmt: skip
def test_client_errors(
    node: NodeProcess, r: redis.Redis, argv: tuple[str, ...], expected: str
) -> None:
    with Raw3(node.port) as raw:
        assert raw.line(*argv) == f"-{expected}"
        assert raw.line("PING") == "+PONG"


def test_client_help(r: redis.Redis) -> None:
    lines = r.execute_command("CLIENT", "HELP")
    assert lines[0] == b"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert lines[-2:] == [b"HELP", b"    Print this help."]
    for name in (b"GETNAME", b"ID", b"INFO", b"KILL <ip:port>", b"SETNAME <name>"):
        assert name in lines


def test_client_kill_forms(node: NodeProcess, r: redis.Redis) -> None:
    with Raw3(node.port) as a, Raw3(node.port) as b, Raw3(node.port) as c:
        ids = {
            name: int(raw.line("CLIENT", "ID")[1:]) for name, raw in (("a", a), ("b", b), ("c", c))
        }
        addr_b = f"127.0.0.1:{b.sock.getsockname()[1]}"
        # the old form: +OK
        assert a.line("CLIENT", "KILL", addr_b) == "+OK"
        assert b.is_closed_by_peer()
        assert a.line("CLIENT", "KILL", addr_b) == "-ERR No such client"
        # the filter form: a count
        assert a.line("CLIENT", "KILL", "ADDR", addr_b) == ":0"
        assert a.line("CLIENT", "KILL", "ID", ids["c"], "USER", "default", "TYPE", "normal") == ":1"
        assert c.is_closed_by_peer()
        assert a.line("CLIENT", "KILL", "ID", ids["c"]) == ":0"
        assert a.line("CLIENT", "KILL", "MAXAGE", "3600") == ":0"  # nobody is that old
        # SKIPME yes (the default) spares the caller...
        assert a.line("CLIENT", "KILL", "ID", ids["a"]) == ":0"
        assert a.line("CLIENT", "KILL", "ID", ids["a"], "SKIPME", "yes") == ":0"
        # ...SKIPME no does not: the reply is sent, then the connection closed
        assert a.line("CLIENT", "KILL", "ID", ids["a"], "SKIPME", "no") == ":1"
        assert a.is_closed_by_peer()
    with Raw3(node.port) as d:
        # the old form may kill the caller itself
        assert d.line("CLIENT", "KILL", f"127.0.0.1:{d.sock.getsockname()[1]}") == "+OK"
        assert d.is_closed_by_peer()
    assert r.ping()


def test_client_kill_laddr_and_redis_py_helpers(fresh_node: NodeProcess) -> None:
    with (
        make_client(fresh_node, "resp3") as me,
        Raw3(fresh_node.port) as a,
        Raw3(fresh_node.port) as b,
    ):
        assert me.client_id() == int(me.client_info()["id"])
        assert len(me.client_list()) == 3
        laddr = f"127.0.0.1:{fresh_node.port}"
        assert me.client_kill_filter(laddr=laddr) == 2  # skipme: every other connection
        assert a.is_closed_by_peer() and b.is_closed_by_peer()
        wait_until(lambda: len(me.client_list()) == 1)
        assert me.client_kill_filter(laddr="127.0.0.1:1") == 0
        my_id = me.client_id()
        assert me.execute_command("CLIENT", "KILL", "LADDR", laddr, "SKIPME", "no") == 1
        # redis-py reconnects on its own: a new connection, a new ID. The node closes the
        # killed connection just after the reply, so a command sent in that moment may
        # meet the close; the next one goes out on a new connection.
        new_id = None
        for _ in range(3):
            try:
                new_id = me.client_id()
                break
            except redis.ConnectionError:
                continue
        assert new_id is not None and new_id != my_id


def test_client_setinfo_from_redis_py_over_a_raw_socket(node: NodeProcess, r: redis.Redis) -> None:
    # What redis-py 8 sends after HELLO 3, in one pipelined write: every reply is +OK.
    with Raw3(node.port) as raw:
        raw.send_command("HELLO", "3")
        raw.send_command("CLIENT", "SETINFO", "LIB-NAME", "redis-py")
        raw.send_command("CLIENT", "SETINFO", "LIB-VER", redis.__version__)
        assert raw.read_raw().startswith(b"%7\r\n")
        assert raw.read_raw() == b"+OK\r\n"
        assert raw.read_raw() == b"+OK\r\n"


# -- the encoder ------------------------------------------------------------------------------
def test_encode_resp3_and_resp2() -> None:
    value = [b"a", 1, None, NULL_ARRAY, Status(b"OK"), [None], 1.5, True]
    assert (
        encode(value)
        == b"*8\r\n$1\r\na\r\n:1\r\n$-1\r\n*-1\r\n+OK\r\n*1\r\n$-1\r\n$3\r\n1.5\r\n:1\r\n"
    )
    assert encode(value, resp3=True) == (
        b"*8\r\n$1\r\na\r\n:1\r\n_\r\n_\r\n+OK\r\n*1\r\n_\r\n$3\r\n1.5\r\n:1\r\n"
    )
    pairs = Map({b"k": None, b"n": [1]})
    assert encode(pairs) == b"*4\r\n$1\r\nk\r\n$-1\r\n$1\r\nn\r\n*1\r\n:1\r\n"
    assert encode(pairs, resp3=True) == b"%2\r\n$1\r\nk\r\n_\r\n$1\r\nn\r\n*1\r\n:1\r\n"
    assert encode({b"k": b"v"}, True) == b"%1\r\n$1\r\nk\r\n$1\r\nv\r\n"  # any dict
    assert encode(Verbatim(b"x\r\n")) == b"$3\r\nx\r\n\r\n"
    assert encode(Verbatim(b"x\r\n"), True) == b"=7\r\ntxt:x\r\n\r\n"
    assert verbatim(b"", True) == b"=4\r\ntxt:\r\n" and verbatim(b"", False) == b"$0\r\n\r\n"
    assert (null_bulk(True), null_bulk(False)) == (b"_\r\n", b"$-1\r\n")
    assert (null_array(True), null_array(False)) == (b"_\r\n", b"*-1\r\n")
