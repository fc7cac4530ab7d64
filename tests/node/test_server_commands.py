"""PING, ECHO, TIME, INFO, HELLO, COMMAND, CLUSTER, DEBUG, CONFIG, AUTH, QUIT, SHUTDOWN."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.node.helpers import (
    SYNTAX,
    RawClient,
    arity_error,
    debug_jobs,
    error_of,
    info,
    info_text,
    strict_client,
    wait_until,
)
from tests.servers import NodeProcess, running_node

HEX40 = re.compile(rb"^[0-9a-f]{40}$")
DEFAULT_SECTIONS = [
    "Server", "Clients", "Memory", "Jobs", "Queues", "Persistence", "Eventlog", "Stats", "CPU",
]  # fmt: skip


def add(r: redis.Redis, queue: str = "q") -> bytes:
    return r.execute_command("ADDJOB", queue, "body", "0")


# -- generic --------------------------------------------------------------------------------


# redis-py post-processes some replies (PING -> True, TIME -> tuple, COMMAND -> dict); a
# command name given as bytes skips those callbacks, so the node's own reply is checked.


def test_unknown_command_keeps_the_name_as_sent(r: redis.Redis) -> None:
    assert error_of(r, "FooBar", "x") == "ERR unknown command 'FooBar'"
    assert error_of(r, "getjobs") == "ERR unknown command 'getjobs'"


def test_command_names_are_case_insensitive(r: redis.Redis) -> None:
    assert r.execute_command(b"pInG") == b"PONG"
    assert r.execute_command("qlen", "q") == 0
    assert error_of(r, "QsTaT") == arity_error("qstat")


# -- PING / ECHO / TIME ---------------------------------------------------------------------


def test_ping(raw: RawClient) -> None:
    assert raw.call_raw("PING") == b"+PONG\r\n"
    assert raw.call_raw("PING", "hello there") == b"$11\r\nhello there\r\n"
    assert raw.call_raw("PING", "") == b"$0\r\n\r\n"


def test_ping_arity(r: redis.Redis) -> None:
    assert error_of(r, "PING", "a", "b") == arity_error("ping")


def test_echo(raw: RawClient, r: redis.Redis) -> None:
    assert raw.call_raw("ECHO", "hi") == b"$2\r\nhi\r\n"
    assert r.execute_command("ECHO", b"\x00\xff") == b"\x00\xff"
    assert error_of(r, "ECHO") == arity_error("echo")
    assert error_of(r, "ECHO", "a", "b") == arity_error("echo")


def test_time(raw: RawClient, r: redis.Redis) -> None:
    reply = raw.call_raw("TIME")
    assert re.match(rb"^\*2\r\n\$\d+\r\n\d+\r\n\$\d+\r\n\d+\r\n$", reply)
    seconds, micros = r.execute_command(b"TIME")
    assert isinstance(seconds, bytes) and isinstance(micros, bytes)
    assert abs(int(seconds) + int(micros) / 1e6 - time.time()) < 5
    assert 0 <= int(micros) < 1_000_000
    assert error_of(r, "TIME", "x") == arity_error("time")


# -- INFO -----------------------------------------------------------------------------------


def test_info_default_sections_in_order(r: redis.Redis) -> None:
    text = info_text(r).decode()
    headers = re.findall(r"^# (\w+)\r$", text, flags=re.M)
    assert headers == DEFAULT_SECTIONS
    assert "\r\n\r\n# Clients\r\n" in text
    assert text.endswith("\r\n")
    assert all(line.endswith("\r") for line in text.split("\n")[:-1])


def test_info_fields(node: NodeProcess, r: redis.Redis) -> None:
    fields = info(r)
    for name in (
        "disque_version", "process_id", "run_id", "tcp_port", "uptime_in_seconds",
        "uptime_in_days", "hz", "connected_clients", "blocked_clients", "used_memory",
        "used_memory_human", "used_memory_rss", "used_memory_peak", "mem_allocator",
        "registered_jobs", "registered_queues", "loading", "aof_enabled",
        "aof_state", "total_connections_received", "total_commands_processed",
        "instantaneous_ops_per_sec", "rejected_connections", "used_cpu_sys", "used_cpu_user",
    ):  # fmt: skip
        assert name in fields, name
    assert fields["tcp_port"] == str(node.port)
    assert fields["process_id"] == str(node.process.pid)
    assert fields["hz"] == "10"
    assert fields["aof_enabled"] == "0"
    assert int(fields["connected_clients"]) >= 1
    assert len(fields["run_id"]) == 40


def test_info_counts_jobs_and_queues(r: redis.Redis) -> None:
    assert info(r, "jobs")["registered_jobs"] == "0"
    assert info(r, "queues")["registered_queues"] == "0"
    for queue in ("a", "a", "b"):
        add(r, queue)
    assert info(r, "jobs")["registered_jobs"] == "3"
    assert info(r, "queues")["registered_queues"] == "2"


def test_info_single_section(r: redis.Redis) -> None:
    text = info_text(r, "jobs").decode()
    assert text.startswith("# Jobs\r\nregistered_jobs:")
    assert "# Server" not in text
    assert info_text(r, "JOBS") == info_text(r, "jobs")


def test_info_all_adds_commandstats(r: redis.Redis) -> None:
    r.execute_command("PING")
    text = info_text(r, "all").decode()
    headers = re.findall(r"^# (\w+)\r$", text, flags=re.M)
    assert headers == [*DEFAULT_SECTIONS, "Commandstats"]
    assert re.search(r"^cmdstat_ping:calls=\d+,usec=\d+,usec_per_call=[\d.]+\r$", text, re.M)


def test_info_unknown_section_is_empty_bulk(raw: RawClient) -> None:
    assert raw.call_raw("INFO", "nosuchsection") == b"$0\r\n\r\n"


def test_info_two_arguments(r: redis.Redis) -> None:
    assert error_of(r, "INFO", "server", "jobs") == SYNTAX


# -- HELLO ----------------------------------------------------------------------------------


def test_hello(raw: RawClient, r: redis.Redis, node: NodeProcess) -> None:
    reply = r.execute_command("HELLO")
    my_id = r.execute_command("CLUSTER", "MYID")
    assert reply[0] == 1
    assert reply[1] == my_id
    nodes = reply[2:]
    assert len(nodes) == 1
    assert nodes[0] == [my_id, b"", str(node.port).encode(), b"1"]
    port = str(node.port).encode()
    assert raw.call_raw("HELLO") == (
        b"*3\r\n:1\r\n$40\r\n%s\r\n*4\r\n$40\r\n%s\r\n$0\r\n\r\n$%d\r\n%s\r\n$1\r\n1\r\n"
        % (my_id, my_id, len(port), port)
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("HELLO", "4"), "NOPROTO unsupported protocol version"),
        (("HELLO", "x"), "ERR Protocol version is not an integer or out of range"),
    ],
)
def test_hello_with_a_bad_protocol_version(
    r: redis.Redis, argv: tuple[str, ...], message: str
) -> None:
    # HELLO <protover> is Redis 6's handshake (tests/node/test_resp3.py); bare HELLO is
    # Disque's node list, above.
    assert error_of(r, *argv) == message


# -- COMMAND --------------------------------------------------------------------------------


def test_command(r: redis.Redis) -> None:
    table = {entry[0]: entry for entry in r.execute_command(b"COMMAND")}
    expected_arity = {
        b"addjob": -4, b"getjob": -2, b"ackjob": -1, b"fastack": -1, b"deljob": -1,
        b"show": 2, b"qlen": 2, b"qpeek": 3, b"qstat": 2, b"qscan": -1, b"jscan": -1,
        b"enqueue": -1, b"nack": -1, b"dequeue": -1, b"working": 2, b"pause": -3,
        b"auth": 2, b"ping": -1, b"info": -1, b"hello": -1, b"time": 1, b"config": -2,
        b"cluster": -2, b"debug": -2, b"shutdown": -1, b"command": 0,
    }  # fmt: skip
    for name, arity in expected_arity.items():
        assert name in table, name
        assert table[name][1] == arity, name
    assert b"denyoom" in table[b"addjob"][2]
    assert b"write" in table[b"addjob"][2]
    assert r.execute_command(b"COMMAND", "COUNT") == len(table)
    info_reply = r.execute_command(b"COMMAND", "INFO", "getjob", "nosuch")
    assert info_reply[0][0] == b"getjob" and info_reply[1] is None


# -- CLUSTER --------------------------------------------------------------------------------


def test_cluster_myid(raw: RawClient, r: redis.Redis) -> None:
    my_id = r.execute_command("CLUSTER", "MYID")
    assert HEX40.match(my_id)
    assert raw.call_raw("CLUSTER", "MYID") == b"$40\r\n%s\r\n" % my_id


def test_cluster_nodes(r: redis.Redis, node: NodeProcess) -> None:
    my_id = r.execute_command("CLUSTER", "MYID").decode()
    text = r.execute_command("CLUSTER", "NODES")
    assert text == f"{my_id} :{node.port} myself 0 0 connected\n".encode()


def test_cluster_info(r: redis.Redis) -> None:
    text = r.execute_command("CLUSTER", "INFO").decode()
    fields = dict(line.split(":", 1) for line in text.split("\r\n") if line)
    assert fields["cluster_state"] == "ok"
    assert fields["cluster_known_nodes"] == "1"
    assert fields["cluster_reachable_nodes"] == "0"
    assert fields["cluster_size"] == "1"
    assert "cluster_stats_messages_sent" in fields
    assert "cluster_stats_messages_received" in fields


def test_cluster_leaving(raw: RawClient, r: redis.Redis) -> None:
    assert raw.call_raw("CLUSTER", "LEAVING") == b"+no\r\n"
    try:
        assert raw.call_raw("CLUSTER", "LEAVING", "yes") == b"+OK\r\n"
        assert raw.call_raw("CLUSTER", "LEAVING") == b"+yes\r\n"
        assert b"myself,leaving" in r.execute_command("CLUSTER", "NODES")
    finally:
        assert r.execute_command("CLUSTER", "LEAVING", "NO") == b"OK"
    assert r.execute_command("CLUSTER", "LEAVING") == b"no"
    expected = "ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'"
    assert error_of(r, "CLUSTER", "LEAVING", "maybe") == expected
    assert r.execute_command("CLUSTER", "LEAVING") == b"no"


def test_cluster_forget(r: redis.Redis) -> None:
    my_id = r.execute_command("CLUSTER", "MYID")
    expected = "ERR I tried hard but I can't forget myself..."
    assert error_of(r, "CLUSTER", "FORGET", my_id) == expected
    other = "0123456789abcdef0123456789abcdef01234567"
    assert error_of(r, "CLUSTER", "FORGET", other) == f"ERR Unknown node {other}"


def test_cluster_saveconfig(r: redis.Redis) -> None:
    assert r.execute_command("CLUSTER", "SAVECONFIG") == b"OK"


@pytest.mark.parametrize("mode", [(), ("SOFT",), ("hard",)])
def test_cluster_reset_flushes(r: redis.Redis, mode: tuple[str, ...]) -> None:
    add(r)
    assert r.execute_command("CLUSTER", "RESET", *mode) == b"OK"
    assert debug_jobs(r) == [0, 0]


def test_cluster_reset_hard_picks_a_new_node_id(r: redis.Redis) -> None:
    before = r.execute_command("CLUSTER", "MYID")
    assert r.execute_command("CLUSTER", "RESET", "HARD") == b"OK"
    after = r.execute_command("CLUSTER", "MYID")
    assert HEX40.match(after)
    assert after != before
    assert r.execute_command("ADDJOB", "q", "x", "0")[2:10] == after[:8]


def test_cluster_reset_soft_keeps_the_node_id(r: redis.Redis) -> None:
    before = r.execute_command("CLUSTER", "MYID")
    assert r.execute_command("CLUSTER", "RESET", "SOFT") == b"OK"
    assert r.execute_command("CLUSTER", "MYID") == before


def test_cluster_reset_bad_mode(r: redis.Redis) -> None:
    add(r)
    assert error_of(r, "CLUSTER", "RESET", "bogus") == SYNTAX
    assert debug_jobs(r) == [1, 1]


@pytest.mark.parametrize(
    "argv",
    [
        ("BOGUS",),
        ("MYID", "extra"),
        ("NODES", "x"),
        ("INFO", "x"),
        ("FORGET",),
        ("MEET",),
        ("MEET", "127.0.0.1"),
        ("LEAVING", "yes", "no"),
        ("RESET", "soft", "x"),
    ],
)
def test_cluster_wrong_subcommand(r: redis.Redis, argv: tuple[str, ...]) -> None:
    expected = "ERR Wrong CLUSTER subcommand or number of arguments"
    assert error_of(r, "CLUSTER", *argv) == expected


def test_cluster_arity(r: redis.Redis) -> None:
    assert error_of(r, "CLUSTER") == arity_error("cluster")


# -- DEBUG ----------------------------------------------------------------------------------


def test_debug_flushall(raw: RawClient, r: redis.Redis) -> None:
    job_id = add(r)
    r.execute_command("PAUSE", "paused", "all")
    assert debug_jobs(r) == [1, 2]
    assert raw.call_raw("DEBUG", "FLUSHALL") == b"+OK\r\n"
    assert debug_jobs(r) == [0, 0]
    assert r.execute_command("SHOW", job_id) is None
    assert r.execute_command("QSTAT", "paused") is None


def test_debug_jobs(raw: RawClient, r: redis.Redis) -> None:
    assert raw.call_raw("DEBUG", "JOBS") == b"*2\r\n:0\r\n:0\r\n"
    add(r, "a")
    add(r, "b")
    add(r, "b")
    r.execute_command("GETJOB", "NOHANG", "FROM", "c")
    assert debug_jobs(r) == [3, 3]


def test_debug_sleep_and_error(r: redis.Redis) -> None:
    assert r.execute_command("DEBUG", "SLEEP", "0") == b"OK"
    assert r.execute_command("DEBUG", "SLEEP", "0.01") == b"OK"
    assert error_of(r, "DEBUG", "SLEEP", "abc") == "ERR value is not a valid float"
    assert error_of(r, "DEBUG", "ERROR", "CUSTOM my message") == "CUSTOM my message"


@pytest.mark.parametrize("sub", ["bogus", "FLUSHALL extra", "JOBS extra"])
def test_debug_unknown_subcommand(r: redis.Redis, sub: str) -> None:
    words = sub.split()
    expected = f"ERR Unknown DEBUG subcommand or wrong number of arguments for '{words[0]}'"
    assert error_of(r, "DEBUG", *words) == expected


def test_debug_arity(r: redis.Redis) -> None:
    assert error_of(r, "DEBUG") == arity_error("debug")


# -- CONFIG ---------------------------------------------------------------------------------


@pytest.fixture
def restore_config(r: redis.Redis) -> Iterator[None]:
    names = ["maxclients", "loglevel", "hz", "maxmemory", "timeout", "maxmemory-policy"]
    saved = {name: r.execute_command("CONFIG", "GET", name)[1] for name in names}
    yield
    for name, value in saved.items():
        r.execute_command("CONFIG", "SET", name, value)


def test_config_get(r: redis.Redis) -> None:
    assert r.execute_command("CONFIG", "GET", "maxmemory") == [b"maxmemory", b"1073741824"]
    assert r.execute_command("CONFIG", "GET", "maxmemory-policy") == [
        b"maxmemory-policy",
        b"acks",
    ]
    assert r.execute_command("CONFIG", "GET", "nosuch") == []
    pairs = r.execute_command("CONFIG", "GET", "max*")
    names = pairs[::2]
    assert {b"maxmemory", b"maxclients", b"maxmemory-policy"} <= set(names)
    assert all(name.startswith(b"max") for name in names)
    assert len(r.execute_command("CONFIG", "GET", "*")) > 40
    assert r.execute_command("CONFIG", "GET", "MAXCLIENTS") == [b"maxclients", b"10000"]


def test_config_defaults(r: redis.Redis) -> None:
    defaults = {
        "hz": b"10",
        "appendonly": b"no",
        "appendfilename": b"disque.aof",
        "appendfsync": b"everysec",
        "cluster-node-timeout": b"15000",
        "cluster-config-file": b"nodes.conf",
        "tcp-backlog": b"511",
        "aof-enqueue-jobs-once": b"no",
        "loglevel": b"notice",
    }
    for name, value in defaults.items():
        assert r.execute_command("CONFIG", "GET", name) == [name.encode(), value], name


SETTABLE = {
    "requirepass": "",
    "maxclients": "10000",
    "appendonly": "no",
    "dir": ".",
    "client-output-buffer-limit": "normal 0 0 0",
    "aof-rewrite-incremental-fsync": "yes",
    "aof-load-truncated": "yes",
    "activerehashing": "yes",
    "tcp-keepalive": "0",
    "aof-enqueue-jobs-once": "no",
    "maxmemory-samples": "5",
    "timeout": "0",
    "auto-aof-rewrite-percentage": "100",
    "auto-aof-rewrite-min-size": "64mb",
    "slowlog-log-slower-than": "10000",
    "slowlog-max-len": "128",
    "latency-monitor-threshold": "0",
    "cluster-node-timeout": "15000",
    "hz": "10",
    "watchdog-period": "0",
    "maxmemory": "1gb",
    "loglevel": "notice",
    "maxmemory-policy": "acks",
    "appendfsync": "everysec",
}


@pytest.mark.parametrize(("name", "value"), SETTABLE.items())
def test_config_set_every_settable_directive(r: redis.Redis, name: str, value: str) -> None:
    before = r.execute_command("CONFIG", "GET", name)
    assert len(before) == 2
    try:
        assert r.execute_command("CONFIG", "SET", name, value) == b"OK"
    finally:
        r.execute_command("CONFIG", "SET", name, before[1])


def test_config_set(r: redis.Redis, restore_config: None) -> None:
    assert r.execute_command("CONFIG", "SET", "maxclients", "500") == b"OK"
    assert r.execute_command("CONFIG", "GET", "maxclients") == [b"maxclients", b"500"]
    assert r.execute_command("CONFIG", "SET", "loglevel", "WARNING") == b"OK"
    assert r.execute_command("CONFIG", "GET", "loglevel") == [b"loglevel", b"warning"]
    assert r.execute_command("CONFIG", "SET", "maxmemory", "2gb") == b"OK"
    assert r.execute_command("CONFIG", "GET", "maxmemory") == [b"maxmemory", b"2147483648"]
    assert r.execute_command("CONFIG", "SET", "HZ", "20") == b"OK"
    assert info(r)["hz"] == "20"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("maxclients", "abc"),
        ("maxclients", "0: argument must be at least 1"),
        ("maxclients", "1.5"),
        ("hz", "0: argument must be between 1 and 500 inclusive"),
        ("hz", "99999999999999999999x"),
        ("maxmemory", "lots"),
        ("maxmemory", "-1"),
        ("loglevel", "loud"),
        ("maxmemory-policy", "allkeys-lru"),
        ("appendonly", "maybe"),
        ("timeout", "-1: argument must be at least 0"),
        ("tcp-keepalive", "32768: argument must be between 0 and 32767 inclusive"),
        ("tcp-keepalive", "2147483648: argument must be between 0 and 32767 inclusive"),
        ("dir", "/nonexistent/directory"),
    ],
)
def test_config_set_invalid_value(
    r: redis.Redis, restore_config: None, name: str, value: str
) -> None:
    # "value: reason" for a number out of range: the error names the range.
    value, _, reason = value.partition(": ")
    before = r.execute_command("CONFIG", "GET", name)
    expected = f"ERR Invalid argument '{value}' for CONFIG SET '{name}'"
    expected += f": {reason}" if reason else ""
    assert error_of(r, "CONFIG", "SET", name, value) == expected
    assert r.execute_command("CONFIG", "GET", name) == before


@pytest.mark.parametrize("name", ["port", "bind", "nosuch", "daemonize", "cluster-config-file"])
def test_config_set_unsupported(r: redis.Redis, name: str) -> None:
    assert error_of(r, "CONFIG", "SET", name, "1") == f"ERR Unsupported CONFIG parameter: {name}"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("bogus",), "ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE"),
        (("GET",), "ERR Wrong number of arguments for CONFIG GET"),
        (("GET", "a", "b"), "ERR Wrong number of arguments for CONFIG GET"),
        (("SET", "hz"), "ERR Wrong number of arguments for CONFIG SET"),
        (("SET", "hz", "10", "x"), "ERR Wrong number of arguments for CONFIG SET"),
        (("RESETSTAT", "x"), "ERR Wrong number of arguments for CONFIG RESETSTAT"),
        (("REWRITE", "x"), "ERR Wrong number of arguments for CONFIG REWRITE"),
    ],
)
def test_config_errors(r: redis.Redis, argv: tuple[str, ...], expected: str) -> None:
    assert error_of(r, "CONFIG", *argv) == expected


def test_config_arity(r: redis.Redis) -> None:
    assert error_of(r, "CONFIG") == arity_error("config")


def test_config_rewrite_without_a_file(r: redis.Redis) -> None:
    assert error_of(r, "CONFIG", "REWRITE") == "ERR The server is running without a config file"


def test_config_resetstat(r: redis.Redis) -> None:
    for _ in range(5):
        r.execute_command("PING")
    assert int(info(r, "stats")["total_commands_processed"]) >= 5
    assert r.execute_command("CONFIG", "RESETSTAT") == b"OK"
    assert int(info(r, "stats")["total_commands_processed"]) <= 2
    assert "cmdstat_ping" not in info(r, "commandstats")


# -- AUTH -----------------------------------------------------------------------------------


def test_auth_without_password_set(r: redis.Redis) -> None:
    assert error_of(r, "AUTH", "x") == "ERR Client sent AUTH, but no password is set"
    assert error_of(r, "AUTH") == arity_error("auth")
    assert r.execute_command(b"PING") == b"PONG"


@pytest.fixture(scope="module")
def auth_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with running_node(tmp_path_factory.mktemp("auth"), "--requirepass", "s3cret") as process:
        yield process


def test_requirepass(auth_node: NodeProcess) -> None:
    with RawClient(auth_node.port) as client:
        for argv in (("PING",), ("ADDJOB", "q", "x", "0"), ("INFO",), ("HELLO",)):
            assert client.call_raw(*argv) == b"-NOAUTH Authentication required.\r\n"
        assert client.call_raw("AUTH", "wrong") == b"-ERR invalid password\r\n"
        assert client.call_raw("PING") == b"-NOAUTH Authentication required.\r\n"
        assert client.call_raw("AUTH", "s3cret") == b"+OK\r\n"
        assert client.call_raw("PING") == b"+PONG\r\n"
        # a wrong password afterwards logs the connection out again
        assert client.call_raw("AUTH", "nope") == b"-ERR invalid password\r\n"
        assert client.call_raw("PING") == b"-NOAUTH Authentication required.\r\n"
    authed = auth_node.client(password="s3cret")
    try:
        job_id = authed.execute_command("ADDJOB", "q", "x", "0")
        assert authed.execute_command("GETJOB", "FROM", "q") == [[b"q", job_id, b"x"]]
    finally:
        authed.close()


def test_requirepass_errors_before_auth(auth_node: NodeProcess) -> None:
    with RawClient(auth_node.port) as client:
        # Unknown commands and arity get NOAUTH too (issue 9): nothing tells which
        # commands exist. AUTH's own arity is still checked.
        assert client.call_raw("NOSUCH") == b"-NOAUTH Authentication required.\r\n"
        assert client.call_raw("QPEEK", "q") == b"-NOAUTH Authentication required.\r\n"
        assert client.call_raw("AUTH") == b"-ERR wrong number of arguments for 'auth' command\r\n"


def test_quit_works_before_auth(auth_node: NodeProcess) -> None:
    with RawClient(auth_node.port) as client:
        assert client.call_raw("QUIT") == b"+OK\r\n"
        assert client.is_closed_by_peer()


def test_config_set_requirepass_at_runtime(node: NodeProcess, r: redis.Redis) -> None:
    try:
        assert r.execute_command("CONFIG", "SET", "requirepass", "pw") == b"OK"
        # the connection that set it stays authenticated
        assert r.execute_command(b"PING") == b"PONG"
        with RawClient(node.port) as client:
            assert client.call_raw("PING") == b"-NOAUTH Authentication required.\r\n"
            assert client.call_raw("AUTH", "pw") == b"+OK\r\n"
            assert client.call_raw("PING") == b"+PONG\r\n"
    finally:
        r.execute_command("CONFIG", "SET", "requirepass", "")
    with RawClient(node.port) as client:
        assert client.call_raw("PING") == b"+PONG\r\n"


# -- CLIENT ---------------------------------------------------------------------------------


def test_client_setname_getname(r: redis.Redis) -> None:
    assert r.execute_command("CLIENT", "GETNAME") is None
    assert r.execute_command("CLIENT", "SETNAME", "worker-1") == b"OK"
    assert r.execute_command("CLIENT", "GETNAME") == b"worker-1"
    assert b"name=worker-1" in r.execute_command("CLIENT", "LIST")
    assert error_of(r, "CLIENT", "SETNAME", "has space") == (
        "ERR Client names cannot contain spaces, newlines or special characters."
    )


def test_client_kill_a_blocked_client(node: NodeProcess, r: redis.Redis) -> None:
    with RawClient(node.port) as blocked:
        blocked.send_command("CLIENT", "SETNAME", "sleeper")
        assert blocked.read_reply() == b"OK"
        blocked.send_command("GETJOB", "FROM", "q")
        wait_until(lambda: qstat_blocked(r) == 1)
        line = next(
            line
            for line in r.execute_command("CLIENT", "LIST").decode().splitlines()
            if "name=sleeper" in line
        )
        assert "flags=b" in line
        addr = line.split("addr=")[1].split()[0]
        assert r.execute_command("CLIENT", "KILL", addr) == b"OK"
        assert blocked.is_closed_by_peer()
    wait_until(lambda: qstat_blocked(r) == 0)
    assert info(r)["blocked_clients"] == "0"
    job_id = add(r)
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q")[0][1] == job_id
    assert error_of(r, "CLIENT", "KILL", "127.0.0.1:1") == "ERR No such client"


def qstat_blocked(r: redis.Redis) -> int:
    reply = r.execute_command("QSTAT", "q")
    return -1 if reply is None else reply[9]


def test_maxclients(node: NodeProcess, r: redis.Redis) -> None:
    # only `r` is connected once earlier tests' sockets are gone
    wait_until(lambda: info(r)["connected_clients"] == "1")
    connected = 1
    rejected = int(info(r, "stats")["rejected_connections"])
    assert r.execute_command("CONFIG", "SET", "maxclients", str(connected + 1)) == b"OK"
    try:
        with RawClient(node.port) as allowed:
            assert allowed.call_raw("PING") == b"+PONG\r\n"
            with RawClient(node.port) as refused:
                assert refused.read_raw() == b"-ERR max number of clients reached\r\n"
                assert refused.is_closed_by_peer()
            assert allowed.call_raw("PING") == b"+PONG\r\n"
    finally:
        r.execute_command("CONFIG", "SET", "maxclients", "10000")
    assert int(info(r, "stats")["rejected_connections"]) == rejected + 1
    with RawClient(node.port) as client:
        assert client.call_raw("PING") == b"+PONG\r\n"


def test_loadjob_is_for_the_aof_only(r: redis.Redis) -> None:
    expected = "ERR LOADJOB is a special command only processed from AOF"
    assert error_of(r, "LOADJOB", "anything") == expected
    assert error_of(r, "LOADJOB") == arity_error("loadjob")
    assert debug_jobs(r) == [0, 0]


# -- QUIT / SHUTDOWN ------------------------------------------------------------------------


def test_quit(node: NodeProcess, r: redis.Redis) -> None:
    add(r)
    with RawClient(node.port) as client:
        client.send(b"*1\r\n$4\r\nQUIT\r\n*1\r\n$4\r\nPING\r\n")
        assert client.read_raw() == b"+OK\r\n"
        assert client.is_closed_by_peer()
    assert r.execute_command(b"PING") == b"PONG"
    assert debug_jobs(r) == [1, 1]


def test_quit_answers_after_the_requests_before_it_in_the_same_read(node: NodeProcess) -> None:
    with RawClient(node.port) as client:
        client.send(b"PING x\r\nECHO y\r\nQUIT\r\nPING z\r\n")
        replies = [client.read_raw() for _ in range(3)]
        assert replies == [b"$1\r\nx\r\n", b"$1\r\ny\r\n", b"+OK\r\n"]
        assert client.buffer == b"" and client.is_closed_by_peer()  # PING z never ran


def test_quit_through_redis_py(node: NodeProcess) -> None:
    client = strict_client(node)
    try:
        assert client.execute_command(b"QUIT") == b"OK"
    finally:
        client.close()


def test_shutdown_arguments(r: redis.Redis) -> None:
    assert error_of(r, "SHUTDOWN", "bogus") == SYNTAX
    assert error_of(r, "SHUTDOWN", "a", "b") == SYNTAX
    assert r.execute_command(b"PING") == b"PONG"


def test_shutdown_exits_cleanly(tmp_path: Path) -> None:
    process = NodeProcess(tmp_path / "node")
    try:
        with RawClient(process.port) as client:
            client.send_command("SHUTDOWN")
            assert client.is_closed_by_peer(10)
        wait_until(lambda: not process.alive(), 10)
        assert process.process.returncode == 0
    finally:
        process.stop()
    assert "bye bye" in process.log_path.read_text()


def test_sigterm_exits_cleanly(tmp_path: Path) -> None:
    process = NodeProcess(tmp_path / "node")
    try:
        client = RawClient(process.port)
        client.send_command("GETJOB", "FROM", "q")  # a blocked client does not hold it up
        time.sleep(0.1)
        process.process.send_signal(signal.SIGTERM)
        assert process.process.wait(10) == 0
        assert client.is_closed_by_peer(5)
        client.close()
    finally:
        process.stop()
    assert "bye bye" in process.log_path.read_text()
