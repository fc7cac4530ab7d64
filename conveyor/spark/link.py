"""A bare pipelined connection to one node, for the data source's bulk traffic.

Why not `conveyor.client.Client`: the streaming reader leases, acks and extends
hundreds of thousands of jobs per batch, and redis-py's per-command machinery would cost
more than the node spends serving them. Here commands are packed with the client's own
`pack_command`, sent in one write per pipeline and parsed by hiredis. One `NodeLink`
belongs to one thread.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import hiredis

from conveyor.client._address import Address
from conveyor.client._batch import pack_command

# Jobs per GETJOB and IDs per ACKJOB/FASTACK: large enough to amortise a round of the
# node's loop, small enough that one reply stays well under a megabyte for small bodies.
JOBS_PER_GETJOB = 1000
IDS_PER_ACK = 1000


def _id_commands(verb: str, job_ids: Sequence[bytes | str]) -> list[tuple[Any, ...]]:
    """`verb` over every ID, at most IDS_PER_ACK IDs per command."""
    return [
        (verb, *job_ids[start : start + IDS_PER_ACK])
        for start in range(0, len(job_ids), IDS_PER_ACK)
    ]


def _pack_id_commands(commands: Sequence[Sequence[Any]]) -> bytes | None:
    """Commands of a verb and job IDs, packed with one C-level join per command.

    Job IDs all have the same length, so every argument after the verb shares its RESP
    header: `pack_command` would spend ~1 µs per ID, this about 10 ns. None when some ID
    is a str or the lengths differ (then `pack_command` does it)."""
    parts: list[bytes] = []
    for command in commands:
        verb, ids = command[0], command[1:]
        if not ids or not all(isinstance(job_id, bytes) for job_id in ids):
            return None
        size = len(ids[0])
        if any(len(job_id) != size for job_id in ids):
            return None
        separator = b"\r\n$%d\r\n" % size
        name = verb.encode() if isinstance(verb, str) else verb
        head = b"*%d\r\n$%d\r\n%b\r\n" % (len(command), len(name), name)
        parts.append(head + b"$%d\r\n" % size + separator.join(ids) + b"\r\n")
    return b"".join(parts)


class NodeError(Exception):
    """A node answered with an error, or could not be reached."""


class NodeLink:
    def __init__(self, address: Address, password: str | None, timeout_s: float) -> None:
        self.address = address
        self._password = password
        self._timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._reader = hiredis.Reader()
        self._shut = False  # closed for good: no reconnecting

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
            try:
                self.call("AUTH", self._password)
            except NodeError:
                # Kept, the connection would run the next call unauthenticated (-NOAUTH,
                # which hides the cause): the next call connects and says it again.
                self.close()
                raise
        return sock

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def shutdown(self) -> None:
        """Close for good, from any thread: a call in progress on another thread fails
        at once (NodeError) rather than waiting out its timeout, and later calls fail
        instead of reconnecting."""
        self._shut = True
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a recv() blocked in another thread
            except OSError:
                pass
        self.close()

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def pipeline(self, commands: Sequence[Sequence[Any]], packed: bytes | None = None) -> list[Any]:
        """Send every command in one write; the replies in order (errors as values).

        `packed`, when given, is `commands` already in RESP. A broken connection is
        closed (the next call reconnects) and raises NodeError: callers decide whether
        the commands are safe to resend."""
        if not commands:
            return []
        payload = packed or b"".join(pack_command(*command) for command in commands)
        return list(self._exchange(payload, len(commands)))

    def _exchange(self, payload: bytes, expected: int) -> Iterator[Any]:
        """Send `payload` (`expected` commands) and yield each reply as it is parsed.

        A caller that stops early leaves replies on the way: the connection is closed
        then, or they would be read as answers to later commands."""
        if self._shut:
            host, port = self.address
            raise NodeError(f"node {host}:{port}: connection closed (reader stopped)")
        sock = self._sock or self._connect()
        reader = self._reader
        answered = 0
        try:
            sock.sendall(payload)
            while answered < expected:
                reply = reader.gets()
                while reply is False:
                    data = sock.recv(1 << 20)
                    if not data:
                        raise OSError("connection closed by the node")
                    reader.feed(data)
                    reply = reader.gets()
                answered += 1
                yield reply
        except (OSError, hiredis.ProtocolError) as error:
            self.close()
            host, port = self.address
            raise NodeError(f"node {host}:{port}: {error}") from None
        finally:
            if answered < expected:
                self.close()

    def call(self, *command: Any) -> Any:
        reply = self.pipeline([command])[0]
        if isinstance(reply, hiredis.ReplyError):
            raise NodeError(f"{command[0]}: {reply}")
        return reply

    # -- job traffic ------------------------------------------------------------------
    def lease(self, queues: Sequence[str], max_jobs: int) -> Iterator[list[list[Any]]]:
        """GETJOB NOHANG WITHCOUNTERS until `max_jobs` jobs or the queues run dry; yields
        each non-empty reply as soon as it is parsed.

        Every GETJOB of the lease is sent at once, so the node works through them while
        the caller turns earlier replies into rows: the node and the driver run in
        parallel instead of taking turns. Each job comes back as hiredis parsed it:
        [queue, id, body, b"nacks", n, b"additional-deliveries", n]."""
        counts = [
            min(JOBS_PER_GETJOB, max_jobs - start) for start in range(0, max_jobs, JOBS_PER_GETJOB)
        ]
        if not counts:
            return
        getjob = [b"GETJOB", b"NOHANG", b"WITHCOUNTERS", b"COUNT"]
        tail = [b"FROM", *(queue.encode() for queue in queues)]
        payload = b"".join(pack_command(*getjob, count, *tail) for count in counts)
        for reply in self._exchange(payload, len(counts)):
            if isinstance(reply, hiredis.ReplyError):
                raise NodeError(f"GETJOB: {reply}")
            if reply:
                yield reply

    def ack(self, job_ids: Sequence[bytes | str], fast: bool) -> int:
        """ACKJOB (or FASTACK) every ID; how many jobs the node knew."""
        verb = "FASTACK" if fast else "ACKJOB"
        commands = _id_commands(verb, job_ids)
        known = 0
        for reply in self.pipeline(commands, packed=_pack_id_commands(commands)):
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
        commands = _id_commands("ENQUEUE", job_ids)
        self.pipeline(commands, packed=_pack_id_commands(commands))
