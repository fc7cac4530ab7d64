"""Webhooks: a message that asks for one has its final state (done, err, relayed) POSTed as
JSON to its URL by the worker that settled it.

A small fixed pool of sender threads (SENDERS) per worker process sends them, so a slow or
dead endpoint never holds a slot. An endpoint (scheme, host and port) has at most one
attempt under way at a time: a target that hangs holds one sender, for at most TIMEOUT_S
per attempt, and the others go on delivering to every other endpoint; that target's other
deliveries wait their turn, not a sender. A failed attempt (a connection error, a timeout,
any status but 2xx) is retried after `backoff * 2^(n-1)` seconds, capped at MAX_DELAY_S,
for at most `attempts` attempts; then it is given up. Pending deliveries are bounded
(MAX_PENDING): past that a new one is dropped with a warning rather than letting a dead
endpoint grow the worker's memory. Each attempt's outcome is written to `webhook.json` in
the message's directory for the console to show; the directory is looked up at each
write, as an operator may move the message meanwhile.

A stop is never held up by an endpoint: once the running scripts have ended, deliveries
still pending get STOP_S more seconds; then those not sent (attempts still waiting for
their answer included) are dropped, recorded as given up and counted in one warning.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from conveyor.worker.queuedir import MessageStore

log = logging.getLogger("conveyor.worker")
MAX_PENDING = 10_000
MAX_DELAY_S = 300.0
TIMEOUT_S = 10.0
MAX_URL = 2048
STOP_S = 2.0  # at the worker's stop, what pending deliveries get before they are dropped
SENDERS = 4  # threads; each endpoint has at most one of them at a time
DROPPED = "dropped: the worker stopped before the delivery was confirmed"


def check_url(url: str) -> str:
    """A webhook URL must be absolute http(s); the reason as ValueError otherwise."""
    parts = urlsplit(url)
    if len(url) > MAX_URL or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"webhook must be an http(s) URL of at most {MAX_URL} characters")
    if any(ord(c) < 33 for c in url):
        raise ValueError("webhook URL may not contain spaces or control characters")
    try:
        parts.port  # noqa: B018 - raises for "http://h:x/": no attempt could connect
    except ValueError as exc:
        raise ValueError(f"webhook URL has a bad port: {exc}") from None
    return url


def endpoint(url: str) -> str:
    """Where an attempt connects: `scheme://host:port` of a URL check_url accepted."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{parts.hostname}:{port}"


@dataclass(eq=False)  # compared by identity: the same delivery, not an equal one
class Delivery:
    url: str
    payload: dict[str, Any]
    # Where the message is, not its directory at submit: an operator may move it (err ->
    # done) between attempts, and records written to the old directory would be lost.
    store: MessageStore
    job_id: str
    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    endpoint: str = ""


Entry = tuple[float, int, Delivery]  # (when it is due, submission order, the delivery)


class WebhookSender:
    def __init__(self, attempts: int = 8, backoff: float = 1.0, senders: int = SENDERS) -> None:
        self.max_attempts = max(1, attempts)
        self.backoff = max(0.01, backoff)
        self._heap: list[Entry] = []  # waiting for their time, or for a sender
        # Due, but their endpoint has an attempt under way: back in the heap when it ends.
        # Set aside, not skipped at each look: a hanging endpoint's backlog is not scanned.
        self._parked: dict[str, list[Entry]] = {}
        self._parked_count = 0
        self._in_flight: dict[str, Delivery] = {}  # endpoint -> its attempt under way
        self._order = itertools.count()  # ties in time keep submission order
        self._cond = threading.Condition()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"webhooks-{n}", daemon=True)
            for n in range(max(1, senders))
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, url: str, payload: dict[str, Any], store: MessageStore, job_id: str) -> bool:
        """Queue a delivery for message `job_id` of `store`; False (and a warning) when its
        URL is no http(s) URL (recorded as given up) or too many are pending."""
        delivery = Delivery(url, payload, store, job_id)
        try:
            # The CLI and the console check it, but a body added with a plain ADDJOB is
            # not: urllib would "deliver" to file:///etc/hostname (success, no POST made)
            # and try ftp://. Given up at once, with the reason, for the console to show.
            delivery.endpoint = endpoint(check_url(url))
        except ValueError as exc:
            log.warning("webhook of %s not sent: %s", job_id, exc)
            delivery.errors.append(str(exc))
            _record(delivery, delivered=False, gave_up=True)
            return False
        with self._cond:
            if len(self._heap) + self._parked_count >= MAX_PENDING:
                log.warning("webhook to %s dropped: %d already pending", url, MAX_PENDING)
                return False
            # Recorded before a sender can see it: written after, this "not delivered
            # yet" could land over the sender's "delivered", and stay there for good.
            _record(delivery, delivered=False, gave_up=False)
            heapq.heappush(self._heap, (time.monotonic(), next(self._order), delivery))
            self._cond.notify()
        return True

    def pending(self) -> int:
        """Deliveries not finished: waiting for their time or their endpoint, or an
        attempt under way."""
        with self._cond:
            return len(self._heap) + self._parked_count + len(self._in_flight)

    def close(self, timeout: float = STOP_S) -> int:
        """Let deliveries due within `timeout` go out, then stop; the number dropped. None is
        waited for past `timeout`, not even an attempt under way (its thread is a daemon):
        a dead or hanging endpoint must not hold up the worker's exit."""
        deadline = time.monotonic() + timeout
        with self._cond:
            # Parked deliveries wait for an attempt in flight: covered by waiting for those.
            while time.monotonic() < deadline and (
                self._in_flight or (self._heap and self._heap[0][0] <= deadline)
            ):
                self._cond.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            self._closed = True
            dropped = [entry[2] for entry in self._heap]
            dropped += [entry[2] for entries in self._parked.values() for entry in entries]
            dropped += self._in_flight.values()
            self._heap.clear()
            self._parked.clear()
            self._parked_count = 0
            self._in_flight.clear()  # their threads see _closed when the answer comes
            # Under the lock: an attempt answered meanwhile writes its record after this one.
            for delivery in dropped:
                delivery.errors = [*delivery.errors[-4:], DROPPED]
                _record(delivery, delivered=False, gave_up=True)
            self._cond.notify_all()
        if dropped:
            log.warning("webhooks: %d deliveries dropped at stop, not sent within %gs",
                        len(dropped), timeout)  # fmt: skip
        return len(dropped)

    def _next(self) -> Delivery | None:
        """The earliest due delivery whose endpoint has no attempt under way, now in flight;
        None once the sender is closed. Called with the lock held."""
        while not self._closed:
            while self._heap and self._heap[0][0] <= time.monotonic():
                entry = heapq.heappop(self._heap)
                delivery = entry[2]
                if delivery.endpoint in self._in_flight:
                    self._parked.setdefault(delivery.endpoint, []).append(entry)
                    self._parked_count += 1
                    continue
                self._in_flight[delivery.endpoint] = delivery
                return delivery
            wait = self._heap[0][0] - time.monotonic() if self._heap else None
            self._cond.wait(wait)
        return None

    def _loop(self) -> None:
        while True:
            with self._cond:
                delivery = self._next()
            if delivery is None:
                return
            error = _post(delivery)
            # Under the lock, and in flight until settled: close() sees each delivery either
            # in flight, or waiting, or finished; none is left unrecorded at a stop.
            with self._cond:
                if self._closed:  # close() recorded it as dropped; only a success beats that
                    if error is None:
                        delivery.attempts += 1
                        _record(delivery, delivered=True, gave_up=False)
                    return
                del self._in_flight[delivery.endpoint]
                # Its endpoint is free: what waited for it competes again, in its order.
                for entry in self._parked.pop(delivery.endpoint, []):
                    heapq.heappush(self._heap, entry)
                    self._parked_count -= 1
                self._settle(delivery, error)
                self._cond.notify_all()

    def _settle(self, delivery: Delivery, error: str | None) -> None:
        """Record an attempt's outcome; schedule the next attempt of a failed one."""
        delivery.attempts += 1
        if error is None:
            _record(delivery, delivered=True, gave_up=False)
            return
        delivery.errors = [*delivery.errors[-4:], error]
        gave_up = delivery.attempts >= self.max_attempts
        _record(delivery, delivered=False, gave_up=gave_up)
        if gave_up:
            log.warning("webhook to %s given up after %d attempts: %s",
                        delivery.url, delivery.attempts, error)  # fmt: skip
            return
        delay = min(MAX_DELAY_S, self.backoff * 2 ** (delivery.attempts - 1))
        heapq.heappush(self._heap, (time.monotonic() + delay, next(self._order), delivery))


def _post(delivery: Delivery) -> str | None:
    """One attempt; None on a 2xx answer, else what went wrong."""
    body = json.dumps(delivery.payload).encode()
    request = urllib.request.Request(
        delivery.url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "conveyor-worker"},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            response.read(65536)  # the answer is not used; a little is read to end cleanly
            return None
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except Exception as exc:  # refused, timed out, a broken answer: all worth a retry
        return f"{type(exc).__name__}: {exc}"


def _record(delivery: Delivery, *, delivered: bool, gave_up: bool) -> None:
    """webhook.json in the message's directory as it is now; an operator may have deleted
    the message meanwhile, and then there is nothing to write to."""
    doc = {
        "url": delivery.url,
        "attempts": delivery.attempts,
        "delivered": delivered,
        "gave_up": gave_up,
        "errors": delivery.errors,
        "updated": time.time(),
    }
    # An OSError other than the message moving (looked for again by the store): the
    # record is for the console; the delivery goes on without it.
    with contextlib.suppress(OSError):
        delivery.store.write_in_message(delivery.job_id, "webhook.json", doc)
