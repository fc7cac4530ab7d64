"""Python client for Conveyor/Disque nodes on redis-py.

Owns: connections, typed Job objects and typed errors.
Must not touch: server internals; it speaks only the public protocol.

    from conveyor.client import Client

    with Client(["127.0.0.1:7711"]) as client:
        client.add_job("emails", b"hello")
        client.add_jobs("emails", [b"one", b"two", "three"])  # pipelined, cheap
        job = client.get_job("emails", timeout_ms=1000)
        if job is not None:
            client.ack(job)

See docs/client.md.
"""

from conveyor.client.aio import AsyncClient
from conveyor.client.errors import (
    AuthError,
    BadIdError,
    BatchError,
    CommandError,
    ConnectionError,
    ConveyorError,
    LeavingError,
    LoadingError,
    MaxLenError,
    MisconfError,
    NoJobError,
    NoReplError,
    OutOfMemoryError,
    PausedError,
    ReplyError,
    TimeoutError,
    TooLateError,
    TooManyConnectionsError,
)
from conveyor.client.job import Hello, Job, NodeInfo
from conveyor.client.sync import Client

__all__ = [
    "AsyncClient",
    "AuthError",
    "BadIdError",
    "BatchError",
    "Client",
    "CommandError",
    "ConnectionError",
    "ConveyorError",
    "Hello",
    "Job",
    "LeavingError",
    "LoadingError",
    "MaxLenError",
    "MisconfError",
    "NoJobError",
    "NoReplError",
    "NodeInfo",
    "OutOfMemoryError",
    "PausedError",
    "ReplyError",
    "TimeoutError",
    "TooLateError",
    "TooManyConnectionsError",
]
