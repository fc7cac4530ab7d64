"""An outbound bus peer: the one link we keep to it, and the reconnecting with backoff.

Owned by BusTransport (transport.py), which creates, re-keys and closes peers; this module
holds the per-peer state machine: connecting -> connected -> (lost) waiting -> connecting ...
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .link import BusLink, PeerKey, describe_key

if TYPE_CHECKING:
    from .transport import BusTransport

__all__ = ["Backoff", "OutboundPeer"]

log = logging.getLogger("conveyor.cluster")


@dataclass(frozen=True)
class Backoff:
    """Reconnect delays: `initial` doubling per consecutive failure up to `maximum`, each
    shortened by a random fraction of up to `jitter` so that peers do not retry in step."""

    initial: float = 0.1
    maximum: float = 5.0
    jitter: float = 0.2

    def base(self, failures: int) -> float:
        """The delay before jitter after `failures` consecutive failures (at least 1)."""
        doublings = min(max(failures, 1) - 1, 30)  # 2**30 * initial passes any sane maximum
        return float(min(self.maximum, self.initial * 2**doublings))

    def delay(self, failures: int, rng: random.Random) -> float:
        return self.base(failures) * (1.0 - self.jitter * rng.random())


class OutboundPeer:
    """The one outbound link to a peer, and the reconnecting that keeps it up.

    state: "connecting" (a connect in flight), "connected" (`link` up), "waiting" (a
    backoff timer runs), "closed" (forgotten, or the transport closed).
    `failures` counts consecutive connects that failed and links lost before a single frame
    came back; any frame read on the link resets it (the peer speaks the bus). `delays`
    keeps the last backoff delays chosen, for tests and diagnostics.
    """

    def __init__(self, bus: BusTransport, key: PeerKey, address: tuple[str, int]) -> None:
        self.key = key
        self.address = address
        self.state = "connecting"
        self.link: BusLink | None = None
        self.attempts = 0  # connects started
        self.started_at = 0.0  # event loop time of the last connect started
        self.connects = 0  # connects that gave a link
        self.failures = 0
        self.delays: deque[float] = deque(maxlen=64)
        self.unsent = 0  # messages refused: no link, over the limit, or dropped with it
        self._bus = bus
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def __repr__(self) -> str:
        host, port = self.address
        return f"<OutboundPeer {describe_key(self.key)} at {host}:{port} {self.state}>"

    # ------------------------------------------------------------------ sending

    def write(self, frame: bytes) -> bool:
        if self.link is not None:
            if self.link.write(frame):
                return True
        elif (
            self.state == "connecting"
            and self._pending_bytes + len(frame) <= self._bus.max_send_buffer
        ):
            self._pending.append(frame)
            self._pending_bytes += len(frame)
            return True
        self.unsent += 1
        return False

    # ------------------------------------------------------------------ connecting

    def wake(self, min_interval_s: float = 0.0) -> None:
        """Connect now if waiting out a backoff (e.g. the peer was just heard from), and
        if the last attempt started at least `min_interval_s` ago."""
        if self.state != "waiting":
            return
        if asyncio.get_running_loop().time() - self.started_at < min_interval_s:
            return
        self._cancel_timer()
        self._start()

    def _restart(self) -> None:
        """Connect again now, to a new address: whatever is in flight is abandoned."""
        if self.state == "connected" and self.link is not None:
            self.link.close(f"peer moved to {self.address[0]}:{self.address[1]}")
            return  # _unlinked reconnects
        if self.state == "connecting" and self._task is not None:
            self._bus._abandon(self._task)
            self._task = None
            self._drop_pending()
        elif self.state == "waiting":
            self._cancel_timer()
        if self.state != "closed":
            self._start()

    def _start(self) -> None:
        self.state = "connecting"
        self.attempts += 1
        loop = asyncio.get_running_loop()
        self.started_at = loop.time()
        self._task = loop.create_task(
            self._connect(self.attempts), name=f"bus connect {describe_key(self.key)}"
        )

    async def _connect(self, attempt: int) -> None:
        host, port = self.address
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._bus.connect_timeout):
                await loop.create_connection(
                    lambda: self._bus._new_link(self, attempt),
                    host,
                    port,
                    local_addr=self._bus._source_address(),
                    ssl=self._bus.tls_connect,
                )
        # ValueError, OverflowError: an address connect() cannot take (a port past 65535
        # from a peer's header); it fails as an unreachable one, or the peer stays stuck.
        except (OSError, TimeoutError, ValueError, OverflowError) as exc:
            self._failed(attempt, f"{type(exc).__name__}: {exc}")
        finally:
            if self._task is asyncio.current_task():
                self._task = None
        # On success connection_made has already reported the link (see _linked).

    def _linked(self, link: BusLink) -> bool:
        """A connection made; False if it is not wanted any more (closed, or superseded)."""
        if self.state != "connecting" or self.link is not None or link.attempt != self.attempts:
            return False
        self.link = link
        self.state = "connected"
        self.connects += 1
        if self.failures:
            log.info("bus: %s up after %d failed attempts", link.describe(), self.failures)
        return True

    def _flush_pending(self) -> None:
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        for sent, frame in enumerate(pending):
            if not self.write(frame):
                self.unsent += len(pending) - sent - 1  # the link went down under us
                return

    def _failed(self, attempt: int, reason: str) -> None:
        if self.state != "connecting" or self.link is not None or attempt != self.attempts:
            return  # a connect abandoned (close, forget, move) or already linked
        self._drop_pending()
        self.failures += 1
        # One line when a peer becomes unreachable, not one per retry.
        level = logging.INFO if self.failures == 1 else logging.DEBUG
        host, port = self.address
        log.log(level, "bus: cannot connect to %s at %s:%d: %s (failure %d)",
                describe_key(self.key), host, port, reason, self.failures)  # fmt: skip
        self._schedule()

    def _unlinked(self, link: BusLink) -> bool:
        if self.link is not link:
            return False
        self.link = None
        if self.state == "closed":
            return True
        self.failures += 1
        self._schedule()
        return True

    def _schedule(self) -> None:
        delay = self._bus.backoff.delay(self.failures, self._bus.rng)
        self.delays.append(delay)
        self.state = "waiting"
        self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        if self.state == "waiting":
            self._start()

    # ------------------------------------------------------------------ closing

    def _close(self) -> asyncio.Task[None] | None:
        """Stop for good: timer cancelled, connect cancelled, link dropped."""
        self.state = "closed"
        self._cancel_timer()
        self._drop_pending()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        if self.link is not None:
            self.link.close("peer closed locally")
        return task

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _drop_pending(self) -> None:
        self.unsent += len(self._pending)
        self._pending, self._pending_bytes = [], 0
