"""Batched acknowledgements of a queue's settled messages.

Owns: the one thread per queue that sends ACKJOB for settled messages, many IDs per call,
so a slot starts its next message without waiting for the node; and its orderly end when
the worker stops (everything queued before `close` is sent first).
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from conveyor.client import Client, ConveyorError

log = logging.getLogger("conveyor.worker")
_BATCH = 1000  # job IDs per ACKJOB at most
_ATTEMPTS = 3  # bounded: the node may be restarting
_RETRY_PAUSE_S = 0.5


class Acker:
    """Acknowledges job IDs in the background, in batches. A worker killed between a
    settle and its ACKJOB leaves the job unacknowledged: it runs again after RETRY (at
    least once, as always)."""

    def __init__(self, client: Client, queue_name: str) -> None:
        self.client = client
        self.queue_name = queue_name
        self._pending: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._done = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._loop, name=f"{self.queue_name}-ack", daemon=True).start()

    def ack(self, *job_ids: str) -> None:
        for job_id in job_ids:
            self._pending.put(job_id)

    def pending(self) -> int:
        """Job IDs settled but not acknowledged yet (the worker's record shows it)."""
        return self._pending.qsize()

    def close(self, timeout: float) -> None:
        """The acker sends what it holds, then ends."""
        self._pending.put(None)
        self._done.wait(max(1.0, timeout))

    def _loop(self) -> None:
        while True:
            first = self._pending.get()
            batch = [first]
            while not self._pending.empty() and len(batch) < _BATCH:
                batch.append(self._pending.get())
            ids = [i for i in batch if i is not None]
            for attempt in range(_ATTEMPTS):
                try:
                    if ids:
                        self.client.ack(*ids)
                    break
                except ConveyorError as exc:
                    log.warning("%s: ACKJOB failed (%s); attempt %d", self.queue_name, exc, attempt)
                    time.sleep(_RETRY_PAUSE_S)
            if None in batch:
                self._done.set()
                return
