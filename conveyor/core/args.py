"""Typed command arguments and settings: what the node parses, and the core takes."""

from __future__ import annotations

from dataclasses import dataclass

QUEUE_GC_IDLE_MS = 300_000


@dataclass(slots=True)
class EngineConfig:
    max_deliveries: int = 0  # 0 disables the dead-letter rule
    deadletter_queue: bytes = b""
    queue_gc_idle_ms: int = QUEUE_GC_IDLE_MS


@dataclass(slots=True)
class AddJobArgs:
    queue: bytes
    body: bytes
    repl: int | None  # None: the node's default (min(3, cluster size))
    delay_s: int
    retry_s: int | None  # None: derive from the TTL
    ttl_s: int | None  # None: the default TTL
    maxlen: int | None
    asynchronous: bool
    timeout_ms: int = 0  # how long a synchronous ADDJOB may wait for replication


@dataclass(slots=True)
class GetJobArgs:
    queues: list[bytes]
    count: int = 1
    timeout_ms: int = 0  # 0 blocks forever
    nohang: bool = False
    with_counters: bool = False
