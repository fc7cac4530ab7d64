"""Batches of ADDJOB packed by hand into RESP, shared by `Client` and `AsyncClient`.

Why this exists: redis-py's `pipeline()` costs about 10 µs of client CPU per command (a
command object, argument encoding through its `Encoder`, a packer that builds small bytes
objects, response callbacks, exception bookkeeping). A producer sending batches of 100
jobs spends more time in that than the node spends creating the jobs. Every ADDJOB of a
batch shares its queue and options, so the bytes before and after the body are the same
for each command: they are packed once, and each body costs one length header and a
`b"".join`, about 1 µs. The clients send the result with the connection's
`send_packed_command` and read the replies one by one with `read_response`.

Very large batches are cut into chunks (`MAX_CHUNK_COMMANDS` commands or about
`MAX_CHUNK_BYTES` packed bytes, whichever comes first), each sent and answered before the
next is packed, so the memory used stays bounded whatever the batch size.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, cast

from conveyor.client import _commands as cmd
from conveyor.client import _parse
from conveyor.client._commands import Body
from conveyor.client.errors import BatchError, ReplyError

MAX_CHUNK_COMMANDS = 1000
MAX_CHUNK_BYTES = 4 * 1024 * 1024


def pack_arg(value: Any) -> bytes:
    """One argument as a RESP bulk string: `$<len>\\r\\n<bytes>\\r\\n`.

    Encodes like the clients' redis-py connections: str as UTF-8 with `surrogateescape`,
    int as its decimal digits."""
    if isinstance(value, str):
        data = value.encode(_parse.ENCODING, _parse.ENCODING_ERRORS)
    elif isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        data = b"%d" % value
    else:
        raise TypeError(f"cannot send {type(value).__name__} as a command argument")
    return b"$%d\r\n%b\r\n" % (len(data), data)


def pack_command(*args: Any) -> bytes:
    """A whole command as a RESP multibulk: `*<n>\\r\\n` then each argument."""
    return b"*%d\r\n" % len(args) + b"".join(pack_arg(arg) for arg in args)


@dataclass(frozen=True, slots=True)
class AddJobsBatch:
    """One ADDJOB per body, all with the same queue and options.

    `head` is every byte of a command before the body's length header, `tail` every byte
    after the body (starting with the body's own `\\r\\n`). `wait_s` is how long the node
    may take to answer each command beyond the socket timeout (see `Call.wait_s`)."""

    head: bytes
    tail: bytes
    bodies: Sequence[Body]
    wait_s: float | None

    def __len__(self) -> int:
        return len(self.bodies)

    def chunks(
        self,
        max_commands: int = MAX_CHUNK_COMMANDS,
        max_bytes: int = MAX_CHUNK_BYTES,
    ) -> Iterator[tuple[int, bytes]]:
        """The packed commands, as (number of commands, bytes to send) chunks.

        A chunk is packed only when the caller asks for it, after sending the previous
        one, so the batch never holds more than about two chunks of packed bytes (a
        chunk is about `max_bytes`, or one body if a single body is larger)."""
        head = self.head
        tail = self.tail
        fixed = len(head) + len(tail) + 16  # + the "$<len>\r\n" header, at most
        parts: list[bytes | bytearray | memoryview] = []
        append = parts.append
        count = 0
        size = 0
        for body in self.bodies:
            if isinstance(body, (bytes, bytearray)):
                data: bytes | bytearray | memoryview = body
                length = len(body)
            elif isinstance(body, str):
                data = body.encode(_parse.ENCODING, _parse.ENCODING_ERRORS)
                length = len(data)
            else:
                data = _contiguous(body)
                length = data.nbytes
            append(head)
            append(b"$%d\r\n" % length)
            append(data)
            append(tail)
            count += 1
            size += fixed + length
            if count >= max_commands or size >= max_bytes:
                yield count, b"".join(parts)
                parts.clear()
                count = 0
                size = 0
        if count:
            yield count, b"".join(parts)


def _contiguous(body: memoryview) -> memoryview:
    """A memoryview as one flat run of bytes: its len() counts items, not bytes, and
    `b"".join` needs a contiguous buffer."""
    return body.cast("B") if body.c_contiguous else memoryview(body.tobytes())


def _listed(bodies: object) -> list[Body]:
    """Bodies given as another iterable (a generator), as a list. A mapping or a set is
    refused: its keys would go as the bodies, or in an order the IDs could not match."""
    if isinstance(bodies, Mapping | AbstractSet) or not isinstance(bodies, Iterable):
        raise TypeError(f"bodies must be a sequence of bodies, not {type(bodies).__name__}")
    return list(bodies)


def add_jobs(
    queue: str | bytes,
    bodies: Sequence[Body],
    *,
    replicate: int | None = None,
    delay: int | None = None,
    retry: int | None = None,
    ttl: int | None = None,
    maxlen: int | None = None,
    asynchronous: bool = False,
    timeout_ms: int = 0,
) -> AddJobsBatch:
    """The batch for `add_jobs`. Checks every body's type first: a bad one raises
    `TypeError` before anything is sent, rather than after some jobs were created."""
    if isinstance(bodies, str | bytes | bytearray | memoryview):
        raise TypeError("bodies must be a sequence of bodies, not a single body")
    if not isinstance(bodies, list | tuple):
        bodies = _listed(bodies)
    for body in bodies:
        if not isinstance(body, cmd.BODY_TYPES):
            cmd.body_bytes(body)  # raises the TypeError add_job gives
    # The options are built by add_job, so both methods send exactly the same command.
    template = cmd.add_job(
        queue,
        b"",
        replicate=replicate,
        delay=delay,
        retry=retry,
        ttl=ttl,
        maxlen=maxlen,
        asynchronous=asynchronous,
        timeout_ms=timeout_ms,
    )
    args = template.args
    head = b"*%d\r\n" % len(args) + pack_arg(args[0]) + pack_arg(args[1])
    tail = b"\r\n" + b"".join(pack_arg(arg) for arg in args[3:])
    return AddJobsBatch(head, tail, bodies, template.wait_s)


def reply_id(reply: Any) -> str:
    """An ADDJOB reply (a status reply, bytes as redis-py returns it) as the job ID."""
    return _parse.text(reply)


def job_ids(results: list[str | ReplyError]) -> list[str]:
    """The IDs when every ADDJOB succeeded; otherwise raise `BatchError`."""
    for result in results:
        if not isinstance(result, str):
            raise BatchError.from_results("ADDJOB", results)
    return cast(list[str], results)
