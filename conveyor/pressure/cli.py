"""`conveyor pressure ...`: create, feed, drain, inspect and repair pressure queues.

Errors print one line on stderr and exit non-zero: 1 for errors, 3 when the queue is closed
(and drained, for `get`), 4 when the call would block (empty, full, or role in use).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import click

from conveyor.pressure.errors import (
    PressureConnectionError,
    PressureError,
    QueueClosed,
    QueueDoesNotExist,
    QueueEmpty,
    QueueFull,
    QueueInUse,
)
from conveyor.pressure.keys import key_bytes
from conveyor.pressure.queue import PressureQueue, list_queues

P = ParamSpec("P")
R = TypeVar("R")

EXIT_ERROR = 1
EXIT_CLOSED = 3
EXIT_WOULD_BLOCK = 4


@dataclass(frozen=True)
class _Settings:
    redis_url: str | None
    prefix: str | None

    def queue(self, name: str) -> PressureQueue:
        return PressureQueue(name, redis_url=self.redis_url, prefix=self.prefix)


def _exit_code(exc: Exception) -> int:
    if isinstance(exc, QueueClosed):
        return EXIT_CLOSED
    if isinstance(exc, QueueEmpty | QueueFull | QueueInUse):
        return EXIT_WOULD_BLOCK
    return EXIT_ERROR


def _reported(func: Callable[P, R]) -> Callable[P, R]:
    """Turn library errors into a one-line message and an exit status, without a traceback."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (PressureError, ValueError, TypeError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(_exit_code(exc))

    return wrapper


def _settings() -> _Settings:
    settings = click.get_current_context().find_object(_Settings)
    assert settings is not None, "the pressure group always sets its settings"
    return settings


_timeout = click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="Give up after this many seconds (default: wait forever).",
)
_nowait = click.option("--nowait", is_flag=True, help="Fail at once instead of waiting.")


@click.group(name="pressure")
@click.option(
    "--redis",
    "redis_url",
    metavar="URL",
    default=None,
    help="Redis URL (default: REDIS_SERVER/REDIS_PORT/REDIS_DB, else redis://127.0.0.1:6379/0).",
)
@click.option(
    "--prefix",
    default=None,
    help="Key prefix (default: PRESSURE_PREFIX, else __pressure__).",
)
@click.pass_context
def pressure(ctx: click.Context, redis_url: str | None, prefix: str | None) -> None:
    """Bounded, blocking, exclusive FIFO queues in Redis (the pressure protocol)."""
    ctx.obj = _Settings(redis_url, prefix)


@pressure.command()
@click.argument("name")
@click.option(
    "--bound",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Maximum length; 0 means unbounded.",
)
@_reported
def create(name: str, bound: int) -> None:
    """Create queue NAME."""
    _settings().queue(name).create(bound)


@pressure.command()
@click.argument("name")
@click.argument("data")
@_nowait
@_timeout
@_reported
def put(name: str, data: str, nowait: bool, timeout: float | None) -> None:
    """Append DATA to queue NAME ("-" reads the element from stdin)."""
    # os.fsencode gives back the argv bytes Python decoded (surrogateescape), so DATA that
    # is not UTF-8 is stored as given rather than refused.
    payload = sys.stdin.buffer.read() if data == "-" else os.fsencode(data)
    _settings().queue(name).put(payload, block=not nowait, timeout=timeout)


@pressure.command()
@click.argument("name")
@_nowait
@_timeout
@_reported
def get(name: str, nowait: bool, timeout: float | None) -> None:
    """Remove the oldest element of queue NAME and print it."""
    data = _settings().queue(name).get(block=not nowait, timeout=timeout)
    click.echo(data)


@pressure.command()
@click.argument("name")
@_nowait
@_timeout
@_reported
def close(name: str, nowait: bool, timeout: float | None) -> None:
    """Close queue NAME: producers fail from now on, consumers drain what is left."""
    _settings().queue(name).close(block=not nowait, timeout=timeout)


@pressure.command()
@click.argument("name")
@_timeout
@click.option(
    "--force",
    is_flag=True,
    help="Remove all keys at once without waiting for the producer and consumer.",
)
@_reported
def delete(name: str, timeout: float | None, force: bool) -> None:
    """Delete queue NAME, waking any client blocked on it."""
    _settings().queue(name).delete(timeout, force=force)


@pressure.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_reported
def stat(name: str, as_json: bool) -> None:
    """Show length, bound, roles and counters of queue NAME."""
    stats = _settings().queue(name).stats().as_dict()
    if as_json:
        click.echo(json.dumps(stats, sort_keys=True))
        return
    width = max(len(key) for key in stats)
    for key, value in stats.items():
        _echo_name_text(f"{key:<{width}}  {_show(value)}")


def _echo_name_text(line: str) -> None:
    """Print text holding a queue name as the name's bytes: a name that is not UTF-8 comes
    from Redis (and argv) as lone surrogates, which click would print as U+FFFD."""
    click.echo(key_bytes(line))


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


@pressure.command(name="ls")
@click.option("-l", "--long", "long_format", is_flag=True, help="Also show bound, length, closed.")
@_reported
def ls(long_format: bool) -> None:
    """List the queues under the prefix."""
    settings = _settings()
    names = list_queues(redis_url=settings.redis_url, prefix=settings.prefix)
    unreadable = False
    for name in names:
        if not long_format:
            _echo_name_text(name)
            continue
        try:
            stats = settings.queue(name).stats()
        except QueueDoesNotExist:
            continue  # deleted since the scan
        except PressureConnectionError:
            raise  # the whole server: one message, not one per queue
        except PressureError as exc:
            # A queue whose keys are broken must show, not vanish from the listing.
            click.echo(f"error: {exc}", err=True)
            unreadable = True
            continue
        closed = "closed" if stats.closed else "open"
        _echo_name_text(f"{name}\tbound={stats.bound}\tlength={stats.length}\t{closed}")
    if unreadable:
        sys.exit(EXIT_ERROR)


@pressure.command()
@click.argument("name")
@click.option("--producer", is_flag=True, help="Only the producer role.")
@click.option("--consumer", is_flag=True, help="Only the consumer role.")
@click.option("--force", is_flag=True, help="Even if the holder looks alive (same host, live pid).")
@_reported
def unlock(name: str, producer: bool, consumer: bool, force: bool) -> None:
    """Give back the role(s) of queue NAME held by a crashed client, and lost room."""
    both = not producer and not consumer
    result = (
        _settings()
        .queue(name)
        .unlock(producer=producer or both, consumer=consumer or both, force=force)
    )
    released = False
    for role, done, holder in (
        ("producer", result.producer_released, result.producer),
        ("consumer", result.consumer_released, result.consumer),
    ):
        if done:
            released = True
            click.echo(f"released the {role} role (last holder: {holder or 'unknown'})")
    if result.not_full_restored:
        click.echo("restored the :not_full marker (room in the queue)")
    if not released:
        click.echo("nothing to unlock: the role(s) are free")
