"""The asyncio server: accepts clients, runs commands, carries out the core's effects.

Each request goes through one command table (arity, auth and the memory guard checked
once, here) to a handler that parses it and calls the core facade (`NodeCore`). After
every batch the server drains the core's effects: replies owed to other clients, job
events for their consumers (the job-event log), and the one event-loop timer for the
core's next deadline, so an idle node does not wake up.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import random
import signal
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from conveyor.core.args import EngineConfig
from conveyor.core.errors import OOM, CommandError
from conveyor.core.node import NodeCore
from conveyor.node import access, gc_policy, nodeid, tls
from conveyor.node.aof import AofDriver
from conveyor.node.aof_load import load_at_start
from conveyor.node.client_buffers import ClientBuffers
from conveyor.node.cluster import ClusterDriver
from conveyor.node.commands import build_table
from conveyor.node.config import Config
from conveyor.node.connection import Connection, now_ms
from conveyor.node.consumers import JobEventConsumers
from conveyor.node.effects import CoreEffects
from conveyor.node.event_log import EventLog, EventLogCounters
from conveyor.node.stats import Stats, rss_bytes
from conveyor.node.turn_adds import TurnAdds
from conveyor.node.turn_replies import TurnReplies
from conveyor.protocol.resp import (
    error,
)

log = logging.getLogger("conveyor.node")

_perf_ns = time.perf_counter_ns


class Server(ClientBuffers, JobEventConsumers, CoreEffects):
    """One node: the core facade driven by asyncio. Built by `from_config`, which does
    the I/O (node ID from the data directory, random seeds); __init__ does none."""

    def __init__(self, config: Config, node_id: str, seed: bytes, rand: random.Random) -> None:
        self.config = config
        self.started_ms = now_ms()
        self.now = self.started_ms
        self.data_dir = Path(config["dir"]).resolve()
        self.node_id = node_id
        self.core = NodeCore(node_id, seed, rand, self._engine_config())
        config.on_change = self._config_changed
        self.base_commands = build_table(config.renamed_commands)
        # The table in use: base_commands, or a copy refusing commands while loading the
        # AOF (-LOADING) or after a failed AOF write (-MISCONF), see node/aof.py.
        self.commands = self.base_commands
        self.stats = Stats()
        self.clients: dict[int, Connection] = {}
        self._next_client_id = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._asyncio_server: asyncio.base_events.Server | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline: int | None = None
        self.shutdown_requested: asyncio.Event | None = None
        # Derived, not the seed itself: INFO shows it, and the seed makes the job IDs.
        self.run_id = hashlib.sha1(b"run_id" + seed).hexdigest()
        self.on_shutdown: list[Callable[[], None]] = []
        self._unix_server: asyncio.AbstractServer | None = None
        self._tls_server: asyncio.AbstractServer | None = None
        # Made now, so that bad TLS files stop the start with a config error (tls.py).
        self._tls_context = tls.client_server_context(config)
        self.bus_tls = tls.bus_contexts(config)
        self._idle_timer: asyncio.TimerHandle | None = None
        self.baseline_memory = rss_bytes()
        self._init_client_buffers()
        self._update_memory_limit()
        # Consumers of the core's job events: the job-event log and the AOF.
        self.event_log: EventLog | None = None
        # appendfsync always: replies wait here for their fsync (Connection.write).
        self.reply_gate: list[tuple[Connection, bytes | None]] | None = None
        self.aof = AofDriver(self)
        self.event_log_counters = EventLogCounters()
        self._event_log_timer: asyncio.TimerHandle | None = None
        self._configure_event_log()
        self.cluster = ClusterDriver(self)
        self.turn_adds = TurnAdds(self)
        self.turn_replies = TurnReplies(self)

    @classmethod
    def from_config(cls, config: Config) -> Server:
        """Load (or create, and lock) the node ID in the data directory, draw the seeds."""
        data_dir = Path(config["dir"]).resolve()
        node_id = nodeid.load_or_create(data_dir / config["cluster-config-file"], config["port"])
        return cls(config, node_id, os.urandom(20), random.Random(os.urandom(16)))

    def reset_node_id(self) -> None:
        """CLUSTER RESET HARD: a new identity, on disk and in new job IDs."""
        path = self.data_dir / self.config["cluster-config-file"]
        self.node_id = nodeid.reset(path, self.config["port"])
        self.core.set_node_id(self.node_id)
        # Events of the old identity (the jobs RESET dropped) are logged under it.
        self.drain_job_events()
        if self.event_log is not None:
            self.event_log.set_node_id(self.node_id)
        self.aof.encoder.set_node_name(self.node_id.encode())
        self.cluster.reset(self.node_id.encode())

    def _engine_config(self) -> EngineConfig:
        return EngineConfig(
            max_deliveries=self.config["max-deliveries"],
            deadletter_queue=self.config["deadletter-queue"].encode(),
        )

    def _config_changed(self, name: str) -> None:
        if name in ("max-deliveries", "deadletter-queue"):
            self.core.config = self._engine_config()
        elif name in ("maxmemory", "maxmemory-policy"):
            self._update_memory_limit()
            self._update_client_limits()
        elif name in ("client-output-buffer-limit", "client-query-buffer-limit"):
            self._update_client_limits()
        elif name == "timeout" and self.config["timeout"] and self._idle_timer is None:
            self._arm_idle_check()
        elif name == "loglevel":
            configure_logging(self.config)
        elif name == "event-log":
            self._configure_event_log()
        elif name in ("appendonly", "appendfsync"):
            self.aof.config_changed(name)
        elif name == "requirepass" and not self.config["requirepass"]:
            # No password any more: every open connection may do what a logged-in one may.
            for conn in self.clients.values():
                conn.set_authenticated(True)
        elif name == "cluster-node-timeout":
            self.cluster.membership.node_timeout_ms = self.config["cluster-node-timeout"]
        elif name == "proto-max-bulk-len":
            for conn in self.clients.values():
                conn.parser.max_bulk_bytes = self.config["proto-max-bulk-len"]

    def _update_memory_limit(self) -> None:
        self.core.set_memory_limit(
            self.config["maxmemory"],
            self.config["maxmemory-policy"],
            self.baseline_memory,
            now_ms(),
        )

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        gc_policy.install()
        self.loop = asyncio.get_running_loop()
        self.shutdown_requested = asyncio.Event()
        hosts = self.config["bind"].split() or ["127.0.0.1"]
        self._asyncio_server = await self._listen(hosts, self.config["port"], None)
        if self._tls_context is not None:
            self._tls_server = await self._listen(hosts, self.config["tls-port"], self._tls_context)
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
        self.cluster.load_config()
        await load_at_start(self.aof)
        await self.cluster.start()
        log.info(
            "Conveyor node %s ready to accept connections on %s:%d",
            self.node_id,
            ",".join(hosts),
            self.config["port"],
        )

    async def _listen(
        self, hosts: list[str], port: int, context: ssl.SSLContext | None
    ) -> asyncio.AbstractServer:
        assert self.loop is not None
        return await self.loop.create_server(
            lambda: Connection(self),
            host=hosts,
            port=port,
            backlog=self.config["tcp-backlog"],
            reuse_address=True,
            ssl=context,
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
        for timer in (self._output_timer, self._trim_timer):
            if timer is not None:
                timer.cancel()
        self._output_timer = self._trim_timer = None
        if self._asyncio_server is not None:
            self._asyncio_server.close()
        if self._tls_server is not None:
            self._tls_server.close()
        if self._unix_server is not None:
            self._unix_server.close()
            Path(self.config["unixsocket"]).unlink(missing_ok=True)
        if self.config["pidfile"]:
            Path(self.config["pidfile"]).unlink(missing_ok=True)
        for conn in list(self.clients.values()):
            conn.close()
        if self._asyncio_server is not None:
            await self._asyncio_server.wait_closed()
        await self.cluster.stop()
        self.drain_job_events()
        if self.event_log is not None:
            self.event_log.flush()
        self.aof.close()
        log.warning("Conveyor is now ready to exit, bye bye...")

    # -- clients -----------------------------------------------------------------------------
    def client_connected(self, conn: Connection) -> None:
        refusal = None
        if len(self.clients) >= self.config["maxclients"]:
            refusal = "ERR max number of clients reached"
        elif access.protected(self.config) and not access.is_local_client(conn.transport):
            refusal = access.PROTECTED_MODE_DENIED
        if refusal is not None:
            self.stats.rejected_connections += 1
            conn.write(error(refusal))
            conn.close()
            return
        self._next_client_id += 1
        conn.id = self._next_client_id
        self.clients[conn.id] = conn
        self.stats.connections_received += 1

    def client_disconnected(self, conn: Connection) -> None:
        if conn.in_turn:  # its last request was read: it runs, as it would have at once
            self.turn_adds.run()
        self.clients.pop(conn.id, None)
        self._forget_buffers(conn)
        if conn.waiter is not None:
            self.core.unblock(conn.waiter, self.now)
            conn.waiter = None
        if conn.deferred is not None:
            self.cluster.client_gone(conn.deferred.waiting_jobs())
            conn.deferred = None
        conn.pending.clear()

    # -- commands ----------------------------------------------------------------------------
    def execute(self, conn: Connection, request: list[bytes]) -> bytes | None:
        """Run one request; returns the encoded reply, or None when the client blocks."""
        name = request[0]
        command = self.commands.get(name) or self.commands.get(name.lower())
        # Before AUTH, the same NOAUTH for every command but AUTH, HELLO and QUIT, known
        # or not and whatever its arity: nothing tells which commands exist. One
        # attribute check once authenticated.
        if (
            not conn.authenticated
            and self.config["requirepass"]  # cleared at runtime: no password is needed
            and (command is None or command.name not in (b"auth", b"quit", b"hello"))
        ):
            return error("NOAUTH Authentication required.")
        if command is None:
            self.stats.unknown_commands += 1
            return error(f"ERR unknown command '{name.decode(errors='replace')}'")
        argc = len(request)
        arity = command.arity
        if (arity > 0 and argc != arity) or argc < -arity:
            return error(f"ERR wrong number of arguments for '{command.name.decode()}' command")
        core = self.core
        if (
            command.deny_oom
            and core.jobs_bytes + (len(request[2]) if argc > 2 else 0) > core.oom_guard
            and core.over_memory_limit(sum(len(arg) for arg in request), self.now)
        ):
            return error(OOM)
        # Read first: called as `command.handler(...)`, a function kept in an attribute
        # defeats the interpreter's method-call specialisation on every request.
        handler = command.handler
        started = _perf_ns()
        try:
            reply = handler(self, conn, request)
        except CommandError as exc:
            # Handlers raise Disque's exact error text; nothing was changed before it.
            reply = error(exc.message)
        except Exception as exc:  # a bug must cost one reply, not the connection or the node
            reply = command.failed(request, exc)
        command.calls += 1
        command.nanoseconds += _perf_ns() - started
        return reply

    def commands_processed(self) -> int:
        # Derived from the per-command counters: one increment less per command.
        return sum(
            command.calls for command in {c.name: c for c in self.commands.values()}.values()
        )

    def used_memory(self) -> int:
        if self._output_backlog:
            self._refresh_output_buffers()
        return self.core.used_memory()

    @property
    def peak_memory(self) -> int:
        return self.core.peak_memory


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
