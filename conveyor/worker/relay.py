"""`dup` and relay: a clone of a message to a local queue, or to another cluster.

A relay must never create two messages at the destination when it is retried (the sender
died after ADDJOB, or the reply was lost). RQ does it with a two-phase commit; a Disque node
has no such command, so the key `sha1(source message ID, destination)` does the job in two
places:

1. The sender looks for a commit record under the key on the destination node before adding
   (a claim queue holding "commit <job id>"); if one exists the earlier ID is the answer.
2. A sender that died between ADDJOB and its commit record leaves no record, so the retry
   adds a second job; both carry the key, and the receiving worker runs only the first one
   it sees (a claim on the key), settling the other as done "duplicate ... not run".
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from conveyor.client import Client, ConveyorError, Job
from conveyor.client._address import parse_address
from conveyor.worker import claims
from conveyor.worker.envelope import Envelope
from conveyor.worker.queuedir import QueueConfig, QueueConfigError

if TYPE_CHECKING:
    from conveyor.worker.runner import QueueRunner

_COMMIT_TTL_S = 7 * 86400


class RelayError(Exception):
    """The clone or relay was refused; the text goes back to the script after `fail`."""


def parse_conveyor_url(url: str) -> tuple[str, str]:
    """`conveyor://host:port/queue` -> ("host:port", "queue")."""
    parsed = urlparse(url)
    queue = parsed.path.strip("/")
    if parsed.scheme != "conveyor" or not parsed.netloc or not queue or "/" in queue:
        raise RelayError(f"bad destination {url!r}: expected conveyor://host:port/queue")
    try:
        parse_address(parsed.netloc)  # here, not in Client(): its ValueError ended the run
    except ValueError as exc:
        raise RelayError(f"bad destination {url!r}: {exc}") from None
    return parsed.netloc, queue


def relay_key(source_id: str, destination: str) -> str:
    return hashlib.sha1(f"{source_id}\x00{destination}".encode()).hexdigest()


def relay_message(url: str, envelope: Envelope, key: str, *, delay: int = 0) -> str:
    """Add `envelope` to the queue at `url` at most once per `key`; the destination's ID."""
    address, queue = parse_conveyor_url(url)
    for attachment in envelope.attachments:
        attachment.verify()  # never forward a corrupted attachment
    envelope.idempotency_key = key
    record = claims.claim_queue("relay", key)
    try:
        with Client([address], socket_timeout=10) as client:
            committed = _committed_id(client, record)
            if committed is not None:
                return committed
            new_id = client.add_job(queue, envelope.to_json(), delay=delay or None)
            client.add_job(record, f"commit {new_id}".encode(), ttl=_COMMIT_TTL_S)
            return new_id
    except ConveyorError as exc:
        raise RelayError(f"relay to {url} failed: {exc}") from None


def _committed_id(client: Client, record: str) -> str | None:
    for job in client.qpeek(record, 10):
        text = job.body.decode("utf-8", "replace")
        if text.startswith("commit "):
            return text.split(" ", 1)[1]
    return None


def dup_message(runner: QueueRunner, job: Job, envelope: Envelope, text: str) -> str:
    """The `dup DUE-X-DEST` status command: the new message's ID, or RelayError."""
    due_text, _, rest = text.strip().partition("-")
    _flag, _, destination = rest.partition("-")
    if not due_text.isdigit() or not destination:
        raise RelayError(f"bad dup request {text!r}: expected DUE-X-DEST")
    due = int(due_text)
    clone = envelope.clone()
    clone.due_at = time.time() + due
    address = runner.client.address or ""
    clone.origin = envelope.origin or f"conveyor://{address}/{runner.config.name}/{job.id}"
    if destination.startswith("conveyor://"):
        return relay_message(destination, clone, relay_key(job.id, destination), delay=due)
    if destination.startswith(("http://", "https://")):
        raise RelayError("relay to an HTTP RQ endpoint is not supported; use conveyor://")
    target = _local_queue(runner.config, destination)
    state = runner.client.pause(target.name, "state")
    if state in ("in", "all"):
        raise RelayError(f"queue {destination} is paused")
    return runner.client.add_job(
        target.name, clone.to_json(), delay=due or None, retry=target.retry
    )


def _local_queue(config: QueueConfig, name: str) -> QueueConfig:
    """A local destination must be a queue directory beside this one (RQ's queue/NAME)."""
    if "/" in name or name in ("", ".", ".."):
        raise RelayError(f"bad queue name {name!r}")
    try:
        return QueueConfig.load(config.directory.parent / name)
    except QueueConfigError:
        raise RelayError(f"no such queue: {name}") from None
