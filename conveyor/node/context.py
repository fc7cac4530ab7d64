"""What a command handler may see of the node and of its client.

Handlers take these small Protocols rather than the concrete `Server` and `Connection`,
so `cmd_*` modules never import `server` (no import cycle) and a handler can be driven
by anything that offers these attributes (a test double, a future console bridge).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from conveyor.core.node import NodeCore
    from conveyor.core.waiters import Waiter
    from conveyor.node.aof import AofDriver
    from conveyor.node.commands import Command
    from conveyor.node.config import Config
    from conveyor.node.event_log import EventLog, EventLogCounters
    from conveyor.node.stats import Stats


class ClientContext(Protocol):
    """One client connection, as handlers see it."""

    id: int
    name: bytes
    addr: str
    laddr: str
    authenticated: bool
    auth_failures: int
    protocol: int  # 2 or 3: the RESP version this client asked for with HELLO
    lib_name: bytes
    lib_ver: bytes
    created_ms: int
    last_io_ms: int
    waiter: Waiter | None
    closed: bool

    def write(self, data: bytes) -> None: ...

    def set_authenticated(self, authenticated: bool) -> None: ...

    def close(self) -> None: ...


class NodeContext(Protocol):
    """The node, as handlers see it: the core facade plus the server's own state."""

    core: NodeCore
    config: Config
    node_id: str
    now: int  # the node clock (ms) for the request being run
    started_ms: int
    run_id: str
    stats: Stats
    commands: dict[bytes, Command]
    clients: dict[int, Any]  # id -> ClientContext
    event_log: EventLog | None
    event_log_counters: EventLogCounters
    aof: AofDriver
    on_shutdown: list[Callable[[], None]]

    def block(self, conn: ClientContext, waiter: Waiter) -> None: ...

    def request_shutdown(self) -> None: ...

    def reset_node_id(self) -> None: ...

    def used_memory(self) -> int: ...

    def client_buffer_bytes(self) -> int: ...

    def client_buffer_peaks(self) -> tuple[int, int]: ...

    @property
    def peak_memory(self) -> int: ...

    def commands_processed(self) -> int: ...
