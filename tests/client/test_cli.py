"""`conveyor cli`: reply formatting, one-shot commands, the REPL and its help."""

from __future__ import annotations

import errno
import os
import pty
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from conveyor.cli import _give_up_writing
from conveyor.client._cli_replies import ErrorReply, StatusReply, format_raw, format_reply, quote
from conveyor.client._help import COMMANDS, command_help
from conveyor.client.cli import Session, _LineReader, cli, repl
from conveyor.node.commands import COMMANDS as SERVER_COMMANDS
from tests.conftest import free_port
from tests.servers import NodeProcess


def run_cli(
    *args: str, input: str | None = None, home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    if home is not None:
        env["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "conveyor.cli", "cli", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )


def invoke(*args: str, input: str | None = None) -> tuple[int, str, str]:
    """The cli in-process (fast): exit code, stdout, stderr."""
    result = CliRunner().invoke(cli, list(args), input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


# -- formatting ------------------------------------------------------------------------------
def test_format_like_redis_cli() -> None:
    assert format_reply(1) == "(integer) 1"
    assert format_reply(None) == "(nil)"
    assert format_reply([]) == "(empty array)"
    assert format_reply(StatusReply(b"OK")) == "OK"
    assert format_reply(b"OK") == '"OK"'
    assert format_reply(ErrorReply("ERR syntax error")) == "(error) ERR syntax error"
    assert format_reply([b"q", [b"a", 2], None]) == '1) "q"\n2) 1) "a"\n   2) (integer) 2\n3) (nil)'


def test_format_pads_indexes_of_long_arrays() -> None:
    lines = format_reply([[b"x"] * 2] + [b"y"] * 10).splitlines()
    assert lines[0] == ' 1) 1) "x"'
    assert lines[1] == '    2) "x"'
    assert lines[2] == ' 2) "y"'
    assert lines[-1] == '11) "y"'


def test_quote_escapes_like_sdscatrepr() -> None:
    assert quote(b'a"b\\c\n\r\t\x07\x08\x00\xff') == '"a\\"b\\\\c\\n\\r\\t\\a\\b\\x00\\xff"'


def test_raw_format() -> None:
    assert format_raw([b"a", 1, None, StatusReply(b"OK")]) == b"a\n1\n\nOK"
    assert format_raw(ErrorReply("ERR x")) == b"ERR x"
    assert format_raw([b"\xff\x00\xfe", b"\x80"]) == b"\xff\x00\xfe\n\x80"


# -- help ------------------------------------------------------------------------------------
def test_help_covers_every_server_command() -> None:
    served = {command.name.decode().upper() for command in SERVER_COMMANDS}
    assert served <= set(COMMANDS)
    disque = {
        "AUTH", "PING", "INFO", "SHUTDOWN", "MONITOR", "DEBUG", "CONFIG", "CLUSTER", "CLIENT",
        "SLOWLOG", "TIME", "COMMAND", "LATENCY", "HELLO", "ADDJOB", "GETJOB", "ACKJOB",
        "FASTACK", "DELJOB", "SHOW", "LOADJOB", "BGREWRITEAOF", "QLEN", "QPEEK", "QSTAT",
        "QSCAN", "JSCAN", "ENQUEUE", "NACK", "DEQUEUE", "WORKING", "PAUSE",
    }  # fmt: skip
    assert disque <= set(COMMANDS)
    for entry in COMMANDS.values():
        assert entry.summary.endswith(".")


def test_command_help_text() -> None:
    text = command_help("addjob")
    assert text is not None
    assert "ADDJOB queue body ms-timeout [REPLICATE count]" in text
    assert "summary: Add a job to a queue" in text
    assert command_help("nosuch") is None


# -- one shot --------------------------------------------------------------------------------
def test_one_shot_commands(node: NodeProcess, raw: redis.Redis) -> None:
    port = str(node.port)
    added = run_cli("-p", port, "ADDJOB", "q", "x", "0")
    assert added.returncode == 0, added.stderr
    job_id = added.stdout.strip()
    assert len(job_id) == 40 and job_id.startswith("D-")  # a status reply: unquoted
    assert raw.execute_command("QLEN", "q") == 1

    qlen = run_cli("-h", "127.0.0.1", "-p", port, "QLEN", "q")
    assert (qlen.returncode, qlen.stdout) == (0, "(integer) 1\n")

    fetched = run_cli("-p", port, "GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert fetched.stdout == (
        f'1) 1) "q"\n   2) "{job_id}"\n   3) "x"\n   4) "nacks"\n   5) (integer) 0\n'
        '   6) "additional-deliveries"\n   7) (integer) 0\n'
    )

    unknown = job_id.replace(job_id[11:35], "A" * 24)
    assert invoke("-p", port, "SHOW", unknown) == (0, "(nil)\n", "")
    assert invoke("-p", port, "QPEEK", "q", "-1") == (0, "(empty array)\n", "")
    # Negative numbers and quotes pass through untouched.
    assert invoke("-p", port, "PING", 'say "hi"')[1] == '"say \\"hi\\""\n'
    assert invoke("-p", port, "--raw", "PING", "plain")[1] == "plain\n"


def test_raw_output_keeps_bytes_that_are_not_utf8(node: NodeProcess, raw: redis.Redis) -> None:
    body = b"\xff\xfe binary \x80\r\n\x00end"
    raw.execute_command("ADDJOB", b"q\xff", body, 0)
    queue_arg = os.fsdecode(b"q\xff")  # argv is bytes: the cli takes it back with fsencode
    args = ["-p", str(node.port), "--raw", "QPEEK", queue_arg, "1"]
    result = subprocess.run(
        [sys.executable, "-m", "conveyor.cli", "cli", *args],
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    queue, job_id, got = result.stdout.split(b"\n", 2)
    assert queue == b"q\xff" and job_id.startswith(b"D-")
    assert got == body + b"\n"


def test_one_shot_error_exits_1(node: NodeProcess) -> None:
    result = run_cli("-p", str(node.port), "ACKJOB", "bad")
    assert result.returncode == 1
    assert result.stdout == "(error) BADID Invalid Job ID format.\n"
    assert invoke("-p", str(node.port), "NOPE") == (1, "(error) ERR unknown command 'NOPE'\n", "")


@pytest.mark.parametrize(
    "argv",
    [["cli", "-p", "{port}", "PING"], ["--help"], ["cluster", "status", "127.0.0.1:{port}"]],
)
def test_output_to_a_full_device_is_a_one_line_error(node: NodeProcess, argv: list[str]) -> None:
    """`>/dev/full`: exit 1 and coreutils' "write error" line, not a traceback (nor
    CPython's "Exception ignored" lines at exit for what stays buffered)."""
    with open("/dev/full", "wb") as full:
        result = subprocess.run(
            [sys.executable, "-m", "conveyor.cli", *(a.format(port=node.port) for a in argv)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=30,
        )
    assert (result.returncode, result.stderr) == (
        1,
        "conveyor: write error: No space left on device\n",
    )


def test_a_full_device_for_a_file_of_the_commands_names_the_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The write that failed was to a file of the command's own (a backup, an AOF): the
    line names it, as the traceback it replaces did."""
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "data/disque.aof.bak")
    with pytest.raises(SystemExit) as exited:
        _give_up_writing(full)
    assert exited.value.code == 1
    assert capsys.readouterr().err == (
        "conveyor: write error: data/disque.aof.bak: No space left on device\n"
    )


def test_info_prints_as_text(node: NodeProcess, raw: redis.Redis) -> None:
    code, out, _ = invoke("-p", str(node.port), "INFO", "jobs")
    assert code == 0
    text = out.replace("\r\n", "\n")
    assert "# Jobs\n" in text and "registered_jobs:0\n" in text


def _answer_once(listener: socket.socket, reply: bytes) -> None:
    conn, _ = listener.accept()
    with conn:
        conn.recv(1024)
        conn.sendall(reply)


@pytest.mark.parametrize("reply", [b":abc\r\n", b"$x1\r\n", b"*-\r\n", b"*1\r\n:\r\n"])
def test_a_malformed_reply_is_a_one_line_error(reply: bytes) -> None:
    # Not a node (another service on that port, say): what it sends is not RESP.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        server = threading.Thread(target=_answer_once, args=(listener, reply), daemon=True)
        server.start()
        code, out, err = invoke("-p", str(port), "PING")
        server.join(10)
    assert (code, out) == (1, "")
    assert err.startswith("Error: Protocol error, got b") and err.count("\n") == 1


def test_a_port_out_of_range_is_refused_not_wrapped(node: NodeProcess) -> None:
    # 65536 more is the same port to getaddrinfo: it must not reach this node.
    for port in (node.port + 65536, 0, -1):
        code, out, err = invoke("-p", str(port), "PING")
        assert (code, out) == (2, "")
        assert f"Invalid value for '-p' / '--port': {port} is not in the range" in err


@pytest.mark.parametrize("host", ["a" * 64, os.fsdecode(b"h\xff"), "a..b"])
def test_a_host_that_is_no_host_name_is_a_one_line_error(host: str) -> None:
    # getaddrinfo IDNA-encodes the name first: a label over 63 bytes, or bytes that are
    # not text, fail there with a UnicodeError before any lookup.
    code, out, err = invoke("-h", host, "PING")
    assert (code, out) == (1, "")
    assert err.startswith("Could not connect to Conveyor at ") and err.count("\n") == 1


def test_unreachable_node_exits_1() -> None:
    port = free_port()
    code, out, err = invoke("-p", str(port), "PING")
    assert (code, out) == (1, "")
    assert f"Could not connect to Conveyor at 127.0.0.1:{port}: Connection refused" in err


def test_password(tmp_path: Path, node: NodeProcess, raw: redis.Redis) -> None:
    raw.execute_command("CONFIG", "SET", "requirepass", "secret")
    try:
        port = str(node.port)
        assert invoke("-p", port, "QLEN", "q")[:2] == (
            1,
            "(error) NOAUTH Authentication required.\n",
        )
        assert invoke("-p", port, "-a", "secret", "QLEN", "q")[:2] == (0, "(integer) 0\n")
        code, out, err = invoke("-p", port, "-a", "nope", "QLEN", "q")
        assert out == "(error) NOAUTH Authentication required.\n"
        assert "AUTH failed: ERR invalid password" in err
        assert code == 1
        assert run_cli("-p", port, "-a", "secret", "PING").stdout == "PONG\n"
    finally:
        raw.execute_command("CONFIG", "SET", "requirepass", "")


def test_a_password_that_is_not_utf8_is_sent_not_a_traceback(node: NodeProcess) -> None:
    # From argv or $CONVEYOR_PASSWORD: bytes, which Python hands over as surrogates.
    code, out, err = invoke("-p", str(node.port), "-a", os.fsdecode(b"p\xff"), "PING")
    assert (code, out) == (0, "PONG\n")
    assert err == "AUTH failed: ERR Client sent AUTH, but no password is set\n"


# -- REPL ------------------------------------------------------------------------------------
def test_repl_from_stdin(tmp_path: Path, node: NodeProcess, raw: redis.Redis) -> None:
    result = run_cli(
        "-p",
        str(node.port),
        input='ADDJOB q x 0\nQLEN q\n\nhelp GETJOB\nPING "a b"\nPING "open\nNOPE\nquit\nQLEN q\n',
        home=tmp_path,
    )
    assert result.returncode == 1, result.stderr  # NOPE and the open quote failed
    lines = result.stdout.splitlines()
    assert lines[0].startswith("D-") and len(lines[0]) == 40
    assert lines[1] == "(integer) 1"
    assert "  GETJOB [NOHANG] [TIMEOUT ms-timeout]" in result.stdout
    assert "summary: Fetch jobs" in result.stdout
    assert '"a b"' in lines
    assert "Invalid argument(s)" in lines
    assert "(error) ERR unknown command 'NOPE'" in lines
    assert lines.count("(integer) 1") == 1  # nothing ran after quit
    assert raw.execute_command("QLEN", "q") == 1


def test_repl_from_stdin_takes_lines_that_are_not_utf8(node: NodeProcess, raw: redis.Redis) -> None:
    # A strict decoder on stdin, as Python sets it up under any UTF-8 locale but C.
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    result = subprocess.run(
        [sys.executable, "-m", "conveyor.cli", "cli", "-p", str(node.port)],
        input=b"ADDJOB q a\xffb 0\nQLEN q\r\n",
        capture_output=True,
        timeout=30,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1:] == [b"(integer) 1"]
    assert raw.execute_command("QPEEK", "q", 1)[0][2] == b"a\xffb"


def test_repl_ends_at_eof_and_shows_general_help(node: NodeProcess) -> None:
    code, out, _ = invoke("-p", str(node.port), input="help\nhelp @queues\nhelp nosuch\n")
    assert code == 0
    assert "help COMMAND" in out and "ADDJOB" in out
    assert "QSCAN [cursor]" in out
    assert "No help for 'nosuch'" in out


def _read_until(fd: int, marker: bytes, deadline: float) -> bytes:
    seen = b""
    while marker not in seen:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no {marker!r} in {seen!r}")
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


class Terminal:
    """`conveyor cli` on a pseudo-terminal: what it writes is read up to a marker."""

    def __init__(self, primary: int, process: subprocess.Popen[bytes], port: int) -> None:
        self.primary, self.process = primary, process
        self.prompt = f"127.0.0.1:{port}> ".encode()
        self.deadline = time.monotonic() + 20

    def type(self, line: bytes) -> None:
        os.write(self.primary, line + b"\r")

    def read_until(self, marker: bytes) -> bytes:
        return _read_until(self.primary, marker, self.deadline)


@contextmanager
def cli_on_a_terminal(home: Path, port: int, **env: str) -> Iterator[Terminal]:
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli", "cli", "-p", str(port)],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env={**os.environ, "HOME": str(home), "TERM": "dumb", **env},
        close_fds=True,
    )
    os.close(secondary)
    try:
        yield Terminal(primary, process, port)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(primary)


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_interactive_prompt_and_history(
    tmp_path: Path, node: NodeProcess, raw: redis.Redis
) -> None:
    """On a terminal: the host:port prompt, readline, and ~/.conveyor_history."""
    with cli_on_a_terminal(tmp_path, node.port) as terminal:
        terminal.read_until(terminal.prompt)
        terminal.type(b"QLEN q")
        assert b"(integer) 0" in terminal.read_until(b"(integer) 0")
        terminal.type(b"NOPE")
        terminal.read_until(b"(error) ERR unknown command")
        terminal.type(b"quit")
        # At a prompt an error reply was seen by the user: the exit code stays 0.
        assert terminal.process.wait(timeout=10) == 0
    history = (tmp_path / ".conveyor_history").read_text()
    assert "QLEN q" in history


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_interactive_line_that_is_not_utf8_is_refused_and_the_session_goes_on(
    tmp_path: Path, node: NodeProcess
) -> None:
    # A strict decoder on stdin, as Python sets it up under any UTF-8 locale but C.
    with cli_on_a_terminal(tmp_path, node.port, PYTHONIOENCODING="utf-8:strict") as terminal:
        terminal.read_until(terminal.prompt)
        terminal.type(b"PING a\xffb")
        seen = terminal.read_until(terminal.prompt)
        assert b"Invalid argument(s): not text in the terminal's encoding" in seen
        terminal.type(b"PING still-here")
        terminal.read_until(b'"still-here"')
        terminal.type(b"quit")
        assert terminal.process.wait(timeout=10) == 0


def test_repl_reconnects_after_the_connection_drops(
    node: NodeProcess,
    raw: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    session = Session("127.0.0.1", node.port, None)

    def kill_my_connection() -> str:
        host, port = session._connection._sock.getsockname()[:2]
        raw.execute_command("CLIENT", "KILL", f"{host}:{port}")
        return "PING"

    steps = iter([lambda: "PING", kill_my_connection, lambda: "PING", lambda: "QLEN q"])

    def fake_input(prompt: str = "") -> str:
        try:
            return next(steps)()
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr(_LineReader, "read", lambda self, prompt: fake_input(prompt).encode())
    assert repl(session, raw=False, interactive=False) == 1  # the killed connection
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "PONG"
    assert lines[1].startswith("Error:")  # the killed connection
    assert lines[2:] == ["PONG", "(integer) 0"]  # then a fresh one


def test_repl_against_a_dead_port(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    lines = iter(["PING", "help QLEN"])
    monkeypatch.setattr(
        _LineReader, "read", lambda self, prompt: (next(lines, None) or _eof()).encode()
    )
    assert repl(Session("127.0.0.1", port, None), raw=False, interactive=False) == 1
    out = capsys.readouterr().out
    assert f"Could not connect to Conveyor at 127.0.0.1:{port}" in out
    assert "QLEN queue" in out  # help works without a node


def _eof() -> str:
    raise EOFError


# -- piped: the exit code says whether every command succeeded -------------------------------
@pytest.mark.parametrize(
    ("script", "pongs"),
    [
        ("PING\nNOPE\nPING\n", 2),  # an error reply
        ("PING\nACKJOB nope\n", 1),  # an error reply as the last command
        ('PING "open\nPING\n', 1),  # a line that could not be sent
    ],
)
def test_piped_commands_exit_1_when_one_failed(node: NodeProcess, script: str, pongs: int) -> None:
    result = run_cli("-p", str(node.port), input=script)
    assert result.returncode == 1, result.stdout
    # Every reply is still printed, the failing ones included.
    assert result.stdout.count("PONG") == pongs
    assert "(error)" in result.stdout or "Invalid argument(s)" in result.stdout


def test_piped_commands_exit_0_when_all_succeeded(node: NodeProcess, raw: redis.Redis) -> None:
    # help for an unknown topic, empty lines and quit are not failed commands.
    result = run_cli("-p", str(node.port), input="PING\n\nhelp nosuch\nQLEN q\nquit\nNOPE\n")
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[-1] == "(integer) 0"


def test_piped_commands_to_a_dead_node_exit_1() -> None:
    result = run_cli("-p", str(free_port()), input="PING\n")
    assert result.returncode == 1
    assert "Could not connect to Conveyor" in result.stdout
