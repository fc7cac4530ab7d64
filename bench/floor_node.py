"""The floor of the cluster benchmark in Python: a "cluster" that only moves the bytes.

`make bench-cluster` runs its throughput columns on three of these beside Conveyor and
C Disque. An origin takes ADDJOB over RESP (uvloop + hiredis, as a Conveyor node), makes
an ID, keeps the body in a dict and sends the copy to two replicas over TCP. Each
replica keeps the copy in a dict and confirms it (unless ASYNC). The origin answers a
synchronous ADDJOB once both replicas confirmed it, in request order, and an ASYNC one at
once. Copies and confirmations of a loop turn share one frame per replica, as
Conveyor's do.

It does nothing else: no job state, timers, options, TTL, errors, bus protocol or
memory accounting. What a node spends per job beyond this row's CPU is the cost of its
own logic, not of Python, asyncio or the sockets. That figure is the Python floor, and
no real node can go below it.

    python -m bench.floor_node replica PORT
    python -m bench.floor_node origin PORT REPLICA_PORT REPLICA_PORT

Frames: a u32 length, then records. A copy is a 40-byte ID, b"s" (confirm it) or b"a"
(ASYNC), a u16 body length and the body. A confirmation is a 40-byte ID.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import sys

import hiredis
import uvloop

_LENGTH = struct.Struct(">I")
_COPY_HEAD = struct.Struct(">cH")
ID_LEN = 40
_OTHER_REPLIES = {b"PING": b"+PONG\r\n"}  # and an empty array for anything else
# conveyor.client asks HELLO when it connects (and HELLO 3 first, as redis-py does): the
# origin answers as a lone Disque node would, so the `add_jobs` column runs here too.
HELLO_ARITY = b"-ERR wrong number of arguments for 'hello' command\r\n"
FLOOR_ID = b"f" * ID_LEN

store: dict[bytes, bytes] = {}  # every node keeps every job's body: the one dict insert
_ids = itertools.count()


def new_id() -> bytes:
    return b"D-abcdef01-%024d-05a1" % next(_ids)  # 40 bytes, Disque's layout


def frames(buffer: bytes) -> tuple[list[bytes], bytes]:
    """The complete frames' contents in `buffer`, and the bytes left over."""
    found, offset, size = [], 0, len(buffer)
    while size - offset >= 4:
        (length,) = _LENGTH.unpack_from(buffer, offset)
        if size - offset - 4 < length:
            break
        found.append(buffer[offset + 4 : offset + 4 + length])
        offset += 4 + length
    return found, buffer[offset:]


class Replica(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.rest = b""

    def data_received(self, data: bytes) -> None:
        contents, self.rest = frames(self.rest + data)
        confirmations = []
        for content in contents:
            offset = 0
            while offset < len(content):
                job_id = content[offset : offset + ID_LEN]
                kind, body_len = _COPY_HEAD.unpack_from(content, offset + ID_LEN)
                start = offset + ID_LEN + 3
                store[job_id] = content[start : start + body_len]
                if kind == b"s":
                    confirmations.append(job_id)
                offset = start + body_len
        if confirmations:
            payload = b"".join(confirmations)
            self.transport.write(_LENGTH.pack(len(payload)) + payload)


class Origin:
    """The copies waiting for the end of the loop's turn, and the jobs waiting for
    their confirmations."""

    def __init__(self) -> None:
        self.links: list[asyncio.Transport] = []
        self.copies: list[bytes] = []
        self.waiting: dict[bytes, list] = {}  # job ID -> [client, confirmations missing]
        self.flush_soon: asyncio.Handle | None = None

    def send_copies(self) -> None:
        self.flush_soon = None
        payload = b"".join(self.copies)
        self.copies.clear()
        frame = _LENGTH.pack(len(payload)) + payload
        for link in self.links:
            link.write(frame)


ORIGIN = Origin()


class Confirmations(asyncio.Protocol):
    """A link to a replica: its confirmations come back on it."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.rest = b""

    def data_received(self, data: bytes) -> None:
        contents, self.rest = frames(self.rest + data)
        waiting = ORIGIN.waiting
        answered: dict[ClientConnection, None] = {}
        for content in contents:
            for offset in range(0, len(content), ID_LEN):
                job_id = content[offset : offset + ID_LEN]
                entry = waiting[job_id]
                entry[1] -= 1
                if entry[1] == 0:
                    del waiting[job_id]
                    entry[0].confirmed.add(job_id)
                    answered[entry[0]] = None
        for client in answered:
            client.answer()


class ClientConnection(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.reader = hiredis.Reader()
        self.order: list[bytes] = []  # synchronous jobs not yet answered, in request order
        self.confirmed: set[bytes] = set()

    def hello(self) -> bytes:
        port = b"%d" % self.transport.get_extra_info("sockname")[1]
        node = b"*4\r\n$40\r\n%s\r\n$9\r\n127.0.0.1\r\n$%d\r\n%s\r\n$1\r\n1\r\n" % (
            FLOOR_ID,
            len(port),
            port,
        )
        return b"*3\r\n:1\r\n$40\r\n%s\r\n%s" % (FLOOR_ID, node)

    def answer(self) -> None:
        order, confirmed, replies = self.order, self.confirmed, []
        answered = 0
        while answered < len(order) and order[answered] in confirmed:
            confirmed.discard(order[answered])
            replies.append(b"+%s\r\n" % order[answered])
            answered += 1
        del order[:answered]
        self.transport.write(b"".join(replies))

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        reader.feed(data)
        replies = []
        while (request := reader.gets()) is not False:
            name = request[0].upper()
            if name != b"ADDJOB":
                if name == b"HELLO":
                    replies.append(HELLO_ARITY if len(request) > 1 else self.hello())
                else:
                    replies.append(_OTHER_REPLIES.get(name, b"*0\r\n"))
                continue
            job_id, body = new_id(), request[2]
            store[job_id] = body
            synchronous = request[-1].upper() != b"ASYNC"
            head = _COPY_HEAD.pack(b"s" if synchronous else b"a", len(body))
            ORIGIN.copies.append(job_id + head + body)
            if synchronous:
                ORIGIN.waiting[job_id] = [self, len(ORIGIN.links)]
                self.order.append(job_id)  # answered after the replies before it
            elif self.order:  # behind synchronous jobs still waiting: answered after them
                self.order.append(job_id)
                self.confirmed.add(job_id)
            else:
                replies.append(b"+%s\r\n" % job_id)
        if replies:
            self.transport.write(b"".join(replies))
        if ORIGIN.copies and ORIGIN.flush_soon is None:
            ORIGIN.flush_soon = asyncio.get_running_loop().call_soon(ORIGIN.send_copies)


async def serve(role: str, port: int, replica_ports: list[int]) -> None:
    loop = asyncio.get_running_loop()
    if role == "replica":
        server = await loop.create_server(Replica, "127.0.0.1", port)
    else:
        for replica_port in replica_ports:
            link, _ = await loop.create_connection(Confirmations, "127.0.0.1", replica_port)
            ORIGIN.links.append(link)
        server = await loop.create_server(ClientConnection, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    role, port, *replica_ports = sys.argv[1:]
    if role not in ("origin", "replica") or (role == "origin") != bool(replica_ports):
        sys.exit(__doc__)
    uvloop.run(serve(role, int(port), [int(p) for p in replica_ports]))


if __name__ == "__main__":
    main()
