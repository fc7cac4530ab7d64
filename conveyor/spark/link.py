"""A bare pipelined connection to one node, for the data source's bulk traffic.

Why not `conveyor.client.Client`: the streaming reader leases, acks and extends
hundreds of thousands of jobs per batch, and redis-py's per-command machinery would cost
more than the node spends serving them. Here commands are packed with the client's own
`pack_command`, sent in one write per pipeline and parsed by hiredis. One `NodeLink`
belongs to one thread.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Sequence
from typing import Any

import hiredis

from conveyor.client._address import Address
from conveyor.client._batch import pack_command

# Jobs per GETJOB and IDs per ACKJOB/FASTACK: large enough to amortise a round of the
# node's loop, small enough that one reply stays well under a megabyte for small bodies.
JOBS_PER_GETJOB = 1000
IDS_PER_ACK = 1000
# GETJOBs in flight at once while leasing: enough to keep the node busy while the driver
# parses the previous reply.
GETJOB_PIPELINE = 8


class NodeError(Exception):
    """A node answered with an error, or could not be reached."""


class NodeLink:
    def __init__(self, address: Address, password: str | None, timeout_s: float) -> None:
        self.address = address
        self._password = password
        self._timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._reader = hiredis.Reader()

    # -- connection -------------------------------------------------------------------
    def _connect(self) -> socket.socket:
        try:
            sock = socket.create_connection(self.address, timeout=self._timeout_s)
        except OSError as error:
            host, port = self.address
            raise NodeError(f"cannot connect to {host}:{port}: {error}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._reader = hiredis.Reader()
        if self._password:
            self.call("AUTH", self._password)
        return sock

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send every command in one write; the replies in order (errors as values).

        A broken connection is closed (the next call reconnects) and raises NodeError:
        callers decide whether the commands are safe to resend."""
        sock = self._sock or self._connect()
        payload = b"".join(pack_command(*command) for command in commands)
        replies: list[Any] = []
        try:
            sock.sendall(payload)
            reader = self._reader
            while len(replies) < len(commands):
                reply = reader.gets()
                if reply is False:
                    data = sock.recv(1 << 20)
                    if not data:
                        raise OSError("connection closed by the node")
                    reader.feed(data)
                    continue
                replies.append(reply)
        except (OSError, hiredis.ProtocolError) as error:
            self.close()
            host, port = self.address
            raise NodeError(f"node {host}:{port}: {error}") from None
        return replies

    def call(self, *command: Any) -> Any:
        reply = self.pipeline([command])[0]
        if isinstance(reply, hiredis.ReplyError):
            raise NodeError(f"{command[0]}: {reply}")
        return reply

    # -- job traffic ------------------------------------------------------------------
    def lease(self, queues: Sequence[str], max_jobs: int) -> list[list[Any]]:
        """GETJOB NOHANG WITHCOUNTERS until `max_jobs` jobs or the queues run dry.

        Each job comes back as hiredis parsed it: [queue, id, body, b"nacks", n,
        b"additional-deliveries", n]."""
        jobs: list[list[Any]] = []
        while len(jobs) < max_jobs:
            wanted = max_jobs - len(jobs)
            commands = []
            while wanted > 0 and len(commands) < GETJOB_PIPELINE:
                count = min(JOBS_PER_GETJOB, wanted)
                commands.append(
                    ("GETJOB", "NOHANG", "WITHCOUNTERS", "COUNT", count, "FROM", *queues)
                )
                wanted -= count
            dry = False
            for command, reply in zip(commands, self.pipeline(commands), strict=True):
                if isinstance(reply, hiredis.ReplyError):
                    raise NodeError(f"GETJOB: {reply}")
                if reply:
                    jobs.extend(reply)
                if not reply or len(reply) < command[4]:
                    dry = True
            if dry:
                break
        return jobs

    def ack(self, job_ids: Sequence[bytes | str], fast: bool) -> int:
        """ACKJOB (or FASTACK) every ID; how many jobs the node knew."""
        verb = "FASTACK" if fast else "ACKJOB"
        commands = [
            (verb, *job_ids[start : start + IDS_PER_ACK])
            for start in range(0, len(job_ids), IDS_PER_ACK)
        ]
        known = 0
        for reply in self.pipeline(commands) if commands else []:
            if isinstance(reply, hiredis.ReplyError):
                raise NodeError(f"{verb}: {reply}")
            known += int(reply)
        return known

    def working(self, job_ids: Iterable[bytes | str]) -> None:
        """WORKING for each ID; a job the node no longer has (-NOJOB) is fine."""
        commands = [("WORKING", job_id) for job_id in job_ids]
        for start in range(0, len(commands), 5000):
            self.pipeline(commands[start : start + 5000])

    def enqueue(self, job_ids: Sequence[bytes | str]) -> None:
        """Hand leased jobs back to their queues without counting a NACK."""
        commands = [
            ("ENQUEUE", *job_ids[start : start + IDS_PER_ACK])
            for start in range(0, len(job_ids), IDS_PER_ACK)
        ]
        if commands:
            self.pipeline(commands)
