"""`conveyor server [CONFIG_FILE] [--directive value...]`, CONFIG REWRITE, nodes.conf."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.conftest import free_port
from tests.node.helpers import error_of, info, strict_client
from tests.servers import NodeProcess, running_node

CONFIG_TEXT = """\
# Conveyor test configuration
maxclients 123

# quoted values
deadletter-queue "dead letters"
syslog-ident 'my ident'
loglevel verbose
max-deliveries 4
hz 15
"""


def config_get(client: redis.Redis, name: str) -> bytes:
    reply = client.execute_command("CONFIG", "GET", name)
    assert reply[0] == name.encode()
    return reply[1]


def test_config_file_values(tmp_path: Path) -> None:
    config = tmp_path / "disque.conf"
    config.write_text(CONFIG_TEXT)
    with running_node(tmp_path / "data", config_file=config) as node:
        client = strict_client(node)
        try:
            assert config_get(client, "maxclients") == b"123"
            assert config_get(client, "deadletter-queue") == b"dead letters"
            assert config_get(client, "syslog-ident") == b"my ident"
            assert config_get(client, "loglevel") == b"verbose"
            assert config_get(client, "max-deliveries") == b"4"
            assert config_get(client, "port") == str(node.port).encode()
            fields = info(client)
            assert fields["config_file"] == str(config.resolve())
            assert fields["hz"] == "15"
        finally:
            client.close()


def test_command_line_overrides_the_file(tmp_path: Path) -> None:
    config = tmp_path / "disque.conf"
    config.write_text(CONFIG_TEXT)
    with running_node(
        tmp_path / "data", "--maxclients", "77", "--deadletter-queue", "dlq", config_file=config
    ) as node:
        client = strict_client(node)
        try:
            assert config_get(client, "maxclients") == b"77"
            assert config_get(client, "deadletter-queue") == b"dlq"
            assert config_get(client, "max-deliveries") == b"4"  # from the file
        finally:
            client.close()


def test_rewrite_keeps_other_lines(tmp_path: Path) -> None:
    config = tmp_path / "disque.conf"
    config.write_text(CONFIG_TEXT)
    with running_node(tmp_path / "data", config_file=config) as node:
        client = strict_client(node)
        try:
            assert client.execute_command("CONFIG", "SET", "maxclients", "456") == b"OK"
            assert client.execute_command("CONFIG", "SET", "deadletter-queue", "x y") == b"OK"
            assert client.execute_command("CONFIG", "SET", "timeout", "30") == b"OK"
            assert client.execute_command("CONFIG", "REWRITE") == b"OK"
        finally:
            client.close()
    lines = config.read_text().splitlines()
    assert lines[0] == "# Conveyor test configuration"
    assert "# quoted values" in lines
    assert "" in lines  # the blank line is kept
    assert "maxclients 456" in lines
    assert "maxclients 123" not in lines
    assert lines.index("maxclients 456") == 1  # rewritten in place
    assert "syslog-ident 'my ident'" in lines or 'syslog-ident "my ident"' in lines
    assert "loglevel verbose" in lines
    assert any(line.startswith("timeout 30") for line in lines)
    assert sum(line.startswith("maxclients") for line in lines) == 1
    # the rewritten file loads back with the new values
    with running_node(tmp_path / "data", config_file=config) as node:
        client = strict_client(node)
        try:
            assert config_get(client, "maxclients") == b"456"
            assert config_get(client, "deadletter-queue") == b"x y"
            assert config_get(client, "timeout") == b"30"
            assert config_get(client, "syslog-ident") == b"my ident"
        finally:
            client.close()


def test_every_disque_directive_is_accepted(tmp_path: Path) -> None:
    config = tmp_path / "disque.conf"
    config.write_text(
        f"""\
timeout 0
tcp-keepalive 60
tcp-backlog 128
bind 127.0.0.1
unixsocket {tmp_path}/disque.sock
unixsocketperm 700
loglevel notice
logfile ""
syslog-enabled no
syslog-ident disque
syslog-facility local0
databases 16
maxclients 1000
maxmemory 512mb
maxmemory-policy noeviction
maxmemory-samples 5
activerehashing yes
daemonize no
hz 10
appendonly no
appendfilename "disque.aof"
no-appendfsync-on-rewrite no
appendfsync everysec
auto-aof-rewrite-percentage 100
auto-aof-rewrite-min-size 64mb
aof-rewrite-incremental-fsync yes
aof-load-truncated yes
aof-enqueue-jobs-once no
pidfile {tmp_path}/disque.pid
rename-command FLUSHEVERYTHING ""
cluster-config-file nodes-test.conf
cluster-node-timeout 5000
slowlog-log-slower-than 10000
latency-monitor-threshold 0
slowlog-max-len 128
client-output-buffer-limit normal 0 0 0
"""
    )
    with running_node(tmp_path / "data", config_file=config) as node:
        client = strict_client(node)
        try:
            assert config_get(client, "maxmemory") == b"536870912"
            assert config_get(client, "maxmemory-policy") == b"noeviction"
            assert config_get(client, "cluster-node-timeout") == b"5000"
            assert config_get(client, "tcp-backlog") == b"128"
            assert config_get(client, "client-output-buffer-limit") == b"normal 0 0 0"
            assert client.execute_command("ADDJOB", "q", "x", "0")
        finally:
            client.close()
    assert (tmp_path / "data" / "nodes-test.conf").exists()


def test_include(tmp_path: Path) -> None:
    extra = tmp_path / "extra.conf"
    extra.write_text("maxclients 321\n")
    config = tmp_path / "disque.conf"
    config.write_text(f"hz 12\ninclude {extra}\n")
    with running_node(tmp_path / "data", config_file=config) as node:
        client = strict_client(node)
        try:
            assert config_get(client, "maxclients") == b"321"
            assert config_get(client, "hz") == b"12"
        finally:
            client.close()


@pytest.mark.parametrize(
    "text",
    [
        "nosuchdirective 1\n",
        "maxclients abc\n",
        "maxclients\n",
        'deadletter-queue "unbalanced\n',
        "loglevel loud\n",
        "hz 0\n",
        "maxmemory lots\n",
        "appendonly maybe\n",
    ],
)
def test_bad_config_file_is_fatal(tmp_path: Path, text: str) -> None:
    config = tmp_path / "disque.conf"
    config.write_text("# fine so far\nmaxclients 10\n" + text)
    result = subprocess.run(
        [sys.executable, "-m", "conveyor.cli", "server", str(config), "--dir", str(tmp_path)],
        capture_output=True,
        timeout=30,
    )
    assert result.returncode != 0
    assert b"FATAL CONFIG FILE ERROR" in result.stderr
    assert b":3" in result.stderr  # the line number


@pytest.mark.parametrize(
    "args",
    [["--maxclients", "abc"], ["--nosuch", "1"], ["stray", "--port"], ["--hz", "1", "2"]],
)
def test_bad_command_line_is_fatal(tmp_path: Path, args: list[str]) -> None:
    config = tmp_path / "disque.conf"
    config.write_text("")
    command = [sys.executable, "-m", "conveyor.cli", "server", str(config), *args]
    result = subprocess.run(
        [*command, "--dir", str(tmp_path)],
        capture_output=True,
        timeout=30,
    )
    assert result.returncode != 0
    assert b"FATAL CONFIG FILE ERROR" in result.stderr


def test_missing_config_file_is_fatal(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "conveyor.cli", "server", str(tmp_path / "nope.conf")],
        capture_output=True,
        timeout=30,
    )
    assert result.returncode != 0


def test_node_id_survives_restarts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_node(data) as node:
        client = strict_client(node)
        first_id = client.execute_command("CLUSTER", "MYID")
        client.close()
    nodes_conf = (data / "nodes.conf").read_text()
    assert nodes_conf.startswith(first_id.decode() + " ")
    assert "myself" in nodes_conf
    with running_node(data) as node:
        client = strict_client(node)
        assert client.execute_command("CLUSTER", "MYID") == first_id
        job_id = client.execute_command("ADDJOB", "q", "x", "0")
        assert job_id[2:10] == first_id[:8]
        client.close()
    with running_node(tmp_path / "other") as node:
        client = strict_client(node)
        assert client.execute_command("CLUSTER", "MYID") != first_id
        client.close()


def test_cluster_config_file_name(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_node(data, "--cluster-config-file", "my-nodes.conf") as node:
        client = strict_client(node)
        my_id = client.execute_command("CLUSTER", "MYID")
        client.close()
    assert (data / "my-nodes.conf").read_text().startswith(my_id.decode())
    assert not (data / "nodes.conf").exists()


def test_rewrite_without_file_is_an_error(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "data")
    try:
        client = strict_client(node)
        expected = "ERR The server is running without a config file"
        assert error_of(client, "CONFIG", "REWRITE") == expected
        client.close()
    finally:
        node.stop()


def fails_to_start(*args: str | bytes) -> bytes:
    """`conveyor server ARGS` on a free port, which must exit 1 with a one-line reason
    rather than a traceback: its stderr."""
    command = [sys.executable, "-m", "conveyor.cli", "server", *args, "--port", str(free_port())]
    result = subprocess.run(command, capture_output=True, timeout=30)
    assert result.returncode == 1
    assert b"Traceback" not in result.stderr
    return result.stderr


def test_unusable_logfile_is_fatal_without_a_traceback(tmp_path: Path) -> None:
    # The log file is opened before anything else; a missing directory used to end the
    # process with a Python traceback instead of Redis' one-line reason.
    logfile = tmp_path / "no-such-dir" / "node.log"
    stderr = fails_to_start("--logfile", str(logfile), "--dir", str(tmp_path))
    assert b"Can't open the log file: No such file or directory" in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--unixsocketperm", "999"], "Invalid argument for 'unixsocketperm': 999 (not octal)"),
        (["--unixsocketperm", "1000"], "'unixsocketperm': 1000 (argument must be at most 777)"),
        (["--unixsocketperm", "-7"], "'unixsocketperm': -7 (not octal)"),
        (
            ["--tcp-backlog", "99999999999999999999"],
            "'tcp-backlog': 99999999999999999999 (argument must be between 0 and 2147483647",
        ),
    ],
)
def test_directives_the_node_cannot_use_are_fatal_before_it_starts(
    tmp_path: Path, args: list[str], message: str
) -> None:
    # These used to pass the check and end the node with a traceback once it had
    # bound its ports (os.chmod of the socket, listen()).
    socket_path = tmp_path / "node.sock"
    stderr = fails_to_start("--unixsocket", str(socket_path), *args, "--dir", str(tmp_path))
    assert b"FATAL CONFIG FILE ERROR" in stderr
    assert message.encode() in stderr
    assert not socket_path.exists()


@pytest.mark.parametrize("where", ["file", "command line"])
def test_a_value_that_is_not_utf8_is_fatal(tmp_path: Path, where: str) -> None:
    # From the command line it used to end the node with a traceback; from the file it
    # was kept with U+FFFD for its bytes (another password or queue than the one given).
    config = tmp_path / "node.conf"
    config.write_bytes(b'requirepass "s3cret\\xff"\n' if where == "file" else b"")
    extra = [] if where == "file" else [b"--deadletter-queue", b"dead\xff"]
    stderr = fails_to_start(str(config), *extra, "--dir", str(tmp_path))
    assert b"FATAL CONFIG FILE ERROR" in stderr
    assert b"\\xff (not UTF-8 text)" in stderr


def test_a_data_directory_that_is_a_file_is_fatal_without_a_traceback(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "data"
    not_a_dir.write_text("a file")
    stderr = fails_to_start("--dir", str(not_a_dir))
    assert f"Can't use the data directory '{not_a_dir}': File exists".encode() in stderr
