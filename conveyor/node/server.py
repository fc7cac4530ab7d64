"""The asyncio server: accepts clients, dispatches commands, drives the core's timers.

One `Connection` per client parses its bytes, runs each request through the command
table and writes all replies of one read in a single `write`, so pipelined clients cost
one syscall per batch. The core says when it next needs time (`next_deadline`); the
server arms exactly one event-loop timer for that, so an idle node does not wake up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

from conveyor.core.engine import Engine, EngineConfig
from conveyor.core.errors import CommandError
from conveyor.core.waiters import Waiter
from conveyor.node import gc_policy, nodeid
from conveyor.node.commands import COMMANDS, Command
from conveyor.node.config import Config, ConfigError
from conveyor.node.event_log import EventLog, EventLogCounters
from conveyor.node.replies import encode_getjob_reply
from conveyor.node.stats import Stats
from conveyor.protocol.resp import (
    NULL_ARRAY_BYTES,
    ProtocolError,
    RequestParser,
    error,
)

log = logging.getLogger("conveyor.node")

_perf_ns = time.perf_counter_ns
# Buffered job events are written at most this long after they happen (event_log.py).
EVENT_LOG_FLUSH_S = 1.0


def now_ms() -> int:
    return int(time.time() * 1000)


class Connection(asyncio.Protocol):
    __slots__ = (
        "addr",
        "authenticated",
        "closed",
        "created_ms",
        "id",
        "last_io_ms",
        "name",
        "parser",
        "pending",
        "server",
        "transport",
        "waiter",
    )

    def __init__(self, server: Server) -> None:
        self.server = server
        self.parser = RequestParser(server.config["proto-max-bulk-len"])
        self.transport: asyncio.Transport | None = None
        self.authenticated = not server.config["requirepass"]
        self.waiter: Waiter | None = None  # set while blocked in GETJOB
        self.pending: list[list[bytes]] = []  # requests pipelined behind a blocked GETJOB
        self.closed = False
        self.id = 0
        self.name = b""
        self.addr = ""
        self.created_ms = now_ms()
        self.last_io_ms = self.created_ms

    # -- asyncio callbacks -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.addr = f"{peer[0]}:{peer[1]}"
        else:  # a Unix socket, named as Redis does in CLIENT LIST
            self.addr = f"{self.server.config['unixsocket']}:0"
        keepalive_s = self.server.config["tcp-keepalive"]
        sock = transport.get_extra_info("socket")
        if keepalive_s and sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if hasattr(socket, "TCP_KEEPIDLE"):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, keepalive_s)
        self.server.client_connected(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.client_disconnected(self)
        self.transport = None  # break the protocol <-> transport cycle (see gc_policy)

    def data_received(self, data: bytes) -> None:
        server = self.server
        server.stats.net_input_bytes += len(data)
        server.now = self.last_io_ms = now_ms()
        out: list[bytes] = []
        try:
            for request in self.parser.feed(data):
                if self.waiter is not None or self.pending:
                    self.pending.append(request)
                    continue
                reply = server.execute(self, request)
                if reply is not None:
                    out.append(reply)
                if self.closed:
                    break
        except ProtocolError as exc:
            out.append(error(f"ERR {exc}"))
            self.write(b"".join(out))
            self.close()
        else:
            if out:
                self.write(b"".join(out))
        # Even after a protocol error: the requests before it may have woken others.
        server.after_io()

    # -- helpers ---------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            # A reply is activity too: a consumer just served after a long GETJOB is not idle.
            self.last_io_ms = self.server.now
            self.server.stats.net_output_bytes += len(data)
            self.transport.write(data)

    def close(self) -> None:
        """Close after the replies already written have been sent."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def resume_after_block(self) -> None:
        """The blocked GETJOB was answered: run what was pipelined behind it."""
        out: list[bytes] = []
        while self.pending and self.waiter is None and not self.closed:
            reply = self.server.execute(self, self.pending.pop(0))
            if reply is not None:
                out.append(reply)
        if out:
            self.write(b"".join(out))


class Server:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.started_ms = now_ms()
        self.now = self.started_ms
        self.data_dir = Path(config["dir"]).resolve()
        self.node_id = nodeid.load_or_create(
            self.data_dir / config["cluster-config-file"], config["port"]
        )
        seed = os.urandom(20)
        self.engine = Engine(
            self.node_id, seed, random.Random(os.urandom(16)), self._engine_config()
        )
        config.on_change = self._config_changed
        self.commands: dict[bytes, Command] = {}
        for command in COMMANDS:
            # rename-command: the command answers to its new name only ("" hides it).
            name = config.renamed_commands.get(command.name.decode(), command.name.decode())
            if name:
                self.commands[name.lower().encode()] = command
                self.commands[name.upper().encode()] = command
        self.stats = Stats()
        self.clients: dict[int, Connection] = {}
        self._next_client_id = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._asyncio_server: asyncio.base_events.Server | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline: int | None = None
        self.shutdown_requested: asyncio.Event | None = None
        self.run_id = os.urandom(20).hex()
        self.baseline_memory = rss_bytes()
        self.peak_memory = 0
        self.on_shutdown: list[Callable[[], None]] = []
        self._oom_guard = 0
        self._unix_server: asyncio.AbstractServer | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._update_memory_guard()
        self.event_log: EventLog | None = None
        self.event_log_counters = EventLogCounters()
        self._event_log_timer: asyncio.TimerHandle | None = None
        self._configure_event_log()

    def reset_node_id(self) -> None:
        """CLUSTER RESET HARD: a new identity, on disk and in new job IDs."""
        path = self.data_dir / self.config["cluster-config-file"]
        path.unlink(missing_ok=True)
        self.node_id = nodeid.load_or_create(path, self.config["port"])
        self.engine.set_node_id(self.node_id)
        if self.event_log is not None:
            self.event_log.set_node_id(self.node_id)

    def _engine_config(self) -> EngineConfig:
        return EngineConfig(
            max_deliveries=self.config["max-deliveries"],
            deadletter_queue=self.config["deadletter-queue"].encode(),
        )

    def _config_changed(self, name: str) -> None:
        if name in ("max-deliveries", "deadletter-queue"):
            self.engine.config = self._engine_config()
        elif name == "maxmemory":
            self._update_memory_guard()
        elif name == "timeout" and self.config["timeout"] and self._idle_timer is None:
            self._arm_idle_check()
        elif name == "loglevel":
            configure_logging(self.config)
        elif name == "event-log":
            self._configure_event_log()

    def event_log_dir(self) -> Path | None:
        """The event-log directory: `event-log` resolved against the data directory."""
        value = self.config["event-log"]
        return self.data_dir / value if value else None

    def _configure_event_log(self) -> None:
        """Open (or switch, or close) the job-event log; ConfigError if unusable."""
        directory = self.event_log_dir()
        new_log = None
        if directory is not None:
            try:
                new_log = EventLog(directory, self.node_id, self.event_log_counters)
            except OSError as exc:
                raise ConfigError(
                    f"cannot use event-log directory '{directory}': {exc.strerror or exc}"
                ) from None
        if self.event_log is not None:
            self.event_log.flush()
        self.event_log = new_log
        engine = self.engine
        engine.listener = new_log.record if new_log is not None else None
        engine.added_queued_listener = new_log.record_added_queued if new_log is not None else None

    def _flush_event_log(self) -> None:
        self._event_log_timer = None
        if self.event_log is not None:
            self.event_log.flush()

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        gc_policy.install()
        self.loop = asyncio.get_running_loop()
        self.shutdown_requested = asyncio.Event()
        hosts = self.config["bind"].split() or ["127.0.0.1"]
        self._asyncio_server = await self.loop.create_server(
            lambda: Connection(self),
            host=hosts,
            port=self.config["port"],
            backlog=self.config["tcp-backlog"],
            reuse_address=True,
        )
        if self.config["unixsocket"]:
            path = self.config["unixsocket"]
            Path(path).unlink(missing_ok=True)
            self._unix_server = await self.loop.create_unix_server(
                lambda: Connection(self), path=path, backlog=self.config["tcp-backlog"]
            )
            if self.config["unixsocketperm"]:
                os.chmod(path, int(str(self.config["unixsocketperm"]), 8))
        if self.config["pidfile"]:
            Path(self.config["pidfile"]).write_text(f"{os.getpid()}\n")
        if self.config["timeout"]:
            self._arm_idle_check()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self.loop.add_signal_handler(sig, self.request_shutdown)
            except (NotImplementedError, RuntimeError):
                pass
        if self.config["appendonly"] or self.config["aof-enqueue-jobs-once"]:
            log.warning(
                "appendonly/aof-enqueue-jobs-once are set, but AOF persistence is not "
                "available yet: jobs are kept in memory only"
            )
        log.info(
            "Conveyor node %s ready to accept connections on %s:%d",
            self.node_id,
            ",".join(hosts),
            self.config["port"],
        )

    def _arm_idle_check(self) -> None:
        # Only runs when `timeout` is set: a configured idle limit is worth one wake-up a second.
        assert self.loop is not None
        self._idle_timer = self.loop.call_later(1.0, self._close_idle_clients)

    def _close_idle_clients(self) -> None:
        limit_ms = self.config["timeout"] * 1000
        if limit_ms:
            now = now_ms()
            for conn in list(self.clients.values()):
                # Blocked consumers are waiting on purpose, as in Redis.
                if conn.waiter is None and now - conn.last_io_ms > limit_ms:
                    conn.close()
            self._arm_idle_check()
        else:
            self._idle_timer = None

    def request_shutdown(self) -> None:
        if self.shutdown_requested is not None:
            self.shutdown_requested.set()

    async def serve_until_shutdown(self) -> None:
        await self.start()
        assert self.shutdown_requested is not None
        await self.shutdown_requested.wait()
        await self.stop()

    async def stop(self) -> None:
        log.warning("User requested shutdown...")
        for callback in self.on_shutdown:
            callback()
        if self._timer is not None:
            self._timer.cancel()
        if self._event_log_timer is not None:
            self._event_log_timer.cancel()
            self._event_log_timer = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._asyncio_server is not None:
            self._asyncio_server.close()
        if self._unix_server is not None:
            self._unix_server.close()
            Path(self.config["unixsocket"]).unlink(missing_ok=True)
        if self.config["pidfile"]:
            Path(self.config["pidfile"]).unlink(missing_ok=True)
        for conn in list(self.clients.values()):
            conn.close()
        if self._asyncio_server is not None:
            await self._asyncio_server.wait_closed()
        if self.event_log is not None:
            self.event_log.flush()
        log.warning("Conveyor is now ready to exit, bye bye...")

    # -- clients -----------------------------------------------------------------------------
    def client_connected(self, conn: Connection) -> None:
        if len(self.clients) >= self.config["maxclients"]:
            self.stats.rejected_connections += 1
            conn.write(error("ERR max number of clients reached"))
            conn.close()
            return
        self._next_client_id += 1
        conn.id = self._next_client_id
        self.clients[conn.id] = conn
        self.stats.connections_received += 1

    def client_disconnected(self, conn: Connection) -> None:
        self.clients.pop(conn.id, None)
        if conn.waiter is not None:
            self.engine.unblock(conn.waiter)
            conn.waiter = None
        conn.pending.clear()

    # -- commands ----------------------------------------------------------------------------
    def execute(self, conn: Connection, request: list[bytes]) -> bytes | None:
        """Run one request; returns the encoded reply, or None when the client blocks."""
        name = request[0]
        command = self.commands.get(name)
        if command is None:
            command = self.commands.get(name.lower())
            if command is None:
                self.stats.unknown_commands += 1
                return error(f"ERR unknown command '{name.decode(errors='replace')}'")
        argc = len(request)
        arity = command.arity
        if (arity > 0 and argc != arity) or argc < -arity:
            return error(f"ERR wrong number of arguments for '{command.name.decode()}' command")
        if (
            not conn.authenticated
            and command.name not in (b"auth", b"quit")
            and self.config["requirepass"]  # cleared at runtime: no password is needed
        ):
            return error("NOAUTH Authentication required.")
        if (
            command.deny_oom
            and self.engine.jobs_bytes + (len(request[2]) if argc > 2 else 0) > self._oom_guard
            and self.over_memory_limit(request)
        ):
            return error("OOM command not allowed when used memory > 'maxmemory'.")
        started = _perf_ns()
        try:
            reply = command.handler(self, conn, request)
        except CommandError as exc:
            # Handlers raise Disque's exact error text; nothing was changed before it.
            reply = error(exc.message)
        except Exception as exc:  # a bug must cost one reply, not the connection or the node
            log.exception("error running %r", request[:3])
            reply = error(f"ERR internal error running '{command.name.decode()}': {exc}")
        command.calls += 1
        command.nanoseconds += _perf_ns() - started
        return reply

    def commands_processed(self) -> int:
        # Derived from the per-command counters: one increment less per command.
        return sum(
            command.calls for command in {c.name: c for c in self.commands.values()}.values()
        )

    def _update_memory_guard(self) -> None:
        # Below this many job bytes no growing command can reach the soft limit, so the hot
        # path compares one int; the exact check (and eviction) runs only above it.
        maxmemory = self.config["maxmemory"]
        if maxmemory:
            self._oom_guard = maxmemory * 95 // 100 - self.baseline_memory - 65536
        else:
            self._oom_guard = 1 << 62

    def over_memory_limit(self, request: list[bytes]) -> bool:
        maxmemory = self.config["maxmemory"]
        if not maxmemory:
            return False
        incoming = sum(len(arg) for arg in request)
        used = self.used_memory() + incoming
        soft_limit = maxmemory * 95 // 100
        if used > soft_limit and self.config["maxmemory-policy"] == "acks":
            self.engine.evict(used - soft_limit, self.now)
            used = self.used_memory() + incoming
        return used > maxmemory

    def used_memory(self) -> int:
        used = self.baseline_memory + self.engine.memory_estimate()
        if used > self.peak_memory:
            self.peak_memory = used
        return used

    # -- the core's deferred effects ---------------------------------------------------------
    def after_io(self) -> None:
        """Deliver what the core produced for other clients, and re-arm the timer."""
        engine = self.engine
        # Resuming a woken client runs its pipelined requests, which may wake others.
        while engine.wakeups:
            self._deliver_wakeups()
        deadline = engine.next_deadline()
        if deadline is not None and (
            self._timer_deadline is None or deadline < self._timer_deadline
        ):
            self._arm_timer(deadline)
        # The log flushes itself when its buffer is full; the timer bounds how long an
        # event waits otherwise, and is armed only while something is buffered, so an
        # idle node stays asleep. Checked in the cheapest order: this runs per read.
        if self._event_log_timer is None and self.event_log is not None and self.event_log.parts:
            assert self.loop is not None
            self._event_log_timer = self.loop.call_later(EVENT_LOG_FLUSH_S, self._flush_event_log)

    def _deliver_wakeups(self) -> None:
        for waiter, jobs in self.engine.take_wakeups():
            conn: Connection = waiter.token
            if conn.waiter is not waiter:
                continue
            conn.waiter = None
            if jobs is None:
                conn.write(NULL_ARRAY_BYTES)
            else:
                conn.write(encode_getjob_reply(jobs, waiter.with_counters))
            if conn.pending:
                conn.resume_after_block()

    def _arm_timer(self, deadline: int) -> None:
        assert self.loop is not None
        if self._timer is not None:
            self._timer.cancel()
        delay_s = max(deadline - now_ms(), 0) / 1000
        self._timer_deadline = deadline
        self._timer = self.loop.call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_deadline = None
        self.now = now_ms()
        self.engine.tick(self.now)
        self.after_io()

    def block(self, conn: Connection, waiter: Waiter) -> None:
        conn.waiter = waiter
        self.engine.block(waiter, self.now)


def rss_bytes() -> int:
    """Resident memory of this process (0 where /proc is not available)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def configure_logging(config: Config) -> None:
    levels = {
        "debug": logging.DEBUG,
        "verbose": logging.INFO,
        "notice": logging.INFO,
        "warning": logging.WARNING,
    }
    root = logging.getLogger("conveyor")
    root.setLevel(levels[config["loglevel"]])
    if not root.handlers:
        logfile = config["logfile"]
        handler: logging.Handler = (
            logging.FileHandler(logfile) if logfile else logging.StreamHandler()
        )
        handler.setFormatter(
            logging.Formatter(
                f"{os.getpid()}:M %(asctime)s.%(msecs)03d %(message)s", "%d %b %H:%M:%S"
            )
        )
        root.addHandler(handler)
