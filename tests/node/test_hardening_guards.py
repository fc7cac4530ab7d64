"""Issue 9 (hardening), defects 1 (config side), 7, 8 and 9: the node's guards.

- 1: `tcp-keepalive` has a range (0..32767, Linux's TCP_KEEPIDLE maximum); a new
  connection works after the largest value accepted.
- 7: no Python error text reaches a client: CONFIG SET rolls back on any failure and
  answers a precise error; DEBUG SLEEP validates its number.
- 8: CONFIG REWRITE escapes every value so that it reads back identically.
- 9: `enable-debug-command` / `enable-protected-configs` (Redis 7's model), paths kept
  inside the data directory, AUTH failures counted and cut off, NOAUTH before any
  command lookup, DEBUG RESOURCES.

Real node processes (tests/servers.py), except for the `local` decision (no test can
connect from a non-loopback address) and the config-file round trip, which hypothesis
drives through `Config` directly.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor.node.auth import (
    AUTH_MAX_FAILURES,
    TOO_MANY_AUTH_FAILURES,
    is_local_client,
    protected_action_allowed,
)
from conveyor.node.config import Config, ConfigError, quote
from conveyor.protocol.inline import split_args
from tests.node.helpers import RawClient, encode_command, error_of, info, strict_client
from tests.servers import NodeProcess, running_node

NOAUTH = b"-NOAUTH Authentication required.\r\n"
DEBUG_NOT_ALLOWED = (
    'ERR DEBUG command not allowed. If the enable-debug-command option is set to "local", '
    "you can run it from a local connection, otherwise you need to set this option in the "
    "configuration file, and then restart the server."
)


def protected(name: str) -> str:
    return (
        f"ERR CONFIG SET failed (possibly related to argument '{name}') - "
        "can't set protected config"
    )


OUTSIDE_DATA_DIR = (
    "ERR CONFIG SET failed (possibly related to argument 'event-log') - the path must stay "
    "inside the data directory (a relative path without '..'); set enable-protected-configs "
    "yes in the config file to allow any path"
)


def fatal_start(tmp_path: Path, *args: str) -> str:
    """stderr of a node that must refuse to start (exit status 1)."""
    command = [sys.executable, "-m", "conveyor.cli", "server"]
    command += ["--port", "0", "--dir", str(tmp_path / "data"), *args]
    result = subprocess.run(command, capture_output=True, timeout=30)
    assert result.returncode == 1, result
    return result.stderr.decode()


@pytest.fixture
def client(fresh_node: NodeProcess) -> Iterator[redis.Redis]:
    r = strict_client(fresh_node)
    yield r
    r.close()


# -- 1: tcp-keepalive has a range ---------------------------------------------------------


@pytest.mark.parametrize("value", ["32768", "40000", "2147483648", "99999999999999999999"])
def test_config_set_tcp_keepalive_out_of_range_is_refused(
    fresh_node: NodeProcess, client: redis.Redis, value: str
) -> None:
    assert error_of(client, "CONFIG", "SET", "tcp-keepalive", value) == (
        f"ERR Invalid argument '{value}' for CONFIG SET 'tcp-keepalive': "
        "argument must be between 0 and 32767 inclusive"
    )
    assert client.execute_command("CONFIG", "GET", "tcp-keepalive") == [b"tcp-keepalive", b"0"]
    with RawClient(fresh_node.port) as raw:  # new connections still work
        assert raw.call_raw("PING") == b"+PONG\r\n"


def test_new_connections_work_after_the_largest_tcp_keepalive(
    fresh_node: NodeProcess, client: redis.Redis
) -> None:
    assert client.execute_command("CONFIG", "SET", "tcp-keepalive", "32767") == b"OK"
    with RawClient(fresh_node.port) as raw:
        assert raw.call_raw("PING") == b"+PONG\r\n"
    # And from the command line.
    n2 = fresh_node.data_dir.parent / "n2"
    with running_node(n2, "--tcp-keepalive", "32767") as node, RawClient(node.port) as raw:
        assert raw.call_raw("PING") == b"+PONG\r\n"
        assert raw.call_raw("CONFIG", "GET", "tcp-keepalive") == (
            b"*2\r\n$13\r\ntcp-keepalive\r\n$5\r\n32767\r\n"
        )


def test_out_of_range_tcp_keepalive_stops_the_node_at_start(tmp_path: Path) -> None:
    stderr = fatal_start(tmp_path, "--tcp-keepalive", "40000")
    assert (
        ">>> --tcp-keepalive: Invalid argument for 'tcp-keepalive': 40000 "
        "(argument must be between 0 and 32767 inclusive)"
    ) in stderr


# -- 7: no Python error reaches a client -----------------------------------------------------


def test_config_set_event_log_with_a_nul_byte_is_refused_and_changes_nothing(
    client: redis.Redis,
) -> None:
    before = info(client, "eventlog")
    assert error_of(client, "CONFIG", "SET", "event-log", "\x00") == (
        "ERR Invalid argument '\\x00' for CONFIG SET 'event-log': a path cannot contain a NUL byte"
    )
    assert error_of(client, "CONFIG", "SET", "event-log", "ev\x00x") == (
        "ERR Invalid argument 'ev\\x00x' for CONFIG SET 'event-log': "
        "a path cannot contain a NUL byte"
    )
    assert client.execute_command("CONFIG", "GET", "event-log") == [b"event-log", b""]
    assert info(client, "eventlog") == before


def test_config_set_rolls_back_whatever_the_node_raises() -> None:
    config = Config()

    def broken(name: str) -> None:
        raise RuntimeError("a Python text that must not reach a client")

    config.on_change = broken
    with pytest.raises(ConfigError) as caught:
        config.set("deadletter-queue", "dlq")
    assert str(caught.value) == (
        "CONFIG SET failed (possibly related to argument 'deadletter-queue') - the node could "
        "not apply it (see the node's log)"
    )
    assert config.get("deadletter-queue") == [("deadletter-queue", "")]
    assert "deadletter-queue" not in config.explicit


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        ("nan", "ERR value is not a valid float"),
        ("NaN", "ERR value is not a valid float"),
        ("inf", "ERR value is not a valid float"),
        ("-inf", "ERR value is not a valid float"),
        ("1e400", "ERR value is not a valid float"),
        ("0x10", "ERR value is not a valid float"),
        ("1_0", "ERR value is not a valid float"),
        (" 1", "ERR value is not a valid float"),
        ("1\n", "ERR value is not a valid float"),
        ("", "ERR value is not a valid float"),
        ("-1", "ERR DEBUG SLEEP seconds must be between 0 and 60"),
        ("60.5", "ERR DEBUG SLEEP seconds must be between 0 and 60"),
        ("1e10", "ERR DEBUG SLEEP seconds must be between 0 and 60"),
    ],
)
def test_debug_sleep_validates_its_number(client: redis.Redis, seconds: str, expected: str) -> None:
    started = time.monotonic()
    assert error_of(client, "DEBUG", "SLEEP", seconds) == expected
    assert time.monotonic() - started < 1


def test_debug_sleep_accepts_plain_decimals(client: redis.Redis) -> None:
    for seconds in ("0", "0.01", ".01", "1e-2", "+0.0", "-0"):
        assert client.execute_command("DEBUG", "SLEEP", seconds) == b"OK", seconds


# -- 8: CONFIG REWRITE escapes every value --------------------------------------------------


def _restart_with(config_file: Path, data_dir: Path) -> NodeProcess:
    return NodeProcess(data_dir, config_file=config_file)


@pytest.mark.parametrize(
    "value",
    [
        "x\nfoo",
        "x\vport 1",
        "x\fport 1",
        "x\rport 1",
        "a \"quoted\" 'word' \\ back\\slash",
        "#not-a-comment",
        "é\x00\x7f\x1b",
        "",
        " leading and trailing ",
    ],
)
def test_rewrite_of_awkward_values_reads_back_identically(tmp_path: Path, value: str) -> None:
    config_file = tmp_path / "node.conf"
    config_file.write_text("# a comment\nloglevel notice\n")
    data_dir = tmp_path / "data"
    with running_node(data_dir, config_file=config_file) as node:
        r = strict_client(node)
        assert r.execute_command("CONFIG", "SET", "deadletter-queue", value) == b"OK"
        assert r.execute_command("CONFIG", "SET", "requirepass", value) == b"OK"
        assert r.execute_command("CONFIG", "REWRITE") == b"OK"
        r.close()
    lines = config_file.read_bytes().split(b"\n")
    assert lines[:2] == [b"# a comment", b"loglevel notice"]
    # No raw line or word separator inside a value: one line per directive.
    assert sum(line.startswith(b"deadletter-queue ") for line in lines) == 1
    assert not any(ch in config_file.read_bytes() for ch in b"\v\f\r\x00")
    port_lines = [line for line in lines if line.startswith(b"port")]
    assert len(port_lines) == 1  # the one --port wrote, nothing injected
    node = _restart_with(config_file, data_dir)
    try:
        r = strict_client(node, password=value) if value else strict_client(node)
        assert r.execute_command("CONFIG", "GET", "deadletter-queue") == [
            b"deadletter-queue",
            value.encode(),
        ]
        assert r.execute_command("CONFIG", "GET", "requirepass") == [
            b"requirepass",
            value.encode(),
        ]
        r.close()
    finally:
        node.stop()


def test_a_raw_vertical_tab_in_a_file_does_not_start_a_directive(tmp_path: Path) -> None:
    config = Config()
    path = tmp_path / "node.conf"
    path.write_bytes(b'deadletter-queue "x\vmaxclients 5"\nhz 20\n')
    config.load_file(path)
    assert config["deadletter-queue"] == "x\vmaxclients 5"
    assert config["maxclients"] == 10000
    assert config["hz"] == 20


def test_rewrite_keeps_other_lines_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "node.conf"
    path.write_bytes(b"# caf\xe9 \xff not UTF-8\nport 7711\r\n  # indented\n")
    config = Config()
    config.load_file(path)
    config.set("deadletter-queue", "dead")
    config.rewrite()
    assert path.read_bytes() == (
        b"# caf\xe9 \xff not UTF-8\nport 7711\n  # indented\n"
        b"# Generated by CONFIG REWRITE\ndeadletter-queue dead\n"
    )


@pytest.mark.parametrize("value", ["1_0", "5\n", " 5", "+5", "0x5"])
def test_integers_are_plain_decimals(value: str) -> None:
    with pytest.raises(ConfigError, match="Invalid argument"):
        Config().set("timeout", value)


# Every string directive whose value is kept as given (the path ones refuse a NUL byte).
_STRING_DIRECTIVES = ["deadletter-queue", "requirepass", "syslog-ident", "pidfile", "logfile"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(_STRING_DIRECTIVES), raw=st.binary(max_size=40))
def test_rewrite_round_trip_of_arbitrary_bytes(name: str, raw: bytes) -> None:
    # What CONFIG SET stores for these bytes (cmd_admin decodes with errors="replace").
    value = raw.decode(errors="replace")
    if name in ("pidfile", "logfile"):
        value = value.replace("\x00", "")  # a path can't hold a NUL byte (refused)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "node.conf"
        path.write_text("port 7711\n")
        config = Config()
        config.load_file(path)
        config.apply(name, [value])  # from the file or CONFIG SET: the same store
        config.rewrite()
        again = Config()
        again.load_file(path)
        assert again[name] == value
        assert again.get(name) == config.get(name)
        assert again["port"] == 7711
        assert path.read_bytes().isascii()


@given(value=st.text(max_size=40))
def test_quote_is_read_back_by_the_loader(value: str) -> None:
    words = split_args(f"directive {quote(value)}".encode())
    assert words is not None
    assert words[1].decode(errors="surrogateescape") == value


# -- 9: enable-debug-command, enable-protected-configs -----------------------------------


def test_the_guards_default_to_local(client: redis.Redis) -> None:
    assert client.execute_command("CONFIG", "GET", "enable-*") == [
        b"enable-debug-command",
        b"local",
        b"enable-protected-configs",
        b"local",
    ]
    # From 127.0.0.1: allowed.
    assert client.execute_command("DEBUG", "SLEEP", "0") == b"OK"
    assert client.execute_command("CONFIG", "SET", "event-log", "ev") == b"OK"
    # Only from the file or the command line, as in Redis.
    for name in ("enable-debug-command", "enable-protected-configs"):
        assert error_of(client, "CONFIG", "SET", name, "yes") == (
            f"ERR Unsupported CONFIG parameter: {name}"
        )


def test_enable_debug_command_no_refuses_every_debug_subcommand(tmp_path: Path) -> None:
    with running_node(tmp_path / "n", "--enable-debug-command", "no") as node:
        r = strict_client(node)
        job_id = r.execute_command("ADDJOB", "q", "x", "0")
        for argv in (
            ("SLEEP", "3"),
            ("FLUSHALL",),
            ("ERROR", "FAKE forged"),
            ("JOBS",),
            ("RESOURCES",),
            ("nosuch",),
        ):
            assert error_of(r, "DEBUG", *argv) == DEBUG_NOT_ALLOWED
        assert r.execute_command("QLEN", "q") == 1  # FLUSHALL did nothing
        assert r.execute_command("SHOW", job_id) is not None
        r.close()


def test_enable_protected_configs_no_refuses_path_directives(tmp_path: Path) -> None:
    with running_node(tmp_path / "n", "--enable-protected-configs", "no") as node:
        r = strict_client(node)
        assert error_of(r, "CONFIG", "SET", "dir", str(tmp_path)) == protected("dir")
        assert error_of(r, "CONFIG", "SET", "event-log", "ev") == protected("event-log")
        assert error_of(r, "CONFIG", "SET", "EVENT-LOG", "") == protected("event-log")
        assert r.execute_command("CONFIG", "GET", "dir")[1] == str(tmp_path / "n").encode()
        assert r.execute_command("CONFIG", "GET", "event-log") == [b"event-log", b""]
        assert not (tmp_path / "n" / "ev").exists()
        # Other directives are not protected; directives no CONFIG SET may change keep
        # their answer.
        assert r.execute_command("CONFIG", "SET", "maxmemory", "2gb") == b"OK"
        assert error_of(r, "CONFIG", "SET", "logfile", "x") == (
            "ERR Unsupported CONFIG parameter: logfile"
        )
        # DEBUG is still local (its own switch).
        assert r.execute_command("DEBUG", "SLEEP", "0") == b"OK"
        r.close()


def test_local_allows_the_unix_socket(tmp_path: Path) -> None:
    path = tmp_path / "node.sock"
    with running_node(tmp_path / "n", "--unixsocket", str(path)) as node:
        r = redis.Redis(unix_socket_path=str(path), protocol=2, socket_timeout=10)
        assert r.execute_command("DEBUG", "SLEEP", "0") == b"OK"
        assert r.execute_command("CONFIG", "SET", "event-log", "ev") == b"OK"
        r.close()
        assert node.alive()


def _conn(addr: str) -> SimpleNamespace:
    return SimpleNamespace(addr=addr)


def _server(unixsocket: str = "") -> SimpleNamespace:
    return SimpleNamespace(config={"unixsocket": unixsocket})


@pytest.mark.parametrize(
    ("addr", "unixsocket", "local"),
    [
        ("127.0.0.1:50000", "", True),
        ("127.12.3.4:6000", "", True),  # all of 127.0.0.0/8
        ("::1:50000", "", True),
        ("[::1]:50000", "", True),
        ("::ffff:127.0.0.1:50000", "", True),
        ("/tmp/conveyor.sock:0", "/tmp/conveyor.sock", True),
        ("10.0.0.5:50000", "", False),
        ("192.168.1.20:50000", "", False),
        ("128.0.0.1:50000", "", False),
        ("0.0.0.0:50000", "", False),
        ("2001:db8::1:50000", "", False),
        ("::ffff:10.0.0.1:50000", "", False),
        ("fe80::1%eth0:50000", "", False),
        ("/tmp/conveyor.sock:0", "", False),  # not the node's socket
        ("/tmp/other.sock:0", "/tmp/conveyor.sock", False),
        ("localhost:50000", "", False),  # a name, not an address
        ("127.0.0.1", "", False),  # no port
        ("", "", False),
    ],
)
def test_the_local_decision(addr: str, unixsocket: str, local: bool) -> None:
    server, conn = _server(unixsocket), _conn(addr)
    assert is_local_client(server, conn) is local  # type: ignore[arg-type]
    assert protected_action_allowed("local", server, conn) is local  # type: ignore[arg-type]
    assert protected_action_allowed("yes", server, conn) is True  # type: ignore[arg-type]
    assert protected_action_allowed("no", server, conn) is False  # type: ignore[arg-type]


# -- 9: paths stay inside the data directory ------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["/tmp/events", "..", "../events", "ev/../../events", "./../events", "ev/../.."],
)
def test_event_log_must_stay_inside_the_data_directory(
    fresh_node: NodeProcess, client: redis.Redis, value: str
) -> None:
    assert error_of(client, "CONFIG", "SET", "event-log", value) == OUTSIDE_DATA_DIR
    assert client.execute_command("CONFIG", "GET", "event-log") == [b"event-log", b""]
    assert info(client, "eventlog")["event_log_enabled"] == "0"


def test_event_log_through_a_symbolic_link_out_is_refused(
    fresh_node: NodeProcess, client: redis.Redis, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (fresh_node.data_dir / "link").symlink_to(outside)
    assert error_of(client, "CONFIG", "SET", "event-log", "link/ev") == OUTSIDE_DATA_DIR
    assert not (outside / "ev").exists()


def test_event_log_inside_the_data_directory_is_accepted(
    fresh_node: NodeProcess, client: redis.Redis
) -> None:
    for value in ("ev", "a/../ev", "./ev/sub", ""):
        assert client.execute_command("CONFIG", "SET", "event-log", value) == b"OK", value
    assert (fresh_node.data_dir / "ev" / "sub").is_dir()


def test_enable_protected_configs_yes_allows_any_path(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    with running_node(tmp_path / "n", "--enable-protected-configs", "yes") as node:
        r = strict_client(node)
        assert r.execute_command("CONFIG", "SET", "event-log", str(elsewhere)) == b"OK"
        assert r.execute_command("CONFIG", "SET", "event-log", "../up") == b"OK"
        r.close()
    assert elsewhere.is_dir() and (tmp_path / "up").is_dir()


def test_the_config_file_is_trusted_with_any_path(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    with running_node(tmp_path / "n", "--event-log", str(elsewhere)) as node:
        r = strict_client(node)
        assert r.execute_command("CONFIG", "GET", "event-log")[1] == str(elsewhere).encode()
        r.close()
    assert elsewhere.is_dir()


# -- 9: AUTH failures ---------------------------------------------------------------------


@pytest.fixture
def auth_node(tmp_path: Path) -> Iterator[NodeProcess]:
    with running_node(tmp_path / "auth", "--requirepass", "s3cret") as node:
        yield node


def _auth_failures(node: NodeProcess) -> int:
    r = strict_client(node, password="s3cret")
    try:
        return int(info(r, "stats")["acl_access_denied_auth"])
    finally:
        r.close()


def test_auth_failures_are_counted_and_cut_off(auth_node: NodeProcess) -> None:
    assert _auth_failures(auth_node) == 0
    with RawClient(auth_node.port) as raw:
        for _ in range(AUTH_MAX_FAILURES - 1):
            assert raw.call_raw("AUTH", "wrong") == b"-ERR invalid password\r\n"
        assert raw.call_raw("AUTH", "wrong") == f"-{TOO_MANY_AUTH_FAILURES}\r\n".encode()
        assert raw.is_closed_by_peer()
    assert _auth_failures(auth_node) == AUTH_MAX_FAILURES
    # A new connection starts afresh, and the right password works.
    with RawClient(auth_node.port) as raw:
        assert raw.call_raw("AUTH", "wrong") == b"-ERR invalid password\r\n"
        assert raw.call_raw("AUTH", "s3cret") == b"+OK\r\n"
        assert raw.call_raw("PING") == b"+PONG\r\n"


def test_a_pipelined_burst_of_guesses_stops_at_the_limit(auth_node: NodeProcess) -> None:
    with RawClient(auth_node.port) as raw:
        guesses = [encode_command("AUTH", f"guess{n}") for n in range(5000)]
        raw.send(b"".join(guesses) + encode_command("AUTH", "s3cret"))
        replies = [raw.read_raw() for _ in range(AUTH_MAX_FAILURES)]
        assert replies[:-1] == [b"-ERR invalid password\r\n"] * (AUTH_MAX_FAILURES - 1)
        assert replies[-1] == f"-{TOO_MANY_AUTH_FAILURES}\r\n".encode()
        assert raw.is_closed_by_peer()
        assert raw.buffer == b""  # nothing pipelined behind the cut-off ran
    assert _auth_failures(auth_node) == AUTH_MAX_FAILURES
    # The node is not stalled: another client is served at once.
    started = time.monotonic()
    with RawClient(auth_node.port) as other:
        assert other.call_raw("AUTH", "s3cret") == b"+OK\r\n"
    assert time.monotonic() - started < 1


def test_hello_auth_failures_count_too(auth_node: NodeProcess) -> None:
    wrongpass = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    with RawClient(auth_node.port) as raw:
        assert raw.call_raw("HELLO", "3", "AUTH", "default", "nope") == wrongpass
        assert raw.call_raw("HELLO", "2", "AUTH", "someone", "s3cret") == wrongpass
        assert raw.call_raw("AUTH", "nope") == b"-ERR invalid password\r\n"
        for _ in range(AUTH_MAX_FAILURES - 4):
            assert raw.call_raw("HELLO", "3", "AUTH", "default", "nope") == wrongpass
        assert raw.call_raw("HELLO", "3", "AUTH", "default", "nope") == (
            f"-{TOO_MANY_AUTH_FAILURES}\r\n".encode()
        )
        assert raw.is_closed_by_peer()
    assert _auth_failures(auth_node) == AUTH_MAX_FAILURES


def test_config_resetstat_zeroes_the_auth_failures(auth_node: NodeProcess) -> None:
    with RawClient(auth_node.port) as raw:
        assert raw.call_raw("AUTH", "wrong") == b"-ERR invalid password\r\n"
    assert _auth_failures(auth_node) == 1
    r = strict_client(auth_node, password="s3cret")
    assert r.execute_command("CONFIG", "RESETSTAT") == b"OK"
    r.close()
    assert _auth_failures(auth_node) == 0


def test_auth_without_a_password_set_is_not_a_failure(client: redis.Redis) -> None:
    assert error_of(client, "AUTH", "x") == "ERR Client sent AUTH, but no password is set"
    assert info(client, "stats")["acl_access_denied_auth"] == "0"


# -- 9: NOAUTH before any command lookup ----------------------------------------------------


def test_noauth_before_unknown_commands_and_arity_errors(auth_node: NodeProcess) -> None:
    with RawClient(auth_node.port) as raw:
        for argv in (
            ("NOSUCHCOMMAND",),
            ("nosuch", "a", "b"),
            ("QPEEK", "q"),  # wrong arity
            ("ADDJOB",),
            ("CLIENT",),
            ("DEBUG",),
            ("CONFIG", "GET", "requirepass"),
        ):
            assert raw.call_raw(*argv) == NOAUTH, argv
        raw.send(b"NOSUCH inline\r\n")  # the inline form too
        assert raw.read_raw() == NOAUTH
        # AUTH, HELLO and QUIT stay reachable; their own errors are theirs.
        assert raw.call_raw("AUTH") == b"-ERR wrong number of arguments for 'auth' command\r\n"
        assert raw.call_raw("AUTH", "s3cret") == b"+OK\r\n"
        assert raw.call_raw("NOSUCH") == b"-ERR unknown command 'NOSUCH'\r\n"
        assert (
            raw.call_raw("QPEEK", "q") == b"-ERR wrong number of arguments for 'qpeek' command\r\n"
        )


# -- 9: DEBUG RESOURCES -------------------------------------------------------------------


def test_debug_resources(fresh_node: NodeProcess, client: redis.Redis) -> None:
    assert client.execute_command("DEBUG", "RESOURCES") == [0, 0, 0, 0, 0, 0, 0]
    client.execute_command("ADDJOB", "q", "x", "0")
    waiters, blocked_clients, job_timers, queues, jobs, _, _ = client.execute_command(
        "DEBUG", "RESOURCES"
    )
    assert (waiters, blocked_clients, queues, jobs) == (0, 0, 1, 1)
    with RawClient(fresh_node.port) as blocked:
        blocked.send_command("GETJOB", "TIMEOUT", "60000", "FROM", "empty")
        deadline = time.monotonic() + 5
        while client.execute_command("DEBUG", "RESOURCES")[1] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        waiters, blocked_clients, timer_calls, queues, jobs, _, _ = client.execute_command(
            "DEBUG", "RESOURCES"
        )
        assert (waiters, blocked_clients, queues, jobs) == (1, 1, 2, 1)
        assert timer_calls > job_timers  # the GETJOB's timeout (and the new queue's GC)
    deadline = time.monotonic() + 5
    while client.execute_command("DEBUG", "RESOURCES")[:2] != [0, 0]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert error_of(client, "DEBUG", "RESOURCES", "x") == (
        "ERR Unknown DEBUG subcommand or wrong number of arguments for 'RESOURCES'"
    )
