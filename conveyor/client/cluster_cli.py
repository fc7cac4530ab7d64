"""`conveyor cluster`: operator commands over a cluster's nodes (drain, status).

Plain client commands (HELLO, CLUSTER, INFO, QSCAN, QLEN) on redis-py connections: this
module holds no cluster logic of its own, so it works against C Disque nodes too.
"""

from __future__ import annotations

import math
import os
import time

import click
import redis

from conveyor.client._address import format_address, parse_address


def _connect(address: str, password: str | None) -> redis.Redis:
    try:
        host, port = parse_address(address)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    try:
        host.encode("idna")  # as getaddrinfo will, where a UnicodeError is a traceback
    except UnicodeError as exc:
        raise click.BadParameter(f"invalid host in node address {address!r}: {exc}") from None
    # Bytes: a password from argv or the environment may hold any bytes (surrogates in
    # str), which redis-py's UTF-8 encoding of a str would fail on with a traceback.
    secret = None if password is None else os.fsencode(password)
    return redis.Redis(host=host, port=port, password=secret, protocol=2, socket_timeout=10)


def queued_jobs(client: redis.Redis) -> int:
    """Jobs queued on the node: the lengths of all its queues."""
    _, names = client.execute_command("QSCAN", "BUSYLOOP")
    return sum(int(client.execute_command("QLEN", name)) for name in names)


@click.group()
def cluster() -> None:
    """Operate a cluster: drain a node before it leaves, see every node at once."""


def _seconds(ctx: click.Context, param: click.Parameter, value: float) -> float:
    # FloatRange lets NaN through (no comparison with it is true), and a deadline of NaN
    # is never reached: the drain would wait forever.
    if math.isnan(value):
        raise click.BadParameter("nan is not a number of seconds.", ctx, param)
    return value


@cluster.command()
@click.argument("address")
@click.option(
    "--timeout",
    default=300.0,
    type=click.FloatRange(min=0),
    callback=_seconds,
    show_default=True,
    help="Seconds to wait at most (inf: no limit).",
)
@click.option("-a", "--password", envvar="CONVEYOR_PASSWORD", help="AUTH password.")
def drain(address: str, timeout: float, password: str | None) -> None:
    """Set ADDRESS (host:port) leaving, then wait until it holds no queued job.

    A leaving node takes no new jobs (they are replicated to other nodes), answers
    GETJOB with -LEAVING so consumers move, and hands its queued jobs to the others.
    Exit status 0 once it holds none, 1 at the timeout."""
    try:
        client = _connect(address, password)
        client.execute_command("CLUSTER", "LEAVING", "yes")
        deadline = time.monotonic() + timeout
        last = -1
        while True:
            left = queued_jobs(client)
            if left != last:
                click.echo(f"{address}: {left:,} queued job(s) left")
                last = left
            if left == 0:
                click.echo(f"{address} holds no queued job: it can be stopped.")
                return
            if time.monotonic() >= deadline:
                raise click.ClickException(f"{address} still holds {left:,} queued job(s)")
            time.sleep(0.2)
    except redis.RedisError as exc:
        raise click.ClickException(f"{address}: {exc}") from None


@cluster.command()
@click.argument("address")
@click.option("-a", "--password", envvar="CONVEYOR_PASSWORD", help="AUTH password.")
def status(address: str, password: str | None) -> None:
    """Every node of ADDRESS's cluster: flags, jobs and queues held, priority.

    Exit status 1 when a node does not answer (its row says so), 0 otherwise."""
    try:
        client = _connect(address, password)
        flags = _flags(client.execute_command("CLUSTER", "NODES").decode())
        _, myself, *nodes = client.execute_command("HELLO")
    except redis.RedisError as exc:
        raise click.ClickException(f"{address}: {exc}") from None
    click.echo(f"{'node':42} {'address':22} {'flags':16} {'prio':>4} {'jobs':>10} {'queues':>7}")
    failed: list[str] = []
    for node_id, host, port, priority in nodes:
        # The node asked is reached as the user reached it: its HELLO may not know its
        # own IP (empty before any MEET), and a peer's IPv6 address needs brackets.
        is_myself = node_id == myself
        where = address if is_myself else format_address((host.decode(), int(port)))
        try:
            info = (client if is_myself else _connect(where, password)).info()
            jobs, queues = f"{info['registered_jobs']:,}", f"{info['registered_queues']:,}"
        except (redis.RedisError, click.BadParameter) as exc:
            jobs, queues = "unreachable", "-"
            failed.append(f"{where} ({_first_line(exc)})")
        name = node_id.decode()
        line = f"{name:42} {where:22} {flags.get(name, '?'):16} {int(priority):>4}"
        click.echo(f"{line} {jobs:>10} {queues:>7}")
    if failed:
        raise click.ClickException(f"no answer from {len(failed)} node(s): {', '.join(failed)}")


def _first_line(exc: Exception) -> str:
    text = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _flags(nodes_text: str) -> dict[str, str]:
    """node ID -> its flags, from CLUSTER NODES."""
    return {fields[0]: fields[2] for fields in (line.split() for line in nodes_text.splitlines())}
