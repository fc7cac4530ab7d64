"""Value types returned by the client: `Job`, `NodeInfo` and `Hello`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class Job(NamedTuple):
    """A job as GETJOB or QPEEK returns it.

    `nacks` and `additional_deliveries` are None unless the job was fetched with
    `with_counters=True`. A named tuple rather than a frozen dataclass: consumers build
    one per job, and a frozen dataclass costs ~4x more to construct.
    """

    queue: str
    id: str
    body: bytes
    nacks: int | None = None
    additional_deliveries: int | None = None

    def body_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The body decoded as text (UTF-8 by default)."""
        return self.body.decode(encoding, errors)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node of a HELLO reply. `priority`: 1 normal, 5 no link, 10 PFAIL, 100 FAIL."""

    id: str
    host: str
    port: int
    priority: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Hello:
    """HELLO: the protocol version, the answering node's ID and the nodes it knows."""

    version: int
    node_id: str
    nodes: list[NodeInfo] = field(default_factory=list)
