"""The node's side of the cluster: the bus transport and membership, carried out in asyncio.

`ClusterDriver` owns a `BusTransport` listening on the client port + 10000 and the
sans-IO `Membership`: it feeds membership the bus's messages and link events and a
10 Hz cron, carries out the actions it returns, keeps nodes.conf written, and tells the
core how big the cluster is and how many nodes it can reach (the default replication
level and ADDJOB's NOREPL check follow from that).

It also runs replication (conveyor.cluster.replication): ADDJOB in a cluster of more
than one node comes here (`add_job`), job messages from the bus go there, and a 50 ms
timer runs while synchronous ADDJOBs wait for their copies. The other cluster commands
(MEET, FORGET, ACKJOB, INFO's section...) are its mixin in node/cluster_commands.py.

When the bus port cannot be opened (taken, or past 65535) the node still serves clients
as a cluster of one, and says why in the log and in CLUSTER MEET's error; a port in use
is tried again every second until it is free.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING

from conveyor.cluster.actions import Action, Connect, Drop, Move, Rename, Reply, ResetLink, Send
from conveyor.cluster.failure import CRON_HZ
from conveyor.cluster.framing import mac_key
from conveyor.cluster.membership import Membership
from conveyor.cluster.messages import (
    GOSSIP_CLASSES,
    NODE_HANDSHAKE,
    NODE_NOADDR,
    Fail,
    Message,
)
from conveyor.cluster.nodes import NodesConfError, parse_nodes_conf
from conveyor.cluster.planned_adds import AddPlan
from conveyor.cluster.replication import EXTRA_TARGET_MS
from conveyor.cluster.state import ClusterState
from conveyor.cluster.transport import BusTransport
from conveyor.node import nodeid
from conveyor.node.cluster_commands import BUS_PORT_OFFSET, ClusterCommands
from conveyor.node.connection import now_ms
from conveyor.node.deferred import ReplySlot
from conveyor.node.keepalive import set_keepalive
from conveyor.node.send_policy import SendPolicy

if TYPE_CHECKING:
    from conveyor.cluster.link import BusLink
    from conveyor.core.args import AddJobArgs
    from conveyor.core.job import Job
    from conveyor.node.connection import Connection
    from conveyor.node.server import Server

log = logging.getLogger("conveyor.cluster")

BUS_RETRY_S = 1.0  # while the bus port is in use by another socket


class ClusterDriver(SendPolicy, ClusterCommands):
    def __init__(self, server: Server) -> None:
        self.server = server
        config = server.config
        self.membership = Membership(
            server.node_id.encode(),
            config["port"],
            config["cluster-node-timeout"],
            random.Random(),
            now_ms(),
        )
        self.bus: BusTransport | None = None
        self.bus_error: str | None = None
        self.state = ClusterState(server.core, self.membership, random.Random())
        self.replication = self.state.replication
        self.acks = self.state.acks
        self._repl_timer: asyncio.TimerHandle | None = None
        self._after_io_soon = False
        self.messages_sent = 0
        self.messages_received = 0
        self._cron: asyncio.TimerHandle | None = None
        self._bus_retry: asyncio.Task[None] | None = None
        self._flush_soon: asyncio.Handle | None = None
        self.sync_unsent = 0  # synchronous ADDJOBs whose copies wait to be written

    @property
    def config_path(self) -> Path:
        return self.server.data_dir / self.server.config["cluster-config-file"]

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        bus_port = self.server.config["port"] + BUS_PORT_OFFSET
        if bus_port > 65535:
            self.bus_error = f"the bus port {bus_port} is past 65535 (client port + 10000)"
        elif not await self._listen(bus_port) and self._bus_retry is None:
            self._bus_retry = asyncio.create_task(self._listen_later(bus_port))
        if self.bus_error is not None:
            log.warning("Cluster bus disabled, running as a cluster of one: %s", self.bus_error)
        self._connect_known()
        self._run_actions(None)

    async def _listen(self, bus_port: int) -> bool:
        """Open the bus; False (and `bus_error` says why) when the port is in use."""
        host = (self.server.config["bind"].split() or ["127.0.0.1"])[0]
        password = self.server.config["cluster-password"]
        bus = BusTransport(
            bus_port,
            self._on_message,
            host=host,
            on_link_up=self._on_link_up,
            on_link_down=self._on_link_down,
            mac_key=mac_key(password) if password else None,
            tls=self.server.bus_tls,
        )
        try:
            await bus.start()
        except OSError as exc:
            self.bus_error = f"the bus could not listen on {host}:{bus_port}: {exc.strerror}"
            return exc.errno != errno.EADDRINUSE  # anything else will not pass by itself
        self.bus = bus
        self.bus_error = None
        return True

    async def _listen_later(self, bus_port: int) -> None:
        # The bus port is in the kernel's ephemeral range for client ports above 22768,
        # so an outgoing connection of any process may hold it for a while (TIME-WAIT
        # included): keep trying rather than stay a cluster of one for the node's life.
        while not await self._listen(bus_port):
            await asyncio.sleep(BUS_RETRY_S)
        self._bus_retry = None
        if self.bus is not None:
            log.warning("Cluster bus listening on port %d after all", bus_port)
            self._connect_known()
            self._run_actions(None)

    def _connect_known(self) -> None:
        """Connect to every node we know. The Connects that nodes.conf (or a MEET) left
        went nowhere without a bus: a command served while the AOF loads, before the bus
        opens, takes them with it (a restarted node then never linked out, though the
        others linked to it). Connecting to a peer that already has one is a no-op."""
        if self.bus is None:
            return
        for node in self.membership.nodes.values():
            if node is not self.membership.myself and not node.flags & NODE_NOADDR:
                self.bus.connect(node.name, (node.ip, node.port + BUS_PORT_OFFSET))

    async def stop(self) -> None:
        for pending in (self._flush_soon, self._bus_retry, self._repl_timer, self._cron):
            if pending is not None:
                pending.cancel()
        self._flush_soon = self._bus_retry = self._repl_timer = self._cron = None
        self.save_config()
        if self.bus is not None:
            await self.bus.close()
            self.bus = None

    def load_config(self) -> None:
        """nodes.conf, before the AOF: loaded jobs keep the names of their holders."""
        try:
            text = self.config_path.read_text()
            nodes = parse_nodes_conf(text, now_ms())
        except (OSError, UnicodeDecodeError, NodesConfError) as exc:
            log.warning("Cluster config %s not loaded: %s", self.config_path, exc)
            return
        self.state.load_nodes(nodes)
        others = len(self.membership.nodes) - 1
        if others:
            log.info("Cluster config loaded: %d other node(s)", others)

    def save_config(self) -> None:
        membership = self.membership
        membership.config_dirty = False
        try:
            nodeid.save(self.config_path, membership.describe(skip_flags=NODE_HANDSHAKE))
        except OSError as exc:
            log.warning("Could not save the cluster config %s: %s", self.config_path, exc)

    # -- the cron ------------------------------------------------------------------------------
    # A cluster of one has nothing to ping: an idle lone node does not wake up at all.
    def _schedule_cron(self) -> None:
        if self._cron is None and self.bus is not None and len(self.membership.nodes) > 1:
            loop = asyncio.get_running_loop()
            self._cron = loop.call_later(1 / CRON_HZ, self._tick)

    def _tick(self) -> None:
        self._cron = None
        try:
            now = now_ms()
            self.membership.cron(now)
            self.acks.tick(now)
            self.state.federation.tick(now)
            self._run_actions(None)
            self.server.after_io()
        finally:
            self._schedule_cron()

    # -- bus callbacks ---------------------------------------------------------------------------
    def _on_link_up(self, link: BusLink) -> None:
        if link.inbound:
            # Written on only to answer PINGs: one whose peer vanished without a FIN (a
            # crash, a partition) would hold an inbound slot for ever. Probes find it.
            if (sock := link.sock) is not None:
                timeout_ms = self.server.config["cluster-node-timeout"]
                set_keepalive(sock, max(1, 2 * timeout_ms // 1000))
            return
        if link.peer is not None and isinstance(link.peer.key, bytes):
            self.membership.link_up(link.peer.key, now_ms())
            self._run_actions(link)

    def _on_link_down(self, link: BusLink, reason: str) -> None:
        if link.peer is not None and isinstance(link.peer.key, bytes):
            self.membership.link_down(link.peer.key, now_ms())
            self._run_actions(None)

    def _on_message(self, link: BusLink, message: Message) -> None:
        self.messages_received += 1
        if isinstance(message, (*GOSSIP_CLASSES, Fail)):
            outbound = link.peer.key if link.peer is not None else None
            remote_ip = link.remote[0] if link.remote else ""
            local_ip = link.local[0] if link.local else ""
            self.membership.receive(
                message,
                outbound if isinstance(outbound, bytes) else None,
                remote_ip,
                local_ip,
                now_ms(),
            )
            self._run_actions(link)
            return
        if not self.state.route_job_message(message, now_ms()):
            return
        # Its messages wait in membership's actions for the after_io below (flush), with
        # those of the rest of this read.
        if not self._after_io_soon:
            # Once for every message of this read: the clients' replies leave together.
            self._after_io_soon = True
            # The server's loop: get_running_loop() makes a getpid() system call (3.11).
            (self.server.loop or asyncio.get_running_loop()).call_soon(self._after_messages)

    def _after_messages(self) -> None:
        self._after_io_soon = False
        self.server.after_io()

    def _run_actions(self, link: BusLink | None) -> None:
        membership = self.membership
        actions = membership.take_actions()
        bus = self.bus
        index, count = 0, len(actions)
        while index < count:
            action = actions[index]
            if type(action) is Send and bus is not None:
                # A message sent to several nodes (REPLJOB, QUEUED...) is encoded once.
                end = index + 1
                while (
                    end < count
                    and type(actions[end]) is Send
                    and actions[end].message is action.message
                ):  # type: ignore[union-attr]
                    end += 1
                if end - index > 1:
                    names = [a.name for a in actions[index:end]]  # type: ignore[union-attr]
                    self.messages_sent += bus.broadcast(names, action.message)
                    index = end
                    continue
            self._run(action, link)
            index += 1
        self.state.update_view()
        if membership.config_dirty:
            self.save_config()
        self._schedule_cron()

    def _run(self, action: Action, link: BusLink | None) -> None:
        bus = self.bus
        if isinstance(action, Reply):
            if link is not None and link.send(action.message):
                self.messages_sent += 1
            return
        if bus is None:
            return
        if isinstance(action, Send):
            if bus.send(action.name, action.message):
                self.messages_sent += 1
        elif isinstance(action, Connect):
            bus.connect(action.name, (action.ip, action.port + BUS_PORT_OFFSET))
        elif isinstance(action, Rename):
            if bus.peer(action.old) is not None:
                bus.rename(action.old, action.new)
        elif isinstance(action, Move):
            if bus.peer(action.name) is not None:
                bus.move(action.name, (action.ip, action.port + BUS_PORT_OFFSET))
            else:
                bus.connect(action.name, (action.ip, action.port + BUS_PORT_OFFSET))
        elif isinstance(action, ResetLink):
            if bus.peer(action.name) is not None:
                bus.reset(action.name, "no PONG for half the node timeout")
        elif isinstance(action, Drop):
            bus.forget(action.name)

    # -- ADDJOB (the other commands: node/cluster_commands.py) -------------------------------
    def add_job(
        self, conn: Connection, args: AddJobArgs, plan: AddPlan | None = None
    ) -> bytes | None:
        """ADDJOB with other nodes around: the reply, or None when it comes once the
        copies are confirmed (into a ReplySlot of the connection; node/deferred.py).
        `plan`: what a run of ADDJOBs with these options shares (Replication.plan_adds)."""
        # An ASYNC job is answered now whatever happens: it needs no slot.
        slot = None if args.asynchronous else ReplySlot(conn)
        # Its REPLJOBs go out from the server's after_io (flush) at the end of the
        # client's read, together with those of the ADDJOBs pipelined with it.
        if plan is None:
            job, answered = self.replication.add_job(args, slot, self.server.now)
        else:
            job, answered = self.replication.add_planned(plan, args, slot, self.server.now)
        if answered:
            return b"+%s\r\n" % job.id
        assert slot is not None  # only a synchronous ADDJOB waits for its copies
        slot.job_id = job.id
        conn.defer(slot)
        self.sync_unsent += 1
        if self._repl_timer is None:  # armed once for all the jobs waiting
            self._arm_replication_timer()
        return None

    def add_run(
        self, args: AddJobArgs, plan: AddPlan, bodies: list[bytes], slots: list[ReplySlot]
    ) -> list[Job] | None:
        """add_job for a job of each of `bodies` (the queue and options in `args`; a slot
        for each when synchronous, which the caller defers), or None: each takes add_job
        (Replication.add_run says when)."""
        jobs = self.replication.add_run(plan, args, bodies, slots, self.server.now)
        if jobs is not None and slots:
            for slot, job in zip(slots, jobs, strict=True):
                slot.job_id = job.id
            self.sync_unsent += len(jobs)
            if self._repl_timer is None:
                self._arm_replication_timer()
        return jobs

    def _arm_replication_timer(self) -> None:
        if self._repl_timer is None and self.replication.pending:
            loop = asyncio.get_running_loop()
            self._repl_timer = loop.call_later(EXTRA_TARGET_MS / 1000, self._replication_tick)

    def _replication_tick(self) -> None:
        self._repl_timer = None
        server = self.server
        server.now = now_ms()
        self.replication.tick(server.now)
        self._run_actions(None)
        server.after_io()
        self._arm_replication_timer()
