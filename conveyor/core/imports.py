"""What a queue knows of the nodes it imports jobs from: Disque's federation counters.

The cluster's federation (conveyor.cluster.federation) fills them in as YOURJOBS arrive
and as it sends NEEDJOBS; QSTAT (`import-from`, `import-rate`) and QSCAN IMPORTRATE read
them. A queue gets its ImportStats the first time it needs jobs from elsewhere; they go
with the queue when queue GC removes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SOURCE_TTL_MS = 5000  # a node that sent jobs counts as a source this long
_RATE_WINDOW_MS = 5000  # no job imported for this long: the import rate is 0
_RATE_MIN_ELAPSED_MS = 50  # never divide by less, not to overestimate


@dataclass(slots=True)
class ImportStats:
    sources: dict[bytes, int] = field(default_factory=dict)  # node -> ms of its last jobs
    # Two one-second counters (Disque's current and previous) make the import rate.
    current_count: int = 0
    current_ms: int = 0
    prev_count: int = 0
    prev_ms: int = 0
    # NEEDJOBS pacing: cluster-wide broadcasts and ad-hoc requests to the sources.
    bcast_ms: int = 0
    bcast_attempt: int = 0
    adhoc_ms: int = 0
    adhoc_attempt: int = 0

    def imported(self, source: bytes, now_ms: int) -> None:
        """A job arrived from `source` (YOURJOBS)."""
        if source not in self.sources:
            self.bcast_attempt = 0  # a new source: broadcasts may start over quickly
        self.sources[source] = now_ms
        self.adhoc_attempt = 0
        if now_ms - self.current_ms > 1000:
            self.prev_ms, self.prev_count = self.current_ms, self.current_count
            self.current_ms, self.current_count = now_ms, 0
        self.current_count += 1

    def rate(self, now_ms: int) -> int:
        """Jobs imported per second lately (0 after 5 s without any)."""
        if now_ms - self.current_ms > _RATE_WINDOW_MS:
            return 0
        elapsed = max(now_ms - self.prev_ms, _RATE_MIN_ELAPSED_MS)
        return -(-(self.prev_count + self.current_count) * 1000 // elapsed)  # ceil

    def valid_sources(self, now_ms: int) -> list[bytes]:
        """The nodes that sent jobs in the last 5 s; older ones are forgotten."""
        expired = [name for name, last in self.sources.items() if now_ms - last > SOURCE_TTL_MS]
        for name in expired:
            del self.sources[name]
        return list(self.sources)
