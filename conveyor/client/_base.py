"""What `Client` and `AsyncClient` share: node list, discovery state, redis-py options."""

from __future__ import annotations

import inspect
import math
import os
import random
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, Self

from redis.maint_notifications import MaintNotificationsConfig

from conveyor.client import _commands as cmd
from conveyor.client import _parse, _routing
from conveyor.client._address import (
    Address,
    NodeSpec,
    format_address,
    parse_nodes,
    parse_url,
)
from conveyor.client._commands import JobRef
from conveyor.client.errors import ConnectionError, ReplyError
from conveyor.client.job import Hello, Job, NodeInfo

# How many of the nodes tried the "no reachable node" error names (a cluster's list may be
# long; the count of the others is given).
NAMED_FAILURES = 8


def _reason(failed: ConnectionError) -> str:
    """Why `failed` failed: the system's words for the socket error under it, which the
    twins would word apart ("Connection refused" in redis-py's blocking connect,
    "Connect call failed" in asyncio's), else its message without its address."""
    cause: BaseException | None = failed
    for _ in range(4):  # ours, redis-py's, the OSError: a chain of three, bounded anyway
        cause = None if cause is None else cause.__cause__ or cause.__context__
        if isinstance(cause, socket.gaierror) and cause.strerror:
            return cause.strerror  # a name lookup: its errno is no strerror() number
        if isinstance(cause, OSError) and cause.errno:
            return os.strerror(cause.errno)
    text = str(failed)
    prefix = f"{failed.address}: "
    return text[len(prefix) :] if failed.address and text.startswith(prefix) else text


def _timeout(name: str, value: object) -> float | None:
    """A socket timeout in seconds, checked here: redis-py takes anything and fails on
    the first command, differently in each twin (0 times out every connect, -1 is a
    ValueError in Client and a connect timeout in AsyncClient, inf an OverflowError)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds or None, not {type(value).__name__}")
    if not 0 < value < threading.TIMEOUT_MAX:  # NaN fails both comparisons
        raise ValueError(f"{name} must be a number of seconds > 0 (None: no timeout), not {value}")
    return float(value)


def _max_connections(value: object) -> int | None:
    """Checked here for the same reason as the timeouts: redis-py took 0 as "no limit" and
    refused -1 or 1.5 only on the first command."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_connections must be an int or None, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"max_connections must be >= 1 (None: no limit), not {value}")
    return value


def check_redis_options(redis_class: type, options: dict[str, Any]) -> None:
    """Options passed on to redis-py must be ones `redis_class` takes: a misspelt one
    failed only on the first command, as a TypeError from inside redis-py."""
    known = inspect.signature(redis_class.__init__).parameters
    unknown = sorted(name for name in options if name not in known)
    if unknown:
        raise TypeError(f"unknown client option(s): {', '.join(unknown)}")


class BaseClient:
    """Connection settings and the nodes learnt from HELLO. No I/O here."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec] | str | None = None,
        *,
        password: str | None = None,
        socket_timeout: float | None = 10.0,
        socket_connect_timeout: float | None = None,
        max_connections: int | None = None,
        follow_jobs: bool = True,
        **redis_options: Any,
    ) -> None:
        self._rand = random.Random()
        # First contact in random order: clients spread, and a dead first entry does
        # not cost each of them a timeout (_routing.py).
        self._configured: list[Address] = _routing.shuffled(parse_nodes(nodes), self._rand)
        self._follow_jobs = follow_jobs  # a consumer moves to where its jobs come from
        self._sources = _routing.JobSources()
        self._prefer: Address | None = None  # where to connect next (a move)
        self._avoid: set[Address] = set()  # answered -LEAVING: tried last
        self._peer_health = _routing.PeerHealth()  # job makers that failed: skipped a while
        self._hello_due = 0.0  # when HELLO may be asked again after a peer failed
        self._password = password
        self._socket_timeout = _timeout("socket_timeout", socket_timeout)
        self._socket_connect_timeout = (
            self._socket_timeout
            if socket_connect_timeout is None
            else _timeout("socket_connect_timeout", socket_connect_timeout)
        )
        self._max_connections = _max_connections(max_connections)
        self._redis_options = redis_options
        self._address: Address | None = None
        self._hello: Hello | None = None
        # Nodes that refused redis-py's `HELLO 3` (Disque servers): spoken to in RESP2.
        self._resp2_nodes: set[Address] = set()
        self._closed = False
        self._init_io()

    def _init_io(self) -> None:
        """The I/O side's own state (its redis-py client and lock); set by subclasses."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """`Client.from_url("disque://:secret@10.0.0.1:7711,10.0.0.2:7711")`."""
        addresses, url_options = parse_url(url)
        return cls(addresses, **{**url_options, **options})

    @staticmethod
    def _unreachable(failures: list[ConnectionError]) -> ConnectionError:
        """The error when no node answered: each address tried and why it failed (the
        first `NAMED_FAILURES`, then how many more). Its `.address` is the node's when
        one was tried, None when several were: no one address is to blame."""
        if len(failures) == 1:
            only = failures[0]
            return ConnectionError(f"no reachable node ({_reason(only)})", only.address)
        named = "; ".join(
            f"{failed.address} ({_reason(failed)})" for failed in failures[:NAMED_FAILURES]
        )
        more = len(failures) - NAMED_FAILURES
        rest = f"; and {more} more" if more > 0 else ""
        return ConnectionError(f"no reachable node of {len(failures)} tried: {named}{rest}")

    # -- what the client knows -------------------------------------------------------------
    @property
    def address(self) -> str | None:
        """`host:port` of the node the client talks to, None before the first command."""
        return None if self._address is None else format_address(self._address)

    @property
    def node_id(self) -> str | None:
        """The ID of the connected node (from HELLO), None before the first command."""
        return None if self._hello is None else self._hello.node_id

    @property
    def nodes(self) -> list[NodeInfo]:
        """Every node the connected node reported in HELLO (itself included)."""
        return [] if self._hello is None else list(self._hello.nodes)

    @property
    def configured_nodes(self) -> list[str]:
        return [format_address(address) for address in self._configured]

    def _candidates(self) -> list[Address]:
        """Where to connect: a node to move to, the current node, the configured ones
        (shuffled), then the nodes HELLO reported, healthiest first; nodes that answered
        -LEAVING last."""
        order: list[Address] = []
        if self._prefer is not None:
            order.append(self._prefer)
        if self._address is not None:
            order.append(self._address)
        order += self._configured
        if self._hello is not None:
            for node in sorted(self._hello.nodes, key=lambda n: n.priority):
                order.append((node.host, node.port))
        unique: list[Address] = []
        for address in order:
            if address not in unique:
                unique.append(address)
        avoided = [address for address in unique if address in self._avoid]
        return [address for address in unique if address not in self._avoid] + avoided

    def _learn_nodes(self, hello: Hello) -> set[Address]:
        """Take `hello` as the nodes known; returns their addresses. What is kept per node
        is forgotten for the nodes it no longer lists (they left or were forgotten), so
        it stays bounded by the cluster's size however many nodes come and go. The
        twins drop their peer connections to the same nodes."""
        self._hello = hello
        listed = {(node.host, node.port) for node in hello.nodes}
        self._peer_health.keep_only(listed)
        # Configured nodes and the current one are tried again whether listed or not.
        reachable = listed | set(self._configured)
        if self._address is not None:
            reachable.add(self._address)
        self._avoid &= reachable
        self._resp2_nodes &= reachable
        return listed

    def _route(self, refs: Iterable[JobRef]) -> Address | None:
        """The other node a command about these jobs goes to; None: where the client is
        (the jobs' maker is this node, unknown, or failed lately)."""
        target = _routing.route((cmd.job_id_of(ref) for ref in refs), self._hello)
        if target is None or self._peer_health.is_down(target, time.monotonic()):
            return None
        return target

    def _peer_failed(self, target: Address) -> bool:
        """Skip `target` for a while; True when HELLO should be asked again now (at most
        every HELLO_REFRESH_S), so nodes the cluster knows are failing stop being used."""
        now = time.monotonic()
        listed = [(node.host, node.port) for node in self.nodes]
        self._peer_health.failed(target, now, listed)
        if now < self._hello_due:
            return False
        self._hello_due = now + _routing.HELLO_REFRESH_S
        return True

    def _moved(self, jobs: list[Job]) -> Address | None:
        """After a GETJOB: where this consumer should move, if most of its jobs come
        from one other node (and following them is on)."""
        if not self._follow_jobs or not jobs:
            return None
        return self._sources.observe((job.id for job in jobs), self._hello)

    def _redis_kwargs(self, address: Address) -> dict[str, Any]:
        host, port = address
        options: dict[str, Any] = {
            "host": host,
            "port": port,
            "password": self._password,
            # redis-py's default protocol (RESP3 since redis-py 8: `HELLO 3` on connect);
            # Conveyor replies decode to the same values in RESP2 and RESP3.
            "socket_timeout": self._socket_timeout,
            "socket_connect_timeout": self._socket_connect_timeout,
            "socket_keepalive": True,
            # A new connection sends HELLO (and AUTH) only: no CLIENT SETINFO, and no
            # CLIENT MAINT_NOTIFICATIONS (a Redis Enterprise feature; Conveyor would
            # answer each with an error redis-py ignores, one round trip each).
            "driver_info": None,
            "maint_notifications_config": MaintNotificationsConfig(enabled=False),
            "encoding_errors": _parse.ENCODING_ERRORS,
            "max_connections": self._max_connections,
        }
        if address in self._resp2_nodes:
            options["protocol"] = 2
        options.update(self._redis_options)
        return options

    def _resp3_refused(self, address: Address, exc: ReplyError) -> bool:
        """True when `exc` is a node's answer to redis-py's `HELLO 3` handshake saying it
        does not speak RESP3 (Disque: HELLO takes no argument; Redis < 6: no HELLO;
        `NOPROTO`); the address is then remembered, to be spoken to in RESP2.

        False when it is already, or the caller chose a protocol: the error stands.
        """
        if address in self._resp2_nodes or "protocol" in self._redis_options:
            return False
        text = str(exc).lower()
        if not (
            text.startswith("noproto")
            or "wrong number of arguments for 'hello'" in text
            or ("unknown command" in text and "hello" in text)
        ):
            return False
        self._resp2_nodes.add(address)
        return True

    def _read_timeout(self, wait_s: float | None) -> float | None:
        """The socket read timeout for a command that may take `wait_s` on the node;
        None blocks forever."""
        if wait_s is None:
            return self._socket_timeout
        if math.isinf(wait_s) or self._socket_timeout is None:
            return None
        limit = wait_s + max(self._socket_timeout, 1.0)
        # A socket cannot wait longer (OverflowError, raised after the command was sent);
        # that is about 292 years: as long as it takes.
        return None if limit >= threading.TIMEOUT_MAX else limit

    def __repr__(self) -> str:
        where = self.address or ",".join(self.configured_nodes)
        return f"<{type(self).__name__} {where}>"
