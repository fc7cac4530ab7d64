"""`conveyor cli`: a redis-cli-like command line for Conveyor/Disque nodes.

    conveyor cli [-h HOST] [-p PORT] [-a PASSWORD] [--raw] [COMMAND ARGS...]

With a command it is sent once, the reply printed like redis-cli prints it, and the exit
code is 1 for an error reply. Without one it reads commands from a prompt (readline line
editing, history in ~/.conveyor_history, TAB completion of command names), or from
standard input when that is not a terminal: then the exit code is 1 when any of them
failed (redis-cli's is 0 whatever happened, which a script cannot check).

Replies are read and printed as redis-cli prints them by client/_cli_replies.py.
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
import redis
import redis.connection
from redis.backoff import NoBackoff
from redis.retry import Retry

from conveyor.client._cli_replies import (
    ErrorReply,
    Reply,
    TypedRESP2Parser,
    format_raw,
    format_reply,
)
from conveyor.client._help import COMMANDS, command_help, general_help, group_help
from conveyor.protocol.inline import split_args

HISTORY_FILE = ".conveyor_history"
HISTORY_LENGTH = 1000


# -- the connection ------------------------------------------------------------------------
class CliConnectionError(Exception):
    """The node cannot be reached; the text is what to show the user."""


class Session:
    """One connection to one node, reconnected (and re-authenticated) on demand."""

    def __init__(
        self,
        host: str,
        port: int,
        password: str | None,
        connect_timeout: float = 5.0,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.password = password
        self._warn = warn or (lambda message: click.echo(message, err=True))
        self._connection = redis.connection.Connection(
            host=host,
            port=port,
            protocol=2,
            socket_timeout=None,  # GETJOB may block as long as the user wants
            socket_connect_timeout=connect_timeout,
            socket_keepalive=True,
            driver_info=None,
            parser_class=TypedRESP2Parser,
            retry=Retry(NoBackoff(), 0),
        )
        self.connected = False

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def connect(self) -> None:
        if self.connected:
            return
        try:
            self._connection.connect()
        except redis.RedisError as exc:
            self._connection.disconnect()
            raise CliConnectionError(
                f"Could not connect to Conveyor at {self.address}: {_reason(exc)}"
            ) from exc
        except UnicodeError as exc:  # getaddrinfo's IDNA encoding: not a host name
            self._connection.disconnect()
            raise CliConnectionError(
                f"Could not connect to Conveyor at {self.address}: invalid host name ({exc})"
            ) from exc
        self.connected = True
        if self.password:
            # fsencode: a password from argv or the environment may hold any bytes.
            reply = self._exchange([b"AUTH", os.fsencode(self.password)])
            if isinstance(reply, ErrorReply):
                self._warn(f"AUTH failed: {reply}")

    def _exchange(self, args: Sequence[bytes]) -> Reply:
        try:
            self._connection.send_command(*args, check_health=False)
            return self._connection.read_response()
        except BaseException as exc:
            self.disconnect()
            if isinstance(exc, redis.RedisError):
                raise CliConnectionError(f"Error: {_reason(exc)}") from exc
            raise

    def call(self, args: Sequence[bytes]) -> Reply:
        """Send one command; connection trouble raises CliConnectionError."""
        self.connect()
        return self._exchange(args)

    def disconnect(self) -> None:
        self.connected = False
        self._connection.disconnect()


def _reason(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    return str(exc)


# -- one shot and REPL ---------------------------------------------------------------------
# Commands whose bulk reply is text meant for humans: printed raw, as redis-cli does.
_RAW_OUTPUT = {
    (b"info",),
    (b"cluster", b"nodes"),
    (b"cluster", b"info"),
    (b"client", b"list"),
    (b"latency", b"doctor"),
    (b"latency", b"graph"),
}


def _wants_raw(args: Sequence[bytes]) -> bool:
    words = tuple(arg.lower() for arg in args[:2])
    return words[:1] in _RAW_OUTPUT or words in _RAW_OUTPUT


def _show(reply: Reply, raw: bool) -> None:
    click.echo(format_raw(reply) if raw else format_reply(reply))


def run_once(session: Session, args: Sequence[bytes], raw: bool) -> int:
    """Send one command and print its reply; the exit code."""
    try:
        reply = session.call(args)
    except CliConnectionError as exc:
        click.echo(str(exc), err=True)
        return 1
    _show(reply, raw or (_wants_raw(args) and not isinstance(reply, ErrorReply)))
    return 1 if isinstance(reply, ErrorReply) else 0


def help_text(topic: Sequence[bytes]) -> str:
    if not topic:
        return general_help()
    name = topic[0].decode("utf-8", errors="replace")
    text = group_help(name[1:]) if name.startswith("@") else command_help(name)
    if text is None:
        return f"No help for '{name}'. Type 'help' for the list of commands."
    return text


class _LineReader:
    """input() with readline's editing, history and completion on a terminal."""

    def __init__(self, interactive: bool) -> None:
        self.interactive = interactive
        self.history_path = Path.home() / HISTORY_FILE
        self._readline: Any = None
        if interactive:
            try:
                import readline
            except ImportError:  # pragma: no cover - Windows without pyreadline
                return
            self._readline = readline
            readline.set_history_length(HISTORY_LENGTH)
            try:
                readline.read_history_file(self.history_path)
            except OSError:
                pass
            words = sorted({*COMMANDS, "HELP", "QUIT", "EXIT"})
            readline.set_completer(_completer(words))
            readline.set_completer_delims(" \t")
            readline.parse_and_bind("tab: complete")

    def read(self, prompt: str) -> bytes:
        """One line, without its newline; EOFError at the end of input."""
        if self.interactive:
            return input(prompt).encode("utf-8", errors="surrogateescape")
        # Bytes as they come: decoding them in the locale's encoding (strict outside the
        # C locale) would end the session on a line that is not UTF-8.
        line = sys.stdin.buffer.readline()
        if not line:
            raise EOFError
        return line.removesuffix(b"\n")

    def save(self) -> None:
        if self._readline is None:
            return
        try:
            self._readline.write_history_file(self.history_path)
        except OSError:
            pass


def _completer(words: list[str]) -> Callable[[str, int], str | None]:
    def complete(text: str, state: int) -> str | None:
        upper = text.upper()
        matches = [word for word in words if word.startswith(upper)]
        if text.islower():
            matches = [word.lower() for word in matches]
        return matches[state] if state < len(matches) else None

    return complete


def repl(session: Session, raw: bool, interactive: bool | None = None) -> int:
    """The prompt, or the commands piped on standard input; returns the exit code.

    At a prompt it is 0, as in redis-cli: the user saw each reply. Piped, it is 1 when
    any command failed (an error reply, a line that could not be sent, a node that could
    not be reached), so a script can tell; every reply is printed all the same."""
    if interactive is None:
        interactive = sys.stdin.isatty()
    reader = _LineReader(interactive)
    if interactive:
        try:
            session.connect()
        except CliConnectionError as exc:
            click.echo(str(exc), err=True)
    failed = False
    try:
        while True:
            prompt = f"{session.address}> " if session.connected else "not connected> "
            try:
                line = reader.read(prompt)
            except EOFError:
                break
            except KeyboardInterrupt:
                click.echo("")
                failed = True  # piped: the commands left were never run
                break
            except UnicodeDecodeError:  # a terminal's line, not in its locale's encoding
                click.echo("Invalid argument(s): not text in the terminal's encoding")
                continue
            outcome = _run_line(session, line, raw)
            if outcome is _Outcome.QUIT:
                break
            failed = failed or outcome is _Outcome.FAILED
    finally:
        reader.save()
        session.disconnect()
    return 1 if failed and not interactive else 0


class _Outcome(enum.Enum):
    DONE = "done"
    FAILED = "failed"
    QUIT = "quit"


def _run_line(session: Session, line: bytes, raw: bool) -> _Outcome:
    """One line of the prompt or of the piped script: run and printed."""
    args = split_args(line)
    if args is None:
        click.echo("Invalid argument(s)")
        return _Outcome.FAILED
    if not args:
        return _Outcome.DONE
    name = args[0].lower()
    if name in (b"quit", b"exit"):
        return _Outcome.QUIT
    if name == b"help":
        click.echo(help_text(args[1:]))
        return _Outcome.DONE
    if name == b"clear" and len(args) == 1:
        click.clear()
        return _Outcome.DONE
    try:
        reply = session.call(args)
    except CliConnectionError as exc:
        click.echo(str(exc))
        return _Outcome.FAILED
    except KeyboardInterrupt:  # e.g. a long GETJOB; the connection was closed
        click.echo("")
        return _Outcome.FAILED
    failed = isinstance(reply, ErrorReply)
    _show(reply, raw or (_wants_raw(args) and not failed))
    return _Outcome.FAILED if failed else _Outcome.DONE


@click.command(
    name="cli",
    context_settings={
        "help_option_names": ["--help"],
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
    },
)
@click.option("-h", "--host", default="127.0.0.1", show_default=True, help="Node host.")
@click.option(
    "-p",
    "--port",
    default=7711,
    show_default=True,
    # Not just int: getaddrinfo takes a port modulo 65536 (83447 would reach 17911).
    type=click.IntRange(1, 65535),
    help="Node port.",
)
@click.option(
    "-a",
    "--password",
    default=None,
    envvar="CONVEYOR_PASSWORD",
    help="Password (AUTH); also read from $CONVEYOR_PASSWORD.",
)
@click.option("--raw", is_flag=True, help="Print replies raw, without quotes or types.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def cli(host: str, port: int, password: str | None, raw: bool, command: tuple[str, ...]) -> None:
    """Talk to a node: one COMMAND, or a prompt when none is given (like redis-cli).

    \b
    Examples:
      conveyor cli ADDJOB emails "hello" 0
      conveyor cli -p 7712 QLEN emails
      conveyor cli            # interactive; type 'help' or 'help ADDJOB'
    """
    session = Session(host, port, password)
    if command:
        args = [os.fsencode(word) for word in command]
        code = run_once(session, args, raw)
        session.disconnect()
        sys.exit(code)
    sys.exit(repl(session, raw))
